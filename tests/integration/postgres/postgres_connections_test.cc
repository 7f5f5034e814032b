// What the PostgreSQL stores of a process share (PostgresConnections), on the test server: idle
// statement sessions are closed after the idle timeout (time driven by a manual clock) and opened
// again on demand, the per-process cap holds across stores, one LISTEN session serves every store
// of a database, and notifications still reach another host once its statement sessions are gone.

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "integration/postgres/test_server.h"
#include "stagehand/store/postgres_task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/manual_clock.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kSettings[] = R"({"version":2,"cadence":"PT10M","timeoutAfterDuration":"PT1M"})";

// Collects the events a handler receives. Thread-safe.
class EventLog {
 public:
  std::function<void(const StoreEvent&)> Handler() {
    return [this](const StoreEvent& event) {
      std::lock_guard lock(mu_);
      events_.push_back(event);
      cv_.notify_all();
    };
  }
  // Waits (real time, bounded: the event crosses the network) for an event of `kind` on `id`.
  bool WaitFor(StoreEvent::Kind kind, const std::string& id) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, seconds(10), [&] { return Has(kind, id); });
  }
  bool HasNow(StoreEvent::Kind kind, const std::string& id) {
    std::lock_guard lock(mu_);
    return Has(kind, id);
  }

 private:
  bool Has(StoreEvent::Kind kind, const std::string& id) const {
    for (const StoreEvent& event : events_) {
      if (event.kind == kind && event.task_id == id) return true;
    }
    return false;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<StoreEvent> events_;
};

class PostgresConnectionsTest : public pg_test::ServerTest {
 protected:
  void TearDown() override {
    for (const std::string& database : databases_) pg_test::DropDatabase(url(), database);
  }

  std::string NewDatabase() {
    databases_.push_back(pg_test::UniqueDatabaseName("stagehand_connections"));
    return databases_.back();
  }

  std::unique_ptr<TaskStore> Open(const std::string& plugin, const std::string& database,
                                  const std::string& schema,
                                  std::shared_ptr<PostgresConnections> connections) {
    PostgresStoreOptions options;
    options.connection = url();
    options.database = database;
    options.schema = schema;
    options.pool_size = 3;
    options.idle_timeout = seconds(5);
    options.connections = std::move(connections);
    Result<std::unique_ptr<TaskStore>> store = OpenPostgresTaskStore(plugin, options, clock_);
    EXPECT_THAT(store, IsOk());
    if (!store.ok()) return nullptr;
    EXPECT_THAT((*store)->Migrate(), IsOk());
    return std::move(*store);
  }

  // Returns the statement sessions (application_name 'stagehand') open on `database`.
  int StatementSessions(const std::string& database) {
    pg_test::RawConnection admin(url());
    return std::stoi(
        admin.Scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND "
                     "application_name = 'stagehand'",
                     {database}));
  }

  // The statement sessions once the server has ended those closed by a client: a backend leaves
  // pg_stat_activity shortly after its client's Terminate, so this waits (real time, bounded) for
  // the count to reach `expected` and returns the last count.
  int StatementSessionsSettled(const std::string& database, int expected) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int sessions = StatementSessions(database);
    while (sessions != expected && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      sessions = StatementSessions(database);
    }
    return sessions;
  }

  int ListenSessions(const std::string& database) {
    pg_test::RawConnection admin(url());
    return std::stoi(
        admin.Scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND "
                     "application_name = 'stagehand-listen'",
                     {database}));
  }

  static TaskSchedule Schedule() {
    Result<TaskSettingsV2> settings = TaskSettingsV2::FromJson(kSettings);
    EXPECT_THAT(settings, IsOk());
    TaskSchedule schedule;
    if (settings.ok()) schedule.settings = *settings;
    return schedule;
  }

  testing::ManualClock clock_;
  std::vector<std::string> databases_;
};

TEST_F(PostgresConnectionsTest, IdleStatementSessionsCloseAfterTheIdleTimeoutAndReopenOnDemand) {
  auto shared = PostgresConnections::CreateWithoutCloser(clock_, {});
  const std::string database = NewDatabase();
  std::unique_ptr<TaskStore> store = Open("jobs", database, "", shared);
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Upsert("a", Schedule()), IsOk());
  EXPECT_GE(shared->StatementConnections(), 1);
  EXPECT_GE(StatementSessions(database), 1);

  clock_.Advance(milliseconds(4999));
  shared->CloseExpired();
  EXPECT_GE(shared->StatementConnections(), 1) << "closed before the idle timeout";

  clock_.Advance(milliseconds(1));
  EXPECT_EQ(shared->CloseExpired(), kMonoInfinity);
  EXPECT_EQ(shared->StatementConnections(), 0);
  EXPECT_EQ(StatementSessionsSettled(database, 0), 0);

  ASSERT_THAT(store->Trigger("a"), IsOk());  // opens one again
  EXPECT_EQ(shared->StatementConnections(), 1);
  EXPECT_EQ(StatementSessions(database), 1);
}

TEST_F(PostgresConnectionsTest,
       TheCloserThreadClosesIdleSessionsWhenTheManualClockPassesTheTimeout) {
  auto shared = PostgresConnections::Create(clock_, {});
  const std::string database = NewDatabase();
  std::unique_ptr<TaskStore> store = Open("jobs", database, "", shared);
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Upsert("a", Schedule()), IsOk());
  ASSERT_TRUE(clock_.BlockUntilWaiters(1));
  EXPECT_GE(shared->StatementConnections(), 1);
  clock_.Advance(seconds(5));
  // The closer wakes on the clock, on its own thread, closes and parks again with nothing left to
  // wait for: its closing is seen by the server within a bounded real time.
  EXPECT_EQ(StatementSessionsSettled(database, 0), 0);
  EXPECT_EQ(shared->StatementConnections(), 0);
}

TEST_F(PostgresConnectionsTest, TheCapHoldsAcrossStoresByClosingAnotherStoresIdleSession) {
  PostgresConnections::Options options;
  options.max_statement_connections = 1;
  auto shared = PostgresConnections::CreateWithoutCloser(clock_, options);
  const std::string first_database = NewDatabase();
  const std::string second_database = NewDatabase();
  std::unique_ptr<TaskStore> first = Open("first", first_database, "", shared);
  std::unique_ptr<TaskStore> second = Open("second", second_database, "", shared);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  for (int round = 0; round < 3; ++round) {
    ASSERT_THAT(first->Upsert("a", Schedule()), IsOk());
    EXPECT_EQ(shared->StatementConnections(), 1);
    ASSERT_THAT(second->Upsert("b", Schedule()), IsOk());
    EXPECT_EQ(shared->StatementConnections(), 1);
    EXPECT_EQ(StatementSessions(first_database) + StatementSessions(second_database), 1);
  }
}

TEST_F(PostgresConnectionsTest, SchemaModeStoresShareOneListenSessionAndEachHearsItsOwnChannel) {
  auto shared = PostgresConnections::CreateWithoutCloser(clock_, {});
  const std::string database = NewDatabase();
  pg_test::CreateDatabase(url(), database);
  std::unique_ptr<TaskStore> jobs = Open("jobs", database, "jobs", shared);
  std::unique_ptr<TaskStore> reports = Open("reports", database, "reports", shared);
  ASSERT_NE(jobs, nullptr);
  ASSERT_NE(reports, nullptr);
  ASSERT_THAT(jobs->Upsert("a", Schedule()), IsOk());
  ASSERT_THAT(reports->Upsert("a", Schedule()), IsOk());
  EventLog jobs_events;
  EventLog reports_events;
  std::unique_ptr<Notifications> jobs_listen = jobs->Listen(jobs_events.Handler());
  std::unique_ptr<Notifications> reports_listen = reports->Listen(reports_events.Handler());
  EXPECT_EQ(shared->ListenConnections(), 1);
  EXPECT_EQ(ListenSessions(database), 1);

  ASSERT_THAT(reports->Trigger("a"), IsOk());
  ASSERT_THAT(jobs->Trigger("a"), IsOk());
  EXPECT_TRUE(jobs_events.WaitFor(StoreEvent::Kind::kTrigger, "a"));
  EXPECT_TRUE(reports_events.WaitFor(StoreEvent::Kind::kTrigger, "a"));

  reports_listen.reset();
  EXPECT_EQ(ListenSessions(database), 1) << "jobs still listens";
  jobs_listen.reset();
  EXPECT_EQ(shared->ListenConnections(), 0);
}

TEST_F(PostgresConnectionsTest, ATriggerOnOneHostWakesAnotherWhoseStatementSessionsAreClosed) {
  const std::string database = NewDatabase();
  auto host_a = PostgresConnections::CreateWithoutCloser(clock_, {});
  auto host_b = PostgresConnections::CreateWithoutCloser(clock_, {});
  std::unique_ptr<TaskStore> a = Open("jobs", database, "", host_a);
  std::unique_ptr<TaskStore> b = Open("jobs", database, "", host_b);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_THAT(b->Upsert("nightly", Schedule()), IsOk());
  EventLog b_events;
  std::unique_ptr<Notifications> listen = b->Listen(b_events.Handler());

  clock_.Advance(seconds(5));
  host_b->CloseExpired();
  EXPECT_EQ(host_b->StatementConnections(), 0);
  EXPECT_EQ(host_b->ListenConnections(), 1);

  ASSERT_THAT(a->Trigger("nightly"), IsOk());
  EXPECT_TRUE(b_events.WaitFor(StoreEvent::Kind::kTrigger, "nightly"));
  EXPECT_EQ(host_b->StatementConnections(), 0) << "hearing a notification needs no statement";
}

}  // namespace
}  // namespace stagehand
