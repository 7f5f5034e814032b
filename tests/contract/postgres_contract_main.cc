// Runs the TaskStore contract suite against PostgresTaskStore on the test server
// (STAGEHAND_TEST_POSTGRES_URL): each fixture creates a fresh, uniquely named plugin database
// through the store (which creates it when missing) and drops it afterwards; every OpenStore() is
// another store with its own pool, as another host would open it. Raw rows are written and read
// with plain libpq SQL, independently of the store's own code.
//
// With STAGEHAND_TEST_POSTGRES_POOLER=transaction (or session) the stores' statements go through
// the test PgBouncer in that pool mode (STAGEHAND_TEST_PGBOUNCER_TRANSACTION_URL or _SESSION_URL,
// from scripts/lib/postgres.sh), configured as a user would: behind a transaction pooler with
// `transaction_pooler` set and the LISTEN session straight to the server. Raw rows stay direct.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "contract/store_fixture.h"
#include "integration/postgres/test_server.h"
#include "stagehand/store/postgres_task_store.h"

namespace stagehand::contract {
namespace {

constexpr char kPluginId[] = "contract";

const ::testing::Environment* const kServerEnvironment =
    ::testing::AddGlobalTestEnvironment(new pg_test::ServerEnvironment());

// "YYYY-MM-DD HH:MM:SS.ffffff+00": an exact timestamptz literal.
std::string SqlTime(WallTime t) {
  using namespace std::chrono;
  const auto us = floor<microseconds>(t);
  const auto day = floor<days>(us);
  const year_month_day ymd(day);
  const hh_mm_ss<microseconds> hms(us - day);
  char text[48];
  std::snprintf(text, sizeof text, "%04d-%02u-%02u %02ld:%02ld:%02ld.%06ld+00",
                static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()),
                static_cast<unsigned>(ymd.day()), static_cast<long>(hms.hours().count()),
                static_cast<long>(hms.minutes().count()), static_cast<long>(hms.seconds().count()),
                static_cast<long>(hms.subseconds().count()));
  return text;
}

std::optional<std::string> SqlTime(const std::optional<WallTime>& t) {
  if (!t) return std::nullopt;
  return SqlTime(*t);
}

// The pool mode STAGEHAND_TEST_POSTGRES_POOLER asks for: "", "transaction" or "session".
std::string PoolerMode() {
  const char* mode = std::getenv("STAGEHAND_TEST_POSTGRES_POOLER");
  return mode == nullptr ? "" : mode;
}

class PostgresStoreFixture final : public SqlStoreFixture {
 public:
  PostgresStoreFixture()
      : url_(pg_test::ServerUrl().value_or("")),
        mode_(PoolerMode()),
        store_url_(mode_.empty() ? url_ : pg_test::PoolerUrl(mode_).value_or("")),
        database_(pg_test::UniqueDatabaseName("stagehand_contract")) {
    std::unique_ptr<TaskStore> first = OpenStore();  // creates and migrates the database
    STAGEHAND_CHECK(first != nullptr);
    raw_ = std::make_unique<pg_test::RawConnection>(url_, database_);
  }

  ~PostgresStoreFixture() override {
    raw_.reset();
    pg_test::DropDatabase(url_, database_);
  }

  std::unique_ptr<TaskStore> OpenStore() override {
    PostgresStoreOptions options;
    options.connection = store_url_;
    options.database = database_;
    if (mode_ == "transaction") {
      options.transaction_pooler = true;
      options.notify_connection = url_;
    }
    options.pool_size = 2;
    return Migrated(OpenPostgresTaskStore(kPluginId, options, SystemClock::Instance()));
  }

  void PutRawRow(const TaskRow& row) override {
    raw_->Exec(
        "INSERT INTO backstage_backend_tasks__tasks (id, settings_json, next_run_start_at, "
        "current_run_ticket, current_run_started_at, current_run_expires_at, last_run_error_json, "
        "last_run_ended_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
        "ON CONFLICT (id) DO UPDATE SET settings_json = excluded.settings_json, "
        "next_run_start_at = excluded.next_run_start_at, "
        "current_run_ticket = excluded.current_run_ticket, "
        "current_run_started_at = excluded.current_run_started_at, "
        "current_run_expires_at = excluded.current_run_expires_at, "
        "last_run_error_json = excluded.last_run_error_json, "
        "last_run_ended_at = excluded.last_run_ended_at",
        {row.id, row.settings_json, SqlTime(row.next_run_start_at), row.current_run_ticket,
         SqlTime(row.current_run_started_at), SqlTime(row.current_run_expires_at),
         row.last_run_error_json, SqlTime(row.last_run_ended_at)});
  }

  std::optional<TaskRow> GetRawRow(const std::string& id) override {
    // Times as integer microseconds since the epoch: exact, and independent of DateStyle.
    pg_test::RawResult result = raw_->Exec(
        "SELECT id, settings_json, "
        "(extract(epoch FROM next_run_start_at) * 1000000)::int8, current_run_ticket, "
        "(extract(epoch FROM current_run_started_at) * 1000000)::int8, "
        "(extract(epoch FROM current_run_expires_at) * 1000000)::int8, last_run_error_json, "
        "(extract(epoch FROM last_run_ended_at) * 1000000)::int8 "
        "FROM backstage_backend_tasks__tasks WHERE id = $1",
        {id});
    if (PQntuples(result.get()) != 1) return std::nullopt;
    PGresult* r = result.get();
    const auto text = [r](int column) -> std::optional<std::string> {
      if (PQgetisnull(r, 0, column)) return std::nullopt;
      return std::string(PQgetvalue(r, 0, column), static_cast<size_t>(PQgetlength(r, 0, column)));
    };
    const auto time = [&](int column) -> std::optional<WallTime> {
      const std::optional<std::string> us = text(column);
      if (!us) return std::nullopt;
      return WallTime(std::chrono::microseconds(std::stoll(*us)));
    };
    TaskRow row;
    row.id = *text(0);
    row.settings_json = *text(1);
    row.next_run_start_at = time(2);
    row.current_run_ticket = text(3);
    row.current_run_started_at = time(4);
    row.current_run_expires_at = time(5);
    row.last_run_error_json = text(6);
    row.last_run_ended_at = time(7);
    return row;
  }

  bool supports_notifications() const override { return true; }
  bool tells_recorded_runs() const override { return true; }

  // Through a pooler each round costs two more hops.
  int claim_race_rounds() const override { return mode_.empty() ? 10'000 : 2'000; }

 private:
  const std::string url_;
  const std::string mode_;
  const std::string store_url_;
  const std::string database_;
  std::unique_ptr<pg_test::RawConnection> raw_;
};

}  // namespace

std::unique_ptr<StoreFixture> MakeStoreFixture() {
  if (!pg_test::ServerUrl()) return nullptr;  // the environment has skipped or failed the test
  if (const std::string mode = PoolerMode(); !mode.empty() && !pg_test::PoolerUrl(mode)) {
    // scripts/lib/postgres.sh starts the PgBouncers when pgbouncer is installed.
    ADD_FAILURE() << "no test PgBouncer in " << mode
                  << " mode: STAGEHAND_TEST_PGBOUNCER_*_URL is unset (install pgbouncer with "
                     "scripts/bootstrap, and run the tests through scripts/test-postgres)";
    return nullptr;
  }
  return std::make_unique<PostgresStoreFixture>();
}

}  // namespace stagehand::contract
