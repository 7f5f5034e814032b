// Rows in the exact form Backstage writes on SQLite, Backstage's own statements run against rows
// stagehand wrote, the stored time format, and bad input.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "fixtures/task_schedules.h"
#include "sqlite_test_util.h"
#include "stagehand/model/task_state.h"
#include "stagehand/service/task_row_state.h"
#include "stagehand/store/sqlite_task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "store/sqlite/sqlite_time.h"

namespace stagehand {
namespace {

using sqlite_test::RawDb;
using sqlite_test::TempDir;
using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::StartsWith;
using Rows = std::vector<std::vector<std::string>>;

constexpr char kSettings[] = R"({"version":2,"cadence":"PT10M","timeoutAfterDuration":"PT1M"})";

WallTime At(const char* text) {
  Result<WallTime> t = store_internal::ParseSqliteTime(text);
  EXPECT_THAT(t, IsOk());
  return t.ok() ? *t : WallTime{};
}

TaskSchedule Schedule(std::string_view cadence) { return testing::ScheduleFrom(cadence); }

// A migrated database with a store and a raw connection to it.
class SqliteCompatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.File("myplugin.sqlite");
    Result<std::unique_ptr<TaskStore>> store =
        OpenSqliteTaskStore("myplugin", SqliteStoreOptions{path_}, SystemClock::Instance());
    ASSERT_THAT(store, IsOk());
    store_ = std::move(*store);
    ASSERT_THAT(store_->Migrate(), IsOk());
    raw_ = std::make_unique<RawDb>(path_);
  }

  std::string Column(const std::string& column, const std::string& id) {
    const Rows rows =
        raw_->Query("SELECT " + column + " FROM backstage_backend_tasks__tasks WHERE id = ?", {id});
    return rows.size() == 1 ? rows[0][0] : "<missing>";
  }

  TempDir dir_;
  std::string path_;
  std::unique_ptr<TaskStore> store_;
  std::unique_ptr<RawDb> raw_;
};

TEST_F(SqliteCompatTest, ReadsTheRowsOfTheSpecsListingExample) {
  // Spec §8.3: g1 was cancelled and is idle again; man is a manual task that never ran.
  raw_->Exec(
      "insert into backstage_backend_tasks__tasks (id, settings_json, next_run_start_at, "
      "last_run_error_json, last_run_ended_at) values ('g1', "
      "'{\"version\":2,\"cadence\":\"PT10M\",\"timeoutAfterDuration\":\"PT1M\"}', "
      "'2026-11-30 04:18:13', '{\"name\":\"Error\",\"message\":\"Task was cancelled\"}', "
      "'2026-11-30 04:13:13');"
      "insert into backstage_backend_tasks__tasks (id, settings_json, next_run_start_at) values "
      "('man', '{\"version\":2,\"cadence\":\"manual\",\"timeoutAfterDuration\":\"PT1M\"}', NULL);");
  Result<std::vector<TaskRow>> rows = store_->States();
  ASSERT_THAT(rows, IsOk());
  ASSERT_EQ(rows->size(), 2u);
  const TimeZone utc = TimeZone::Utc();
  EXPECT_EQ((*rows)[0].next_run_start_at, At("2026-11-30 04:18:13"));
  EXPECT_EQ(ToTaskState((*rows)[0], utc).ToJson(),
            R"({"status":"idle","startsAt":"2026-11-30T04:18:13.000+00:00",)"
            R"("lastRunEndedAt":"2026-11-30T04:13:13.000+00:00",)"
            R"("lastRunError":"{\"name\":\"Error\",\"message\":\"Task was cancelled\"}"})");
  EXPECT_EQ(ToTaskState((*rows)[1], utc).ToJson(), R"({"status":"idle"})");
}

TEST_F(SqliteCompatTest, ReadsARunClaimedByBackstage) {
  raw_->Exec(
      "insert into backstage_backend_tasks__tasks (id, settings_json, next_run_start_at) values "
      "('bs', '" +
      std::string(kSettings) + "', CURRENT_TIMESTAMP)");
  // Backstage's claim, as knex sends it to better-sqlite3 (spec §4.4).
  raw_->Query(
      "update `backstage_backend_tasks__tasks` set `current_run_ticket` = ?, "
      "`current_run_started_at` = CURRENT_TIMESTAMP, `current_run_expires_at` = datetime('now', ?) "
      "where `id` = ? and `current_run_ticket` is null",
      {"0f8e7a52-3c1d-4b6e-9a2f-5d4c3b2a1908", "60 seconds", "bs"});
  EXPECT_THAT(Column("current_run_started_at", "bs"),
              MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}"));

  const std::vector<std::string> ids = {"bs"};
  Result<PollResult> poll = store_->Poll(ids, false);
  ASSERT_THAT(poll, IsOk());
  ASSERT_EQ(poll->entries.size(), 1u);
  EXPECT_EQ(poll->entries[0].readiness, Readiness::kNotReady);
  EXPECT_TRUE(poll->entries[0].running);
  ASSERT_TRUE(poll->entries[0].current_run_expires_at.has_value());
  Result<std::vector<TaskRow>> rows = store_->States();
  ASSERT_THAT(rows, IsOk());
  ASSERT_EQ(rows->size(), 1u);
  const TaskRow& row = (*rows)[0];
  ASSERT_TRUE(row.current_run_started_at.has_value());
  EXPECT_EQ(row.current_run_expires_at, *row.current_run_started_at + seconds(60));
  Result<ClaimResult> claim = store_->Claim("bs", "ours", minutes(1), minutes(1));
  ASSERT_THAT(claim, IsOk());
  EXPECT_FALSE(claim->claimed);
  EXPECT_THAT(store_->Cancel("bs", minutes(1)), IsOk());
}

TEST_F(SqliteCompatTest, BackstageStatementsWorkOnRowsStagehandWrote) {
  ASSERT_THAT(store_->Upsert("ours", Schedule("PT10M")), IsOk());
  // Stagehand writes UTC text with milliseconds.
  const std::string next = Column("next_run_start_at", "ours");
  EXPECT_THAT(next,
              MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}"));
  Result<ClaimResult> claim = store_->Claim("ours", "ticket", minutes(1), minutes(1));
  ASSERT_THAT(claim, IsOk());
  ASSERT_TRUE(claim->claimed);

  // Backstage's liveness check and release (spec §4.2, §4.6) on that row.
  EXPECT_EQ(raw_->Query("select `current_run_ticket` from `backstage_backend_tasks__tasks` "
                        "where `id` = ?",
                        {"ours"}),
            (Rows{{"ticket"}}));
  raw_->Query(
      "update `backstage_backend_tasks__tasks` set `next_run_start_at` = "
      "max(datetime(next_run_start_at, ?), datetime('now')), `current_run_ticket` = NULL, "
      "`current_run_started_at` = NULL, `current_run_expires_at` = NULL, `last_run_ended_at` = "
      "CURRENT_TIMESTAMP, `last_run_error_json` = NULL where `id` = ? and `current_run_ticket` = ?",
      {"+600 seconds", "ours", "ticket"});
  EXPECT_EQ(Column("current_run_ticket", "ours"), "NULL");
  // Backstage's datetime() reads our text: the cadence is anchored on our stored time.
  EXPECT_EQ(Column("next_run_start_at", "ours"),
            store_internal::FormatSqliteTime(At(next.c_str()) + minutes(10)).substr(0, 19));

  Result<std::vector<TaskRow>> rows = store_->States();
  ASSERT_THAT(rows, IsOk());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].next_run_start_at,
            std::chrono::floor<seconds>(At(next.c_str()) + minutes(10)));
  EXPECT_TRUE((*rows)[0].last_run_ended_at.has_value());

  // Backstage's readiness query compares our text with CURRENT_TIMESTAMP as strings.
  ASSERT_THAT(store_->Trigger("ours"), IsOk());
  EXPECT_EQ(raw_->Query("SELECT CASE WHEN next_run_start_at <= datetime('now', '+1 seconds') AND "
                        "current_run_ticket IS NULL THEN TRUE ELSE FALSE END FROM "
                        "backstage_backend_tasks__tasks WHERE id IN (?)",
                        {"ours"}),
            (Rows{{"1"}}));
}

TEST_F(SqliteCompatTest, CronTimeWrittenByBackstageIsReadAsUtc) {
  // Backstage binds cron times as datetime(<ISO with offset>) (spec §4.3).
  raw_->Query(
      "insert into backstage_backend_tasks__tasks (id, settings_json, next_run_start_at) values "
      "(?, ?, datetime(?))",
      {"cron", R"({"version":2,"cadence":"0 0 * * *","timeoutAfterDuration":"PT1M"})",
       "2026-11-30T23:59:59.000+02:00"});
  EXPECT_EQ(Column("next_run_start_at", "cron"), "2026-11-30 21:59:59");
  Result<std::vector<TaskRow>> rows = store_->States();
  ASSERT_THAT(rows, IsOk());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].next_run_start_at, At("2026-11-30 21:59:59"));
}

TEST_F(SqliteCompatTest, IntegerEpochMillisecondsAreReadDefensively) {
  raw_->Query(
      "insert into backstage_backend_tasks__tasks (id, settings_json, last_run_ended_at) values "
      "(?, ?, 1796013746000)",
      {"int", kSettings});
  Result<std::vector<TaskRow>> rows = store_->States();
  ASSERT_THAT(rows, IsOk());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].last_run_ended_at, At("2026-11-30 04:42:26"));
}

TEST_F(SqliteCompatTest, UnparsableSettingsAreReportedPerTask) {
  raw_->Query(
      "insert into backstage_backend_tasks__tasks (id, settings_json, next_run_start_at, "
      "current_run_ticket) values (?, ?, '2020-01-01 00:00:00', 't')",
      {"broken", "{\"version\":2,"});
  ASSERT_THAT(store_->Upsert("fine", Schedule("PT10M")), IsOk());
  const std::vector<std::string> ids = {"broken", "fine"};
  Result<PollResult> poll = store_->Poll(ids, false);
  ASSERT_THAT(poll, IsOk());
  ASSERT_EQ(poll->entries.size(), 2u);
  EXPECT_EQ(poll->entries[0].readiness, Readiness::kInvalidSettings);
  EXPECT_FALSE(poll->entries[0].settings_error.empty());
  EXPECT_EQ(poll->entries[1].readiness, Readiness::kReady);

  const Status cancel = store_->Cancel("broken", minutes(1));
  EXPECT_THAT(cancel, StatusIs(StatusCode::kInvalidArgument, "plugin 'myplugin'"));
  EXPECT_THAT(cancel.message(), HasSubstr(path_));
  EXPECT_THAT(cancel.message(), HasSubstr("'broken'"));
  EXPECT_EQ(Column("current_run_ticket", "broken"), "t");
}

TEST_F(SqliteCompatTest, PollHandlesIdsThatNeedEscapingAndRepeats) {
  const std::vector<std::string> ids = {"quote\"d",
                                        "back\\slash",
                                        "tab\tid",
                                        "\xc3\xbc"
                                        "n"
                                        "\xc3\xaf"
                                        "code",
                                        "[1]",
                                        "quote\"d"};
  for (std::size_t i = 0; i + 1 < ids.size(); ++i) {
    ASSERT_THAT(store_->Upsert(ids[i], Schedule("PT10M")), IsOk()) << ids[i];
  }
  Result<PollResult> poll = store_->Poll(ids, false);
  ASSERT_THAT(poll, IsOk());
  ASSERT_EQ(poll->entries.size(), ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(poll->entries[i].id, ids[i]);
    EXPECT_EQ(poll->entries[i].readiness, Readiness::kReady) << ids[i];
  }
  const std::vector<std::string> missing = {"quote"};
  poll = store_->Poll(missing, false);
  ASSERT_THAT(poll, IsOk());
  ASSERT_EQ(poll->entries.size(), 1u);
  EXPECT_EQ(poll->entries[0].readiness, Readiness::kMissing);
}

TEST_F(SqliteCompatTest, UnreadableTimestampNamesTaskColumnPluginAndFile) {
  raw_->Query(
      "insert into backstage_backend_tasks__tasks (id, settings_json, next_run_start_at) values "
      "(?, ?, 'tomorrow')",
      {"odd", kSettings});
  Result<std::vector<TaskRow>> rows = store_->States();
  ASSERT_THAT(rows, StatusIs(StatusCode::kFailedPrecondition, "plugin 'myplugin'"));
  EXPECT_THAT(rows.status().message(), HasSubstr(path_));
  EXPECT_THAT(rows.status().message(), HasSubstr("'odd'"));
  EXPECT_THAT(rows.status().message(), HasSubstr("next_run_start_at"));
  EXPECT_THAT(rows.status().message(), HasSubstr("tomorrow"));

  const std::vector<std::string> ids = {"odd"};
  Result<PollResult> poll = store_->Poll(ids, false);
  ASSERT_THAT(poll, StatusIs(StatusCode::kFailedPrecondition, "next_run_start_at"));
}

TEST_F(SqliteCompatTest, BusyDatabaseIsUnavailableAfterTheTimeout) {
  Result<std::unique_ptr<TaskStore>> impatient = OpenSqliteTaskStore(
      "myplugin", SqliteStoreOptions{path_, milliseconds(50)}, SystemClock::Instance());
  ASSERT_THAT(impatient, IsOk());
  raw_->Exec("BEGIN IMMEDIATE");
  Result<UpsertResult> upsert = (*impatient)->Upsert("blocked", Schedule("PT10M"));
  raw_->Exec("ROLLBACK");
  ASSERT_THAT(upsert, StatusIs(StatusCode::kUnavailable, "plugin 'myplugin'"));
  EXPECT_THAT(upsert.status().message(), HasSubstr("locked"));
  EXPECT_THAT((*impatient)->Upsert("blocked", Schedule("PT10M")), IsOk());
}

TEST(SqliteOpenTest, UnopenablePathsAreUnavailableNamingPluginAndFile) {
  TempDir dir;
  const std::string not_a_dir = dir.File("plain-file");
  std::ofstream(not_a_dir) << "x";
  std::ofstream(dir.File("garbage.sqlite")) << std::string(4096, 'g');
  std::filesystem::create_directory(dir.File("a-directory.sqlite"));
  for (const std::string& path : {not_a_dir + "/catalog.sqlite", dir.File("garbage.sqlite"),
                                  dir.File("a-directory.sqlite")}) {
    Result<std::unique_ptr<TaskStore>> store =
        OpenSqliteTaskStore("catalog", SqliteStoreOptions{path}, SystemClock::Instance());
    ASSERT_THAT(store, StatusIs(StatusCode::kUnavailable)) << path;
    EXPECT_THAT(store.status().message(),
                StartsWith("plugin 'catalog': cannot open SQLite database '" + path + "': "));
  }
}

TEST(SqliteOpenTest, CreatesTheDirectoryLikeBackstage) {
  TempDir dir;
  const std::string path = SqlitePluginDatabasePath(dir.File("nested/dir"), "catalog");
  Result<std::unique_ptr<TaskStore>> store =
      OpenSqliteTaskStore("catalog", SqliteStoreOptions{path}, SystemClock::Instance());
  ASSERT_THAT(store, IsOk());
  EXPECT_THAT((*store)->Migrate(), IsOk());
  EXPECT_TRUE(std::filesystem::exists(path));
}

TEST(SqliteOpenTest, UnmigratedDatabaseFailsCleanly) {
  TempDir dir;
  Result<std::unique_ptr<TaskStore>> store = OpenSqliteTaskStore(
      "catalog", SqliteStoreOptions{dir.File("catalog.sqlite")}, SystemClock::Instance());
  ASSERT_THAT(store, IsOk());
  const std::vector<std::string> ids = {"x"};
  Result<PollResult> poll = (*store)->Poll(ids, true);
  ASSERT_THAT(poll, StatusIs(StatusCode::kFailedPrecondition, "no such table"));
  EXPECT_THAT(poll.status().message(), HasSubstr("plugin 'catalog'"));
}

TEST(SqliteTimeTest, FormatsUtcTextWithMilliseconds) {
  const WallTime t = WallTime(std::chrono::sys_days(std::chrono::year(2026) / 11 / 30)) +
                     std::chrono::hours(4) + minutes(42) + seconds(26) +
                     std::chrono::microseconds(123'999);
  EXPECT_EQ(store_internal::FormatSqliteTime(t), "2026-11-30 04:42:26.123");
  EXPECT_EQ(store_internal::FormatSqliteTime(WallTime{}), "1970-01-01 00:00:00.000");
}

TEST(SqliteTimeTest, ParsesBackstageAndStagehandForms) {
  const WallTime base = WallTime(std::chrono::sys_days(std::chrono::year(2026) / 11 / 30)) +
                        std::chrono::hours(4) + minutes(42) + seconds(26);
  EXPECT_EQ(At("2026-11-30 04:42:26"), base);
  EXPECT_EQ(At("2026-11-30 04:42:26.5"), base + milliseconds(500));
  EXPECT_EQ(At("2026-11-30 04:42:26.123"), base + milliseconds(123));
  EXPECT_EQ(At("2026-11-30T04:42:26.123Z"), base + milliseconds(123));
  for (const char* bad :
       {"", "2026-11-30", "2026-11-30 04:42", "2026-13-01 00:00:00", "2026-02-30 00:00:00",
        "2026-11-30 24:00:00", "2026-11-30 04:42:26.", "2026-11-30 04:42:26+01:00", "tomorrow"}) {
    EXPECT_THAT(store_internal::ParseSqliteTime(bad), Not(IsOk())) << bad;
  }
}

TEST(SqliteTimeTest, SecondsModifiersUseTheShortestNumber) {
  EXPECT_EQ(store_internal::SecondsModifier(600), "+600 seconds");
  EXPECT_EQ(store_internal::SecondsModifier(0.3), "+0.3 seconds");
  EXPECT_EQ(store_internal::SecondsModifier(-300), "-300 seconds");
}

}  // namespace
}  // namespace stagehand
