// The RunHistory contract: the run history of every TaskStore (memory, SQLite, PostgreSQL), checked
// through the StoreFixture seam. Writes and reads of runs, paging, the output bound, retention by
// count and by age, runs closed as lost by sweeps, the history written by claims and releases in
// their own round trip, and two stores sharing one database.
//
// Time: runs are recorded with explicit start and end times where the test needs them, so nothing
// here waits for the clock; runs that claims and releases write carry the database's time, and are
// compared with the task row's times the same statement wrote.

#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "contract/contract_test.h"
#include "contract/store_fixture.h"
#include "stagehand/model/task_run.h"
#include "stagehand/model/task_state.h"
#include "stagehand/store/run_history.h"
#include "stagehand/store/task_store.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::contract {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

constexpr hours kDay{24};

WallTime Millis(WallTime t) { return std::chrono::floor<milliseconds>(t); }

RunOrigin Origin(RunTrigger trigger = RunTrigger::kSchedule,
                 std::optional<WallTime> slot = std::nullopt, int attempt = 1) {
  return RunOrigin{"host-a", 4242, trigger, slot, attempt};
}

RunFinish Finish(RunOutcome outcome, std::string output = {}) {
  RunFinish finish;
  finish.outcome = outcome;
  finish.output_tail = std::move(output);
  return finish;
}

std::vector<std::string> RunIds(const std::vector<TaskRun>& runs) {
  std::vector<std::string> ids;
  ids.reserve(runs.size());
  for (const TaskRun& run : runs) ids.push_back(run.run_id);
  return ids;
}

class RunHistoryContractTest : public ContractTest {
 protected:
  void SetUp() override {
    ContractTest::SetUp();
    if (HasFatalFailure()) return;
    history_ = store_->history();
    ASSERT_NE(history_, nullptr) << "the store keeps no run history";
  }

  void Start(const std::string& run_id, const std::string& task_id,
             std::optional<WallTime> started_at, RunOrigin origin = Origin()) {
    const std::vector<RunStart> starts = {RunStart{run_id, task_id, std::move(origin), started_at}};
    const Status status = history_->RecordStarts(starts);
    EXPECT_THAT(status, IsOk()) << run_id;
  }

  std::size_t End(const std::string& run_id, RunFinish finish,
                  std::optional<WallTime> ended_at = std::nullopt) {
    const std::vector<RunEnd> ends = {RunEnd{run_id, std::move(finish), ended_at}};
    Result<std::size_t> closed = history_->RecordEnds(ends);
    EXPECT_THAT(closed, IsOk()) << run_id;
    return closed.ok() ? *closed : 0;
  }

  TaskRun Get(const std::string& run_id) {
    Result<TaskRun> run = history_->GetRun(run_id);
    EXPECT_THAT(run, IsOk()) << run_id;
    return run.ok() ? std::move(*run) : TaskRun{};
  }

  RunPage Page(const std::string& task_id, int limit,
               const std::optional<std::string>& before = std::nullopt) {
    Result<RunPage> page = history_->ListRuns(task_id, limit, before);
    EXPECT_THAT(page, IsOk()) << task_id;
    return page.ok() ? std::move(*page) : RunPage{};
  }

  // Returns the run ids of every run of `task_id`, newest first, in one page.
  std::vector<std::string> AllRunIds(const std::string& task_id) {
    return RunIds(Page(task_id, kMaxRunPageSize).runs);
  }

  StatusCode CodeOfGet(const std::string& run_id) {
    return history_->GetRun(run_id).status().code();
  }

  std::vector<ClaimResult> ClaimMany(const std::vector<ClaimRequest>& claims) {
    Result<std::vector<ClaimResult>> claimed = store_->ClaimMany(claims, minutes(1));
    EXPECT_THAT(claimed, IsOk());
    return claimed.ok() ? std::move(*claimed) : std::vector<ClaimResult>{};
  }

  std::vector<ReleaseResult> ReleaseMany(const std::vector<ReleaseRequest>& releases) {
    Result<std::vector<ReleaseResult>> released = store_->ReleaseMany(releases);
    EXPECT_THAT(released, IsOk());
    return released.ok() ? std::move(*released) : std::vector<ReleaseResult>{};
  }

  // Claims a due task for `ticket` with a history origin, expecting the claim to succeed.
  void ClaimWithHistory(const std::string& id, const std::string& ticket,
                        RunOrigin origin = Origin()) {
    const std::vector<ClaimResult> claimed =
        ClaimMany({ClaimRequest{id, ticket, minutes(1), std::nullopt, std::move(origin)}});
    ASSERT_EQ(claimed.size(), 1u);
    EXPECT_TRUE(claimed[0].claimed) << id;
  }

  // What a release records of a run that ended with `finish` (started a minute ago).
  ReleasedRun Released(RunFinish finish, RunOrigin origin = Origin()) {
    return ReleasedRun{std::move(finish), std::move(origin), Millis(Now()) - minutes(1)};
  }

  // Makes the run holding `id` expire a minute ago, as a host that stopped renewing leaves it.
  void ExpireRun(const std::string& id) {
    TaskRow row = Row(id);
    ASSERT_TRUE(row.current_run_ticket.has_value()) << id;
    row.current_run_expires_at = Now() - minutes(1);
    fixture_->PutRawRow(row);
  }

  RunHistory* history_ = nullptr;
};

// --- Writes and reads -------------------------------------------------------------------------

TEST_F(RunHistoryContractTest, RecordsStartsAndEndsAsGiven) {
  const WallTime base = Millis(Now()) - minutes(10);
  const RunOrigin origin = Origin(RunTrigger::kCatchUp, base - seconds(3), 2);
  Start("run-1", "task", base, origin);
  const WallTime before = Now();
  Start("run-2", "task", std::nullopt, Origin(RunTrigger::kManual));
  const WallTime after = Now();

  TaskRun first = Get("run-1");
  EXPECT_EQ(first.run_id, "run-1");
  EXPECT_EQ(first.task_id, "task");
  EXPECT_EQ(first.origin, origin);
  EXPECT_TRUE(Same(first.started_at, base));
  EXPECT_FALSE(first.ended_at.has_value());
  EXPECT_EQ(first.finish.outcome, RunOutcome::kRunning);
  EXPECT_EQ(first.start_lag(), milliseconds(3000));
  EXPECT_FALSE(first.duration().has_value());

  const TaskRun second = Get("run-2");
  EXPECT_TRUE(Within(second.started_at, before, after)) << "a start without a time is now";
  EXPECT_EQ(second.origin.trigger, RunTrigger::kManual);
  EXPECT_FALSE(second.origin.slot.has_value());
  EXPECT_FALSE(second.start_lag().has_value());

  RunFinish failed = Finish(RunOutcome::kFailed, "out\nerr\n");
  failed.error_json = ErrorJson("boom");
  failed.exit_code = 3;
  EXPECT_EQ(End("run-1", failed, base + milliseconds(1500)), 1u);
  first = Get("run-1");
  EXPECT_TRUE(Same(first.ended_at, base + milliseconds(1500)));
  EXPECT_EQ(first.duration(), milliseconds(1500));
  EXPECT_EQ(first.finish, failed);
  EXPECT_EQ(first.origin, origin);

  RunFinish timed_out = Finish(RunOutcome::kTimedOut);
  timed_out.error_json = ErrorJson("Task timed out");
  timed_out.signal = 9;
  const WallTime end_before = Now();
  EXPECT_EQ(End("run-2", timed_out), 1u);
  const WallTime end_after = Now();
  const TaskRun ended = Get("run-2");
  EXPECT_TRUE(Within(ended.ended_at, end_before, end_after)) << "an end without a time is now";
  EXPECT_EQ(ended.finish, timed_out);

  Start("run-3", "task", base + seconds(1), Origin(RunTrigger::kRetry, base, 3));
  RunFinish answered = Finish(RunOutcome::kSucceeded);
  answered.http_status = 204;
  EXPECT_EQ(End("run-3", answered, base + seconds(2)), 1u);
  EXPECT_EQ(Get("run-3").finish, answered);
  EXPECT_EQ(Get("run-3").origin.attempt, 3);
}

TEST_F(RunHistoryContractTest, DuplicateStartsAndEndsOfEndedOrUnknownRunsAreIgnored) {
  const WallTime base = Millis(Now()) - minutes(10);
  Start("dup", "task", base);
  RunOrigin other = Origin();
  other.host = "host-b";
  Start("dup", "task", base + seconds(5), other);
  EXPECT_EQ(Get("dup").origin.host, "host-a");
  EXPECT_TRUE(Same(Get("dup").started_at, base));

  EXPECT_EQ(End("dup", Finish(RunOutcome::kSucceeded), base + seconds(1)), 1u);
  EXPECT_EQ(End("dup", Finish(RunOutcome::kFailed), base + seconds(2)), 0u);
  EXPECT_EQ(End("never-started", Finish(RunOutcome::kFailed)), 0u);
  EXPECT_EQ(Get("dup").finish.outcome, RunOutcome::kSucceeded);
  EXPECT_TRUE(Same(Get("dup").ended_at, base + seconds(1)));
  EXPECT_EQ(CodeOfGet("never-started"), StatusCode::kNotFound);
  EXPECT_EQ(history_->GetRun("never-started").status().message(),
            "Run never-started does not exist");
}

TEST_F(RunHistoryContractTest, MalformedWritesAreInvalidArguments) {
  const std::vector<RunStart> no_run_id = {RunStart{"", "task", Origin(), std::nullopt}};
  EXPECT_THAT(history_->RecordStarts(no_run_id), StatusIs(StatusCode::kInvalidArgument));
  const std::vector<RunStart> no_task_id = {RunStart{"run", "", Origin(), std::nullopt}};
  EXPECT_THAT(history_->RecordStarts(no_task_id), StatusIs(StatusCode::kInvalidArgument));
  const std::vector<RunEnd> running = {RunEnd{"run", Finish(RunOutcome::kRunning), std::nullopt}};
  EXPECT_THAT(history_->RecordEnds(running), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(CodeOfGet("run"), StatusCode::kNotFound) << "nothing was written";
  EXPECT_THAT(history_->RecordStarts({}), IsOk());
  Result<std::size_t> none = history_->RecordEnds({});
  ASSERT_THAT(none, IsOk());
  EXPECT_EQ(*none, 0u);
}

// --- Paging -----------------------------------------------------------------------------------

TEST_F(RunHistoryContractTest, PagesAreNewestFirstAndCursorsContinueThem) {
  const WallTime base = Millis(Now()) - hours(1);
  for (int i = 0; i < 6; ++i) Start("r" + std::to_string(i), "paged", base + seconds(i));
  Start("tie-a", "paged", base + seconds(6));
  Start("tie-b", "paged", base + seconds(6));
  Start("elsewhere", "other", base + seconds(10));
  EXPECT_EQ(End("r5", Finish(RunOutcome::kSucceeded, "printed"), base + seconds(7)), 1u);

  RunPage first = Page("paged", 3);
  EXPECT_EQ(RunIds(first.runs), (std::vector<std::string>{"tie-b", "tie-a", "r5"}));
  ASSERT_TRUE(first.next_cursor.has_value());
  for (const TaskRun& run : first.runs) {
    EXPECT_TRUE(run.finish.output_tail.empty()) << run.run_id << ": pages carry no output";
  }
  EXPECT_EQ(first.runs[2].finish.outcome, RunOutcome::kSucceeded);
  EXPECT_EQ(Get("r5").finish.output_tail, "printed");

  // A run started after the first page was read does not shift the next ones.
  Start("newest", "paged", base + seconds(20));
  RunPage second = Page("paged", 3, first.next_cursor);
  EXPECT_EQ(RunIds(second.runs), (std::vector<std::string>{"r4", "r3", "r2"}));
  ASSERT_TRUE(second.next_cursor.has_value());
  RunPage last = Page("paged", 3, second.next_cursor);
  EXPECT_EQ(RunIds(last.runs), (std::vector<std::string>{"r1", "r0"}));
  EXPECT_FALSE(last.next_cursor.has_value());

  // A page that ends exactly at the oldest run has no cursor either.
  RunPage exact = Page("paged", 4, second.next_cursor);
  EXPECT_EQ(RunIds(exact.runs), (std::vector<std::string>{"r1", "r0"}));
  EXPECT_FALSE(exact.next_cursor.has_value());
  RunPage four = Page("paged", 4, "r4");
  EXPECT_EQ(RunIds(four.runs), (std::vector<std::string>{"r3", "r2", "r1", "r0"}));
  EXPECT_FALSE(four.next_cursor.has_value());

  // `before` may name a run instead of a cursor.
  EXPECT_EQ(RunIds(Page("paged", 10, "r3").runs), (std::vector<std::string>{"r2", "r1", "r0"}));
  EXPECT_EQ(RunIds(Page("paged", 2, "tie-b").runs), (std::vector<std::string>{"tie-a", "r5"}));

  EXPECT_EQ(AllRunIds("paged"), (std::vector<std::string>{"newest", "tie-b", "tie-a", "r5", "r4",
                                                          "r3", "r2", "r1", "r0"}));
  EXPECT_EQ(AllRunIds("other"), (std::vector<std::string>{"elsewhere"}));
  RunPage empty = Page("no-runs", 5);
  EXPECT_TRUE(empty.runs.empty());
  EXPECT_FALSE(empty.next_cursor.has_value());
}

TEST_F(RunHistoryContractTest, BadPageRequestsAreInvalidArguments) {
  Start("r", "task", std::nullopt);
  EXPECT_THAT(history_->ListRuns("task", 0, std::nullopt), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(history_->ListRuns("task", kMaxRunPageSize + 1, std::nullopt),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(history_->ListRuns("task", 10, std::string("no-such-run")),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(RunIds(Page("task", kMaxRunPageSize).runs), (std::vector<std::string>{"r"}));
}

// --- Output -----------------------------------------------------------------------------------

TEST_F(RunHistoryContractTest, OutputKeepsItsLastBytesUpToTheLimit) {
  EXPECT_EQ(history_->limits(), RunHistoryLimits{});
  EXPECT_EQ(history_->limits().max_output_bytes, 64u * 1024);
  std::string output(100 * 1024, '\0');
  for (std::size_t i = 0; i < output.size(); ++i) output[i] = static_cast<char>(i % 251);
  Start("loud", "task", std::nullopt);
  EXPECT_EQ(End("loud", Finish(RunOutcome::kSucceeded, output)), 1u);
  const std::string kept = Get("loud").finish.output_tail;
  EXPECT_EQ(kept.size(), 64u * 1024);
  EXPECT_TRUE(kept == output.substr(output.size() - 64 * 1024)) << "the last 64 KiB, byte for byte";

  RunHistoryLimits limits;
  limits.max_output_bytes = 10;
  history_->SetLimits(limits);
  EXPECT_EQ(history_->limits(), limits);
  Start("short", "task", std::nullopt);
  EXPECT_EQ(End("short", Finish(RunOutcome::kFailed, "0123456789abcdef")), 1u);
  EXPECT_EQ(Get("short").finish.output_tail, "6789abcdef");
  Start("quiet", "task", std::nullopt);
  EXPECT_EQ(End("quiet", Finish(RunOutcome::kSucceeded)), 1u);
  EXPECT_EQ(Get("quiet").finish.output_tail, "");
}

// --- Retention --------------------------------------------------------------------------------

TEST_F(RunHistoryContractTest, RetentionKeepsTheNewestRunsOfEachTask) {
  RunHistoryLimits limits;
  limits.max_runs_per_task = 3;
  history_->SetLimits(limits);
  const WallTime base = Millis(Now()) - hours(1);
  Start("b0", "b", base);
  EXPECT_EQ(End("b0", Finish(RunOutcome::kSucceeded), base + seconds(1)), 1u);
  Start("b1", "b", base + seconds(2));
  EXPECT_EQ(End("b1", Finish(RunOutcome::kSucceeded), base + seconds(3)), 1u);
  for (int i = 0; i < 6; ++i) {
    const std::string id = "a" + std::to_string(i);
    Start(id, "a", base + seconds(10 * i));
    EXPECT_EQ(End(id, Finish(RunOutcome::kSucceeded), base + seconds(10 * i + 5)), 1u);
  }
  // Each task keeps its three newest runs; the other task keeps its own. (How a store treats the
  // runs that newer ones overtake while they still run differs: ADR 0011.)
  EXPECT_EQ(AllRunIds("a"), (std::vector<std::string>{"a5", "a4", "a3"}));
  EXPECT_EQ(AllRunIds("b"), (std::vector<std::string>{"b1", "b0"}));
  EXPECT_EQ(CodeOfGet("a0"), StatusCode::kNotFound);
  EXPECT_EQ(CodeOfGet("a2"), StatusCode::kNotFound);
}

TEST_F(RunHistoryContractTest, PruneExpiredRemovesRunsOlderThanTheMaxAgeInBatches) {
  EXPECT_EQ(history_->limits().max_age, 30 * kDay);
  const WallTime now = Millis(Now());
  const auto ended_run = [&](const std::string& id, const std::string& task, WallTime ended) {
    Start(id, task, ended - seconds(1));
    EXPECT_EQ(End(id, Finish(RunOutcome::kSucceeded), ended), 1u);
  };
  ended_run("ancient-1", "t1", now - 40 * kDay);
  ended_run("ancient-2", "t2", now - 35 * kDay);
  ended_run("ancient-3", "t1", now - 31 * kDay);
  Start("abandoned", "t3", now - 32 * kDay);
  ended_run("month-old", "t2", now - 29 * kDay);
  ended_run("fresh", "t1", now - minutes(1));
  Start("running", "t3", now - minutes(1));

  Result<std::size_t> pruned = history_->PruneExpired(2);
  ASSERT_THAT(pruned, IsOk());
  EXPECT_EQ(*pruned, 2u);
  EXPECT_EQ(CodeOfGet("ancient-1"), StatusCode::kNotFound) << "oldest first";
  EXPECT_EQ(CodeOfGet("ancient-2"), StatusCode::kNotFound);
  EXPECT_EQ(CodeOfGet("abandoned"), StatusCode::kOk);
  pruned = history_->PruneExpired(10);
  ASSERT_THAT(pruned, IsOk());
  EXPECT_EQ(*pruned, 2u) << "runs age from their start, ended or not";
  EXPECT_EQ(CodeOfGet("abandoned"), StatusCode::kNotFound);
  EXPECT_EQ(CodeOfGet("ancient-3"), StatusCode::kNotFound);
  pruned = history_->PruneExpired(10);
  ASSERT_THAT(pruned, IsOk());
  EXPECT_EQ(*pruned, 0u);
  EXPECT_EQ(AllRunIds("t1"), (std::vector<std::string>{"fresh"}));
  EXPECT_EQ(AllRunIds("t2"), (std::vector<std::string>{"month-old"}));
  EXPECT_EQ(AllRunIds("t3"), (std::vector<std::string>{"running"}));

  RunHistoryLimits limits;
  limits.max_age = hours(1);
  history_->SetLimits(limits);
  pruned = history_->PruneExpired(10);
  ASSERT_THAT(pruned, IsOk());
  EXPECT_EQ(*pruned, 1u);
  EXPECT_EQ(CodeOfGet("month-old"), StatusCode::kNotFound);
  EXPECT_EQ(CodeOfGet("fresh"), StatusCode::kOk);
}

// --- Lost runs --------------------------------------------------------------------------------

TEST_F(RunHistoryContractTest, SweepClosesTheRunsOfTheClaimsItResetsAsLost) {
  Upsert("swept", Schedule("PT10M"));
  Upsert("marked", Schedule("PT10M"));
  Upsert("alive", Schedule("PT10M"));
  ClaimWithHistory("swept", "t-swept");
  ClaimWithHistory("marked", "t-marked");
  ClaimWithHistory("alive", "t-alive");
  Upsert("pausing", Schedule("PT10M"));
  ClaimWithHistory("pausing", "t-pausing");
  ASSERT_THAT(store_->Cancel("marked", minutes(1)), IsOk());
  ASSERT_THAT(store_->Pause("pausing", PauseRequest{"alice", "", std::nullopt}, minutes(1)),
              IsOk());
  Start("local-run", "local", std::nullopt);
  ExpireRun("swept");
  ExpireRun("marked");
  ExpireRun("pausing");

  Result<std::vector<std::string>> swept = store_->SweepExpired();
  ASSERT_THAT(swept, IsOk());
  std::sort(swept->begin(), swept->end());
  EXPECT_EQ(*swept, (std::vector<std::string>{"marked", "pausing", "swept"}));
  EXPECT_TRUE(PauseOf(Row("pausing")).has_value());
  for (const char* id : {"swept", "marked", "pausing"}) {
    const TaskRun run = Get(std::string("t-") + id);
    EXPECT_EQ(run.finish.outcome, RunOutcome::kLost) << id;
    EXPECT_EQ(run.finish.error_json, kTimedOutJson) << id;
    ASSERT_TRUE(run.ended_at.has_value()) << id;
    EXPECT_TRUE(Same(run.ended_at, *Row(id).last_run_ended_at)) << id;
  }
  EXPECT_EQ(Get("t-alive").finish.outcome, RunOutcome::kRunning);
  EXPECT_EQ(Get("local-run").finish.outcome, RunOutcome::kRunning);
}

TEST_F(RunHistoryContractTest, PollsThatSweepCloseTheSweptRunsAsLost) {
  Upsert("by-poll", Schedule("PT10M"));
  Upsert("by-poll-changed", Schedule("PT10M"));
  ClaimWithHistory("by-poll", "t-poll");
  ClaimWithHistory("by-poll-changed", "t-poll-changed");
  ExpireRun("by-poll");
  PollResult polled = Poll({"by-poll"}, /*sweep=*/true);
  EXPECT_EQ(polled.swept_ids, (std::vector<std::string>{"by-poll"}));
  EXPECT_EQ(Get("t-poll").finish.outcome, RunOutcome::kLost);
  EXPECT_EQ(Get("t-poll-changed").finish.outcome, RunOutcome::kRunning);

  ExpireRun("by-poll-changed");
  const std::vector<std::string> ids = {"by-poll-changed"};
  const std::vector<std::optional<std::int64_t>> known = {std::nullopt};
  Result<PollResult> changed = store_->PollChanged(ids, known, /*sweep_expired=*/true);
  ASSERT_THAT(changed, IsOk());
  EXPECT_EQ(changed->swept_ids, ids);
  const TaskRun lost = Get("t-poll-changed");
  EXPECT_EQ(lost.finish.outcome, RunOutcome::kLost);
  EXPECT_TRUE(Same(lost.ended_at, *Row("by-poll-changed").last_run_ended_at));
}

TEST_F(RunHistoryContractTest, TheOwnersOwnEndReplacesLost) {
  Upsert("fenced", Schedule("PT10M"));
  ClaimWithHistory("fenced", "t-fenced");
  ExpireRun("fenced");
  ASSERT_THAT(store_->SweepExpired(), IsOk());
  ASSERT_EQ(Get("t-fenced").finish.outcome, RunOutcome::kLost);

  // The owner comes back and releases: its ticket no longer holds the row, but its account of the
  // run (stopped because it could not renew) replaces the sweep's.
  RunFinish fenced = Finish(RunOutcome::kFenced, "stopping\n");
  fenced.error_json = ErrorJson("lease lost");
  fenced.signal = 15;
  const std::vector<ReleaseResult> released = ReleaseMany({ReleaseRequest{
      "fenced", "t-fenced", Schedule("PT10M"), fenced.error_json, Released(fenced)}});
  ASSERT_EQ(released.size(), 1u);
  EXPECT_FALSE(released[0].released);
  EXPECT_EQ(Get("t-fenced").finish, fenced);

  // So for local runs marked lost by other means.
  Start("local", "task", std::nullopt);
  Result<std::size_t> lost = history_->MarkLost(std::vector<std::string>{"local"}, kTimedOutJson);
  ASSERT_THAT(lost, IsOk());
  EXPECT_EQ(*lost, 1u);
  EXPECT_EQ(End("local", Finish(RunOutcome::kSucceeded)), 1u);
  EXPECT_EQ(Get("local").finish.outcome, RunOutcome::kSucceeded);
}

TEST_F(RunHistoryContractTest, MarkLostClosesOnlyRunningRuns) {
  Start("running", "task", std::nullopt);
  Start("done", "task", std::nullopt);
  EXPECT_EQ(End("done", Finish(RunOutcome::kSucceeded)), 1u);
  const std::string error = ErrorJson("host gone");
  const WallTime before = Now();
  Result<std::size_t> lost =
      history_->MarkLost(std::vector<std::string>{"running", "done", "unknown"}, error);
  const WallTime after = Now();
  ASSERT_THAT(lost, IsOk());
  EXPECT_EQ(*lost, 1u);
  const TaskRun run = Get("running");
  EXPECT_EQ(run.finish.outcome, RunOutcome::kLost);
  EXPECT_EQ(run.finish.error_json, error);
  EXPECT_TRUE(Within(run.ended_at, before, after));
  EXPECT_EQ(Get("done").finish.outcome, RunOutcome::kSucceeded);
  Result<std::size_t> again = history_->MarkLost(std::vector<std::string>{"running"}, error);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(*again, 0u);
}

// --- Claims and releases ----------------------------------------------------------------------

TEST_F(RunHistoryContractTest, ClaimManyRecordsTheRunsItClaimsWithAnOrigin) {
  Upsert("with", Schedule("PT10M"));
  Upsert("without", Schedule("PT10M"));
  Upsert("future", Schedule("PT10M", "PT1H"));
  const WallTime slot = Millis(Now()) - seconds(2);
  const RunOrigin origin = Origin(RunTrigger::kSchedule, slot, 1);
  const std::vector<ClaimResult> claimed = ClaimMany({
      ClaimRequest{"with", "t-with", minutes(1), std::nullopt, origin},
      ClaimRequest{"without", "t-without", minutes(1), std::nullopt},
      ClaimRequest{"future", "t-future", minutes(1), std::nullopt, origin},
      ClaimRequest{"missing", "t-missing", minutes(1), std::nullopt, origin},
  });
  ASSERT_EQ(claimed.size(), 4u);
  EXPECT_TRUE(claimed[0].claimed);
  EXPECT_TRUE(claimed[1].claimed);
  EXPECT_FALSE(claimed[2].claimed);
  EXPECT_FALSE(claimed[3].claimed);

  const TaskRun run = Get("t-with");
  EXPECT_EQ(run.task_id, "with");
  EXPECT_EQ(run.origin, origin);
  EXPECT_EQ(run.finish.outcome, RunOutcome::kRunning);
  const TaskRow row = Row("with");
  ASSERT_TRUE(row.current_run_started_at.has_value());
  EXPECT_TRUE(Same(run.started_at, *row.current_run_started_at)) << "started at the claim's time";
  EXPECT_EQ(CodeOfGet("t-without"), StatusCode::kNotFound) << "no origin, no history";
  EXPECT_EQ(CodeOfGet("t-future"), StatusCode::kNotFound) << "not claimed, no history";
  EXPECT_EQ(CodeOfGet("t-missing"), StatusCode::kNotFound);
  EXPECT_EQ(AllRunIds("with"), (std::vector<std::string>{"t-with"}));
}

TEST_F(RunHistoryContractTest, ReleaseManyEndsTheRunsAndTrimsTheirTasks) {
  RunHistoryLimits limits;
  limits.max_runs_per_task = 2;
  history_->SetLimits(limits);
  const TaskSchedule manual = Schedule("manual");
  Upsert("job", manual);
  Upsert("plain", manual);
  std::vector<RunFinish> finishes = {Finish(RunOutcome::kSucceeded), Finish(RunOutcome::kFailed),
                                     Finish(RunOutcome::kSucceeded, "done\n")};
  finishes[1].error_json = ErrorJson("exit 1");
  finishes[1].exit_code = 1;
  finishes[2].exit_code = 0;
  for (std::size_t i = 0; i < finishes.size(); ++i) {
    const std::string ticket = "t-job-" + std::to_string(i);
    ASSERT_THAT(store_->Trigger("job"), IsOk());
    ClaimWithHistory("job", ticket, Origin(RunTrigger::kManual));
    const std::vector<ReleaseResult> released =
        ReleaseMany({ReleaseRequest{"job", ticket, manual, finishes[i].error_json,
                                    Released(finishes[i], Origin(RunTrigger::kManual))}});
    ASSERT_EQ(released.size(), 1u);
    EXPECT_TRUE(released[0].released);
    const TaskRun run = Get(ticket);
    EXPECT_EQ(run.finish, finishes[i]) << ticket;
    EXPECT_TRUE(Same(run.ended_at, *Row("job").last_run_ended_at)) << "ended at the release";
    EXPECT_EQ(Row("job").last_run_error_json, finishes[i].error_json);
  }
  EXPECT_EQ(AllRunIds("job"), (std::vector<std::string>{"t-job-2", "t-job-1"}));

  // A release without a finish writes no history: the run stays as the claim recorded it.
  ASSERT_THAT(store_->Trigger("plain"), IsOk());
  ClaimWithHistory("plain", "t-plain");
  const std::vector<ReleaseResult> released =
      ReleaseMany({ReleaseRequest{"plain", "t-plain", manual, std::nullopt}});
  ASSERT_EQ(released.size(), 1u);
  EXPECT_TRUE(released[0].released);
  EXPECT_EQ(Get("t-plain").finish.outcome, RunOutcome::kRunning);
}

TEST_F(RunHistoryContractTest, AReleaseWritesARunWholeWhenItsClaimRecordedNoStart) {
  const TaskSchedule manual = Schedule("manual");
  Upsert("short", manual);
  ASSERT_THAT(store_->Trigger("short"), IsOk());
  const std::vector<ClaimResult> claimed =
      ClaimMany({ClaimRequest{"short", "t-short", minutes(1), std::nullopt}});
  ASSERT_EQ(claimed.size(), 1u);
  ASSERT_TRUE(claimed[0].claimed);
  EXPECT_EQ(CodeOfGet("t-short"), StatusCode::kNotFound) << "the claim recorded nothing";

  const RunOrigin origin = Origin(RunTrigger::kManual);
  const ReleasedRun ended = Released(Finish(RunOutcome::kFailed, "out"), origin);
  const std::vector<ReleaseResult> released =
      ReleaseMany({ReleaseRequest{"short", "t-short", manual, ErrorJson("exit 2"), ended}});
  ASSERT_EQ(released.size(), 1u);
  EXPECT_TRUE(released[0].released);
  const TaskRun run = Get("t-short");
  EXPECT_EQ(run.task_id, "short");
  EXPECT_EQ(run.origin, origin);
  EXPECT_EQ(run.started_at, ended.started_at);
  EXPECT_EQ(run.finish, ended.finish);
  EXPECT_TRUE(Same(run.ended_at, *Row("short").last_run_ended_at)) << "ended at the release";
}

// Issue 19: a run's trace id, when its host traced it, is kept by every write of a run (starts,
// claims, releases) and read back by pages and single runs; a run without one has none.
TEST_F(RunHistoryContractTest, TheTraceIdRoundTripsThroughStartsClaimsAndReleases) {
  const std::string kTraced = "4bf92f3577b34da6a3ce929d0e0e4736";
  RunOrigin traced = Origin(RunTrigger::kManual);
  traced.trace_id = kTraced;
  const RunOrigin untraced = Origin(RunTrigger::kManual);
  const WallTime base = Millis(Now()) - minutes(10);
  const std::vector<RunStart> starts = {RunStart{"s-traced", "local", traced, base},
                                        RunStart{"s-plain", "local", untraced, base + seconds(1)}};
  ASSERT_THAT(history_->RecordStarts(starts), IsOk());

  const TaskSchedule manual = Schedule("manual");
  Upsert("claimed", manual);
  Upsert("plain", manual);
  Upsert("short", manual);
  for (const char* id : {"claimed", "plain", "short"}) ASSERT_THAT(store_->Trigger(id), IsOk());
  const std::vector<ClaimResult> claimed = ClaimMany({
      ClaimRequest{"claimed", "c-traced", minutes(1), std::nullopt, traced},
      ClaimRequest{"plain", "c-plain", minutes(1), std::nullopt, untraced},
      ClaimRequest{"short", "c-short", minutes(1), std::nullopt},
  });
  ASSERT_EQ(claimed.size(), 3u);
  for (const ClaimResult& claim : claimed) EXPECT_TRUE(claim.claimed);

  for (const char* run_id : {"s-traced", "c-traced"}) {
    EXPECT_EQ(Get(run_id).origin.trace_id, kTraced) << run_id;
  }
  for (const char* run_id : {"s-plain", "c-plain"}) {
    EXPECT_FALSE(Get(run_id).origin.trace_id.has_value()) << run_id;
  }
  const std::vector<TaskRun> local = Page("local", 10).runs;
  ASSERT_EQ(local.size(), 2u);
  EXPECT_FALSE(local[0].origin.trace_id.has_value()) << local[0].run_id;
  EXPECT_EQ(local[1].origin.trace_id, kTraced) << local[1].run_id;

  // A release closes the claimed runs and writes the short run whole, trace id included.
  const std::vector<ReleaseResult> released = ReleaseMany({
      ReleaseRequest{"claimed", "c-traced", manual, std::nullopt,
                     Released(Finish(RunOutcome::kSucceeded), traced)},
      ReleaseRequest{"plain", "c-plain", manual, std::nullopt,
                     Released(Finish(RunOutcome::kSucceeded), untraced)},
      ReleaseRequest{"short", "c-short", manual, std::nullopt,
                     Released(Finish(RunOutcome::kSucceeded), traced)},
  });
  ASSERT_EQ(released.size(), 3u);
  for (const char* task_id : {"claimed", "short"}) {
    const std::vector<TaskRun> runs = Page(task_id, 10).runs;
    ASSERT_EQ(runs.size(), 1u) << task_id;
    EXPECT_EQ(runs[0].finish.outcome, RunOutcome::kSucceeded) << task_id;
    EXPECT_EQ(runs[0].origin.trace_id, kTraced) << task_id;
  }
  EXPECT_EQ(Get("c-short").origin, traced);
  const TaskRun plain = Get("c-plain");
  EXPECT_EQ(plain.finish.outcome, RunOutcome::kSucceeded);
  EXPECT_FALSE(plain.origin.trace_id.has_value());
}

// Issue 38: a release sent again (its answer lost, or the database's server changed since) wrote
// its run a second time. It writes the run only where the history lacks it.
TEST_F(RunHistoryContractTest, AReleaseSentAgainRecordsItsRunOnlyWhereTheHistoryLacksIt) {
  const TaskSchedule manual = Schedule("PT10M");
  Upsert("kept", manual);
  Upsert("gone", manual);
  ClaimWithHistory("kept", "t-kept");
  const RunFinish done = Finish(RunOutcome::kSucceeded);
  ASSERT_EQ(
      ReleaseMany({ReleaseRequest{"kept", "t-kept", manual, std::nullopt, Released(done)}}).size(),
      1u);
  ReleaseRequest kept_again{"kept", "t-kept", manual, std::nullopt, Released(done)};
  kept_again.retried = true;
  // A run whose claim and start the database lacks (a server that lost the last writes).
  ReleaseRequest gone{"gone", "t-gone", manual, std::nullopt, Released(done)};
  gone.retried = true;
  const std::vector<ReleaseResult> released = ReleaseMany({kept_again, gone});
  ASSERT_EQ(released.size(), 2u);
  EXPECT_FALSE(released[0].released);
  EXPECT_FALSE(released[0].recorded);
  EXPECT_FALSE(released[1].released);
  EXPECT_EQ(released[1].recorded, fixture_->tells_recorded_runs());
  EXPECT_EQ(Page("kept", 10).runs.size(), 1u) << "the run was recorded twice";
  ASSERT_EQ(Page("gone", 10).runs.size(), 1u);
  EXPECT_EQ(Get("t-gone").finish.outcome, RunOutcome::kSucceeded);
}

// Issue 16: the history replaced a cancelled run's error with the row's "Task was cancelled", so
// the history and the host's own account (event stream, log) named the run differently. The
// history keeps the host's account; the task row keeps Backstage's text.
TEST_F(RunHistoryContractTest, ARunWhoseTicketACancelMarkedIsRecordedAsItsHostTellsIt) {
  const TaskSchedule schedule = Schedule("PT10M");
  Upsert("cancelled", schedule);
  Upsert("late", schedule);
  ClaimWithHistory("cancelled", "t-cancelled");
  ClaimWithHistory("late", "t-late");
  ASSERT_THAT(store_->Cancel("cancelled", minutes(1)), IsOk());
  ASSERT_THAT(store_->Cancel("late", minutes(1)), IsOk());
  RunFinish stopped = Finish(RunOutcome::kCancelled);
  stopped.error_json = R"({"name":"Error","message":"cancelled: command 'x' ended by SIGTERM"})";
  stopped.signal = 15;
  const std::vector<ReleaseResult> released = ReleaseMany({
      ReleaseRequest{"cancelled", "t-cancelled", schedule, std::nullopt, Released(stopped)},
      // Its function returned before the cancel reached it: a success, as its host says.
      ReleaseRequest{"late", "t-late", schedule, std::nullopt,
                     Released(Finish(RunOutcome::kSucceeded))},
  });
  ASSERT_EQ(released.size(), 2u);
  EXPECT_TRUE(released[0].released);
  EXPECT_TRUE(released[1].released);
  const TaskRun cancelled = Get("t-cancelled");
  EXPECT_EQ(cancelled.finish.outcome, RunOutcome::kCancelled);
  EXPECT_EQ(cancelled.finish.error_json, stopped.error_json);
  EXPECT_EQ(cancelled.finish.signal, 15);
  EXPECT_EQ(Row("cancelled").last_run_error_json, kCancelledJson);
  const TaskRun late = Get("t-late");
  EXPECT_EQ(late.finish.outcome, RunOutcome::kSucceeded);
  EXPECT_EQ(late.finish.error_json, std::nullopt);
  EXPECT_EQ(Row("late").last_run_error_json, kCancelledJson);
}

// --- Several hosts ----------------------------------------------------------------------------

TEST_F(RunHistoryContractTest, TwoStoresOnOneDatabaseShareOneHistory) {
  std::unique_ptr<TaskStore> other = fixture_->OpenStore();
  ASSERT_NE(other, nullptr);
  ASSERT_NE(other->history(), nullptr);
  RunHistoryLimits limits;
  limits.max_runs_per_task = 10;
  history_->SetLimits(limits);
  other->history()->SetLimits(limits);

  // The hosts go in step, a run each, so that no run is overtaken by more than the trim window
  // looks back over before it ends (a run that is, is left to the age limit by design).
  constexpr int kRunsPerHost = 30;
  const WallTime base = Millis(Now()) - hours(1);
  std::barrier in_step(2);
  const auto host = [&](RunHistory* history, int host_index) {
    for (int i = 0; i < kRunsPerHost; ++i) {
      in_step.arrive_and_wait();
      const std::string run_id = "h" + std::to_string(host_index) + "-" + std::to_string(i);
      const WallTime started = base + milliseconds(10 * (2 * i + host_index));
      const std::vector<RunStart> starts = {RunStart{run_id, "shared", Origin(), started}};
      const Status recorded = history->RecordStarts(starts);
      EXPECT_THAT(recorded, IsOk()) << run_id;
      const std::vector<RunEnd> ends = {
          RunEnd{run_id, Finish(RunOutcome::kSucceeded), started + milliseconds(5)}};
      Result<std::size_t> closed = history->RecordEnds(ends);
      EXPECT_TRUE(closed.ok() && *closed == 1) << run_id << ": " << closed.status().ToString();
      Result<RunPage> page = history->ListRuns("shared", 5, std::nullopt);
      EXPECT_THAT(page, IsOk());
    }
  };
  std::thread first(host, history_, 0);
  std::thread second(host, other->history(), 1);
  first.join();
  second.join();

  // One more run ends, and its task keeps its ten newest runs: the last recorded, newest first.
  Start("last", "shared", base + hours(1) - seconds(1));
  EXPECT_EQ(End("last", Finish(RunOutcome::kSucceeded)), 1u);
  const RunPage page = Page("shared", kMaxRunPageSize);
  ASSERT_EQ(page.runs.size(), 10u);
  EXPECT_EQ(page.runs[0].run_id, "last");
  for (std::size_t i = 1; i < page.runs.size(); ++i) {
    EXPECT_EQ(page.runs[i].finish.outcome, RunOutcome::kSucceeded) << page.runs[i].run_id;
    EXPECT_LT(page.runs[i].started_at, page.runs[i - 1].started_at) << page.runs[i].run_id;
  }
  Result<RunPage> seen_by_other = other->history()->ListRuns("shared", 10, std::nullopt);
  ASSERT_THAT(seen_by_other, IsOk());
  EXPECT_EQ(RunIds(seen_by_other->runs), RunIds(page.runs));
}

}  // namespace
}  // namespace stagehand::contract
