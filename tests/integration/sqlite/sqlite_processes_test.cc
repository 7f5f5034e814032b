// Several processes sharing one SQLite plugin database, as several hosts share a Backstage plugin
// database: concurrent migrations and the claim race. Children are forked before the parent opens
// anything, each opens its own store, and rounds are paced over pipes (no sleeps).

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "fixtures/task_schedules.h"
#include "sqlite_test_util.h"
#include "stagehand/store/sqlite_task_store.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;

using sqlite_test::Child;
using sqlite_test::RawDb;
using sqlite_test::ReadByte;
using sqlite_test::TempDir;
using sqlite_test::WriteByte;
using std::chrono::minutes;
using Rows = std::vector<std::vector<std::string>>;

constexpr char kGo = 'g';
constexpr char kQuit = 'q';
constexpr char kOk = 'o';
constexpr char kWon = 'w';
constexpr char kLost = 'l';
constexpr char kFailed = 'f';

Result<std::unique_ptr<TaskStore>> OpenStore(const std::string& path) {
  return OpenSqliteTaskStore("race", SqliteStoreOptions{path}, SystemClock::Instance());
}

TEST(SqliteProcessesTest, ThreeProcessesMigratingAFreshFileAtOnceAllSucceed) {
  constexpr int kProcesses = 3;
  TempDir dir;
  const std::string path = dir.File("race.sqlite");
  std::vector<std::unique_ptr<Child>> children;
  for (int i = 0; i < kProcesses; ++i) {
    children.push_back(std::make_unique<Child>([&path](int from_parent, int to_parent) {
      if (ReadByte(from_parent) != kGo) return 10;
      Result<std::unique_ptr<TaskStore>> store = OpenStore(path);
      Status status = store.ok() ? (*store)->Migrate() : store.status();
      if (!status.ok()) std::fprintf(stderr, "child: %s\n", status.ToString().c_str());
      return WriteByte(to_parent, status.ok() ? kOk : kFailed) ? 0 : 11;
    }));
  }
  for (auto& child : children) ASSERT_TRUE(child->Send(kGo));
  for (auto& child : children) EXPECT_EQ(child->Receive(), kOk);
  for (auto& child : children) EXPECT_EQ(child->Wait(), 0);

  RawDb db(path);
  EXPECT_EQ(
      db.Query("SELECT name, batch FROM backstage_backend_tasks__knex_migrations ORDER BY id"),
      (Rows{{"20210928160613_init.js", "1"},
            {"20240712211735_nullable_next_run.js", "1"},
            {"20250411000000_last_run.js", "1"}}));
  EXPECT_EQ(db.Query("SELECT * FROM backstage_backend_tasks__knex_migrations_lock"),
            (Rows{{"1", "0"}}));
  EXPECT_EQ(db.Query("PRAGMA journal_mode"), (Rows{{"wal"}}));
  // stagehand's own migrations ran once, recorded in stagehand's own table.
  EXPECT_EQ(db.Query("SELECT name FROM stagehand_migrations ORDER BY name"),
            (Rows{{"0001_task_runs"},
                  {"0002_task_registrations"},
                  {"0003_run_trace_id"},
                  {"0004_request_keys"}}));
  EXPECT_EQ(db.Query("SELECT count(*) FROM sqlite_master WHERE name = 'stagehand_task_runs'"),
            (Rows{{"1"}}));
}

TEST(SqliteProcessesTest, ExactlyOneProcessWinsEachClaimRace) {
  constexpr int kProcesses = 4;
  constexpr int kRounds = 10'000;
  TempDir dir;
  const std::string path = dir.File("race.sqlite");
  TaskSchedule schedule;  // due again as soon as it is released
  schedule.settings.cadence = testing::ParsedCadence("PT0S");
  schedule.settings.timeout_after_duration = "PT1M";
  {
    // The database exists, migrated and in WAL mode, before any child opens it. The connection is
    // closed before forking: SQLite connections must not cross a fork.
    Result<std::unique_ptr<TaskStore>> setup = OpenStore(path);
    ASSERT_THAT(setup, IsOk());
    ASSERT_THAT((*setup)->Migrate(), IsOk());
    ASSERT_THAT((*setup)->Upsert("race", schedule), IsOk());
  }

  std::vector<std::unique_ptr<Child>> children;
  for (int i = 0; i < kProcesses; ++i) {
    children.push_back(std::make_unique<Child>([&path, i](int from_parent, int to_parent) {
      Result<std::unique_ptr<TaskStore>> store = OpenStore(path);
      if (!store.ok()) return 10;
      for (int round = 0;; ++round) {
        const std::optional<char> command = ReadByte(from_parent);
        if (command != kGo) return command == kQuit ? 0 : 11;
        const std::string ticket = "r" + std::to_string(round) + "-p" + std::to_string(i);
        Result<ClaimResult> claim = (*store)->Claim("race", ticket, minutes(1), minutes(1));
        const char outcome = !claim.ok() ? kFailed : (claim->claimed ? kWon : kLost);
        if (!WriteByte(to_parent, outcome)) return 12;
      }
    }));
  }
  Result<std::unique_ptr<TaskStore>> store = OpenStore(path);
  ASSERT_THAT(store, IsOk());

  int bad_rounds = 0;
  int failed_claims = 0;
  int failed_releases = 0;
  std::string first_bad;
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < kRounds; ++round) {
    for (auto& child : children) ASSERT_TRUE(child->Send(kGo)) << "round " << round;
    int winners = 0;
    int winner = -1;
    for (int i = 0; i < kProcesses; ++i) {
      const std::optional<char> outcome = children[static_cast<std::size_t>(i)]->Receive();
      ASSERT_TRUE(outcome.has_value()) << "child " << i << " died in round " << round;
      if (*outcome == kWon) {
        ++winners;
        winner = i;
      } else if (*outcome == kFailed) {
        ++failed_claims;
      }
    }
    if (winners != 1 && bad_rounds++ == 0) {
      first_bad = "round " + std::to_string(round) + " had " + std::to_string(winners) + " winners";
    }
    if (winner >= 0) {
      const std::string ticket = "r" + std::to_string(round) + "-p" + std::to_string(winner);
      Result<bool> released = (*store)->Release("race", ticket, schedule, std::nullopt);
      if (!released.ok() || !*released) ++failed_releases;
    }
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  for (auto& child : children) EXPECT_TRUE(child->Send(kQuit));
  for (auto& child : children) EXPECT_EQ(child->Wait(), 0);
  EXPECT_EQ(bad_rounds, 0) << first_bad;
  EXPECT_EQ(failed_claims, 0);
  EXPECT_EQ(failed_releases, 0);
  RecordProperty("rounds_per_second",
                 static_cast<int>(kRounds / std::chrono::duration<double>(elapsed).count()));
}

}  // namespace
}  // namespace stagehand
