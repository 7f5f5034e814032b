// Runs the TaskStore contract suite against SqliteTaskStore: each fixture is a fresh database file
// in its own temporary directory; every OpenStore() is another connection to that file, as another
// host would open it. Raw rows are written and read with plain sqlite3 calls in Backstage's text
// forms, independently of the store's own code.

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "contract/store_fixture.h"
#include "stagehand/store/sqlite_task_store.h"

namespace stagehand::contract {
namespace {

constexpr char kPluginId[] = "contract";

// Backstage's text: "YYYY-MM-DD HH:MM:SS" for whole seconds, else with milliseconds.
std::string SqlTime(WallTime t) {
  using namespace std::chrono;
  const auto ms = floor<milliseconds>(t);
  const auto day = floor<days>(ms);
  const year_month_day ymd(day);
  const hh_mm_ss<milliseconds> hms(ms - day);
  char text[32];
  std::snprintf(text, sizeof text, "%04d-%02u-%02u %02ld:%02ld:%02ld", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                static_cast<long>(hms.hours().count()), static_cast<long>(hms.minutes().count()),
                static_cast<long>(hms.seconds().count()));
  std::string result = text;
  if (hms.subseconds().count() != 0) {
    std::snprintf(text, sizeof text, ".%03ld", static_cast<long>(hms.subseconds().count()));
    result += text;
  }
  return result;
}

std::optional<WallTime> ParseSqlTime(const unsigned char* raw) {
  if (raw == nullptr) return std::nullopt;
  int y = 0;
  unsigned mo = 0, d = 0;
  int h = 0, mi = 0, s = 0, ms = 0;
  const int fields = std::sscanf(reinterpret_cast<const char*>(raw), "%d-%u-%u %d:%d:%d.%3d", &y,
                                 &mo, &d, &h, &mi, &s, &ms);
  EXPECT_GE(fields, 6) << "unreadable stored time: " << raw;
  using namespace std::chrono;
  return WallTime(sys_days(year(y) / month(mo) / day(d))) + hours(h) + minutes(mi) + seconds(s) +
         milliseconds(ms);
}

class SqliteStoreFixture final : public SqlStoreFixture {
 public:
  SqliteStoreFixture() {
    std::string pattern = (std::filesystem::temp_directory_path() / "stagehand-contract-XXXXXX");
    STAGEHAND_CHECK(mkdtemp(pattern.data()) != nullptr);
    dir_ = pattern;
    path_ = SqlitePluginDatabasePath(dir_.string(), kPluginId);
    std::unique_ptr<TaskStore> first = OpenStore();  // creates and migrates the file
    STAGEHAND_CHECK(first != nullptr);
    STAGEHAND_CHECK(sqlite3_open(path_.c_str(), &raw_) == SQLITE_OK);
    sqlite3_busy_timeout(raw_, 5000);
  }

  ~SqliteStoreFixture() override {
    sqlite3_close(raw_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::unique_ptr<TaskStore> OpenStore() override {
    return Migrated(
        OpenSqliteTaskStore(kPluginId, SqliteStoreOptions{path_}, SystemClock::Instance()));
  }

  void PutRawRow(const TaskRow& row) override {
    sqlite3_stmt* stmt = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(raw_,
                                 "INSERT OR REPLACE INTO backstage_backend_tasks__tasks (id, "
                                 "settings_json, next_run_start_at, current_run_ticket, "
                                 "current_run_started_at, current_run_expires_at, "
                                 "last_run_error_json, last_run_ended_at) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                 -1, &stmt, nullptr),
              SQLITE_OK)
        << sqlite3_errmsg(raw_);
    BindText(stmt, 1, row.id);
    BindText(stmt, 2, row.settings_json);
    BindTime(stmt, 3, row.next_run_start_at);
    BindText(stmt, 4, row.current_run_ticket);
    BindTime(stmt, 5, row.current_run_started_at);
    BindTime(stmt, 6, row.current_run_expires_at);
    BindText(stmt, 7, row.last_run_error_json);
    BindTime(stmt, 8, row.last_run_ended_at);
    EXPECT_EQ(sqlite3_step(stmt), SQLITE_DONE) << sqlite3_errmsg(raw_);
    sqlite3_finalize(stmt);
  }

  std::optional<TaskRow> GetRawRow(const std::string& id) override {
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(raw_,
                                 "SELECT id, settings_json, next_run_start_at, current_run_ticket, "
                                 "current_run_started_at, current_run_expires_at, "
                                 "last_run_error_json, last_run_ended_at "
                                 "FROM backstage_backend_tasks__tasks WHERE id = ?",
                                 -1, &stmt, nullptr),
              SQLITE_OK)
        << sqlite3_errmsg(raw_);
    BindText(stmt, 1, id);
    std::optional<TaskRow> row;
    const int rc = sqlite3_step(stmt);
    EXPECT_TRUE(rc == SQLITE_ROW || rc == SQLITE_DONE) << sqlite3_errmsg(raw_);
    if (rc == SQLITE_ROW) {
      row.emplace();
      row->id = *Text(stmt, 0);
      row->settings_json = *Text(stmt, 1);
      row->next_run_start_at = ParseSqlTime(sqlite3_column_text(stmt, 2));
      row->current_run_ticket = Text(stmt, 3);
      row->current_run_started_at = ParseSqlTime(sqlite3_column_text(stmt, 4));
      row->current_run_expires_at = ParseSqlTime(sqlite3_column_text(stmt, 5));
      row->last_run_error_json = Text(stmt, 6);
      row->last_run_ended_at = ParseSqlTime(sqlite3_column_text(stmt, 7));
    }
    sqlite3_finalize(stmt);
    return row;
  }

  bool supports_notifications() const override { return false; }

  int claim_race_rounds() const override { return 10'000; }

 private:
  static void BindText(sqlite3_stmt* stmt, int index, const std::optional<std::string>& text) {
    if (text) {
      sqlite3_bind_text(stmt, index, text->c_str(), static_cast<int>(text->size()),
                        SQLITE_TRANSIENT);
    } else {
      sqlite3_bind_null(stmt, index);
    }
  }

  static void BindTime(sqlite3_stmt* stmt, int index, const std::optional<WallTime>& time) {
    BindText(stmt, index, time ? std::optional<std::string>(SqlTime(*time)) : std::nullopt);
  }

  static std::optional<std::string> Text(sqlite3_stmt* stmt, int column) {
    const unsigned char* text = sqlite3_column_text(stmt, column);
    if (text == nullptr) return std::nullopt;
    return std::string(reinterpret_cast<const char*>(text),
                       static_cast<std::size_t>(sqlite3_column_bytes(stmt, column)));
  }

  std::filesystem::path dir_;
  std::string path_;
  sqlite3* raw_ = nullptr;
};

}  // namespace

std::unique_ptr<StoreFixture> MakeStoreFixture() { return std::make_unique<SqliteStoreFixture>(); }

}  // namespace stagehand::contract
