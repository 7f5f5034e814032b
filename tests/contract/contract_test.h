// What the contract suites share (task_store_contract.cc, run_history_contract.cc): the test
// base that opens a store on a fresh StoreFixture, and small helpers.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "contract/store_fixture.h"
#include "fixtures/task_schedules.h"
#include "stagehand/store/task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::contract {

using ::stagehand::testing::IsOk;

inline constexpr char kCancelledJson[] = R"({"name":"Error","message":"Task was cancelled"})";
inline constexpr char kTimedOutJson[] = R"({"name":"Error","message":"Task timed out"})";

// Returns a schedule in UTC with `cadence`, an optional initial delay and `timeout`.
inline TaskSchedule Schedule(std::string_view cadence,
                             std::optional<std::string> initial_delay = std::nullopt,
                             std::string timeout = "PT1M") {
  return testing::ScheduleFrom(cadence, std::move(initial_delay), std::move(timeout));
}

// Returns `t` as ISO-8601 with its microseconds, or "NULL".
inline std::string Show(const std::optional<WallTime>& t) {
  if (!t) return "NULL";
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(t->time_since_epoch()).count() % 1000;
  return FormatIsoInstantUtc(*t) + "+" + std::to_string(micros) + "us";
}

// The base of the contract suites: a fresh fixture (database) and a store on it per test, with
// helpers that fail the test on unexpected errors. Not thread-safe (tests call it from their main
// thread).
class ContractTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fixture_ = MakeStoreFixture();
    ASSERT_NE(fixture_, nullptr);
    store_ = fixture_->OpenStore();
    ASSERT_NE(store_, nullptr);
  }

  // Lets `duration` pass, and the store's time resolution on top: for waits that a time the store
  // computed as now + duration must have passed, since a store may round it up to its resolution.
  void LetStoredTimePass(std::chrono::milliseconds duration) {
    fixture_->LetTimePass(duration + fixture_->time_resolution());
  }

  WallTime Now() {
    Result<WallTime> now = store_->DatabaseNow();
    EXPECT_THAT(now, IsOk());
    return now.ok() ? *now : WallTime{};
  }

  TaskRow Row(const std::string& id) {
    std::optional<TaskRow> row = fixture_->GetRawRow(id);
    if (!row) {
      ADD_FAILURE() << "row " << id << " is missing";
      return TaskRow{};
    }
    return *row;
  }

  std::optional<WallTime> Upsert(const std::string& id, const TaskSchedule& schedule) {
    Result<UpsertResult> result = store_->Upsert(id, schedule);
    EXPECT_THAT(result, IsOk()) << id;
    return result.ok() ? result->next_run_start_at : std::nullopt;
  }

  bool Claim(const std::string& id, const std::string& ticket,
             std::chrono::milliseconds timeout = std::chrono::minutes(1),
             std::chrono::milliseconds lease = std::chrono::minutes(1)) {
    Result<ClaimResult> result = store_->Claim(id, ticket, timeout, lease);
    EXPECT_THAT(result, IsOk()) << id;
    return result.ok() && result->claimed;
  }

  bool Release(const std::string& id, const std::string& ticket, const TaskSchedule& schedule,
               const std::optional<std::string>& error_json = std::nullopt) {
    Result<bool> result = store_->Release(id, ticket, schedule, error_json);
    EXPECT_THAT(result, IsOk()) << id;
    return result.ok() && *result;
  }

  PollResult Poll(const std::vector<std::string>& ids, bool sweep = false) {
    Result<PollResult> result = store_->Poll(ids, sweep);
    EXPECT_THAT(result, IsOk());
    return result.ok() ? std::move(*result) : PollResult{};
  }

  Readiness ReadinessOf(const std::string& id) {
    PollResult poll = Poll({id});
    return poll.entries.size() == 1 ? poll.entries[0].readiness : Readiness::kMissing;
  }

  // Checks lo <= t <= hi, widened by the store's time resolution.
  ::testing::AssertionResult Within(const std::optional<WallTime>& t, WallTime lo, WallTime hi) {
    const std::chrono::milliseconds slack = fixture_->time_resolution();
    if (!t) {
      return ::testing::AssertionFailure()
             << "is NULL, expected within [" << Show(lo) << ", " << Show(hi) << "]";
    }
    if (*t < lo - slack || *t > hi + slack) {
      return ::testing::AssertionFailure()
             << Show(t) << " is not within [" << Show(lo) << ", " << Show(hi) << "]";
    }
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult Same(const std::optional<WallTime>& t, WallTime expected) {
    return Within(t, expected, expected);
  }

  std::unique_ptr<StoreFixture> fixture_;
  std::unique_ptr<TaskStore> store_;
};

}  // namespace stagehand::contract
