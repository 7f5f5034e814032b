// Faults around the PostgreSQL store: a server that cannot be reached at startup, a wrong password,
// and a server stopped and restarted under the store (operations fail "unavailable", never crash,
// and work again afterwards; the listener reconnects and asks for a resync). The restart tests
// stop the test server, so CTest runs this binary alone (RUN_SERIAL).

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fixtures/task_schedules.h"
#include "integration/postgres/test_server.h"
#include "integration/tcp_proxy.h"
#include "stagehand/store/postgres_task_store.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

constexpr char kPluginId[] = "faults";

// Returns a port on 127.0.0.1 that nothing listens on (bound, then released).
int ClosedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// Returns `url` with its port replaced by `port`.
std::string WithPort(const std::string& url, int port) {
  const std::size_t at = url.rfind('@');
  const std::size_t colon = url.find(':', at == std::string::npos ? 0 : at);
  const std::size_t slash = url.find('/', colon);
  return url.substr(0, colon + 1) + std::to_string(port) + url.substr(slash);
}

// Returns the port of `url`.
int PortOf(const std::string& url) {
  const std::size_t at = url.rfind('@');
  const std::size_t colon = url.find(':', at == std::string::npos ? 0 : at);
  return std::atoi(url.c_str() + colon + 1);
}

TaskSchedule Every10Minutes() {
  TaskSchedule schedule;
  schedule.settings.cadence = testing::ParsedCadence("PT10M");
  schedule.settings.timeout_after_duration = "PT1M";
  return schedule;
}

// Collects events delivered to a listener. Thread-safe.
class Inbox {
 public:
  void Add(const StoreEvent& event) {
    std::lock_guard lock(mu_);
    events_.push_back(event);
    changed_.notify_all();
  }

  // Waits (bounded, in real time) for an event of `kind` for `task_id` after the first `skip`.
  bool WaitFor(StoreEvent::Kind kind, const std::string& task_id, size_t skip = 0) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, seconds(20), [&] {
      for (size_t i = skip; i < events_.size(); ++i) {
        if (events_[i].kind == kind && events_[i].task_id == task_id) return true;
      }
      return false;
    });
  }

  size_t size() {
    std::lock_guard lock(mu_);
    return events_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<StoreEvent> events_;
};

class PostgresFaultTest : public pg_test::ServerTest {
 protected:
  void TearDown() override {
    if (!database_.empty()) pg_test::DropDatabase(url(), database_);
  }

  std::unique_ptr<TaskStore> OpenFresh() {
    if (database_.empty()) database_ = pg_test::UniqueDatabaseName("stagehand_faults");
    PostgresStoreOptions options;
    options.connection = url();
    options.database = database_;
    options.pool_size = 3;
    options.connect_timeout = seconds(2);
    Result<std::unique_ptr<TaskStore>> store =
        OpenPostgresTaskStore(kPluginId, options, SystemClock::Instance());
    EXPECT_THAT(store, IsOk());
    if (!store.ok()) return nullptr;
    const Status migrated = (*store)->Migrate();
    EXPECT_THAT(migrated, IsOk());
    return std::move(*store);
  }

  // Whether this run may stop and start the server (scripts/test-postgres exports how).
  static bool CanControlServer() {
    return !Env("STAGEHAND_TEST_PG_CTL").empty() && !Env("STAGEHAND_TEST_POSTGRES_DATA").empty();
  }

  static void PgCtl(const std::string& action) {
    std::string command = Env("STAGEHAND_TEST_PG_CTL") + " -D '" +
                          Env("STAGEHAND_TEST_POSTGRES_DATA") + "' -w -t 60 -m fast";
    if (!Env("STAGEHAND_TEST_POSTGRES_LOG").empty()) {
      command += " -l '" + Env("STAGEHAND_TEST_POSTGRES_LOG") + "'";
    }
    command += " " + action + " > /dev/null";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }

  // Checks that `status` is kUnavailable and names the plugin and the database.
  ::testing::AssertionResult IsUnavailable(const Status& status) {
    if (status.code() != StatusCode::kUnavailable) {
      return ::testing::AssertionFailure() << "expected UNAVAILABLE, got " << status.ToString();
    }
    if (status.message().find(kPluginId) == std::string::npos ||
        status.message().find(database_) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message does not name the plugin and database: " << status.message();
    }
    return ::testing::AssertionSuccess();
  }

  std::string database_;
};

TEST_F(PostgresFaultTest, UnreachableServerAtStartupIsUnavailableNamingPluginAndDatabase) {
  const std::string secret = "pw-s3cret-xyzzy";
  PostgresStoreOptions options;
  options.connection = "postgresql://stagehand:" + secret +
                       "@127.0.0.1:" + std::to_string(ClosedPort()) + "/postgres";
  options.database = "backstage_plugin_catalog";
  options.connect_timeout = seconds(2);
  Result<std::unique_ptr<TaskStore>> store =
      OpenPostgresTaskStore("catalog", options, SystemClock::Instance());
  ASSERT_THAT(store, StatusIs(StatusCode::kUnavailable, "'catalog'"));
  EXPECT_NE(store.status().message().find("backstage_plugin_catalog"), std::string::npos)
      << store.status().message();
  EXPECT_EQ(store.status().message().find(secret), std::string::npos) << store.status().message();

  // Without a plugin database the connection's own database is named.
  options.database.clear();
  store = OpenPostgresTaskStore("catalog", options, SystemClock::Instance());
  ASSERT_THAT(store, StatusIs(StatusCode::kUnavailable, "database 'postgres'"));
  EXPECT_EQ(store.status().message().find(secret), std::string::npos);
}

// A listener on 127.0.0.1 that accepts every connection and closes it at once, as a load balancer
// or proxy in front of a dead server does.
class ClosingListener {
 public:
  ClosingListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address);
    ::listen(fd_, 16);
    socklen_t length = sizeof address;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::jthread([this](std::stop_token stop) {
      while (!stop.stop_requested()) {
        const int client = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (client < 0) return;
        accepted_.fetch_add(1);
        ::close(client);
      }
    });
  }
  ~ClosingListener() {
    thread_.request_stop();
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }
  int accepted() const { return accepted_.load(); }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<int> accepted_{0};
  std::jthread thread_;
};

// `url` (a postgresql:// URL) as a multi-host URL whose first host is 127.0.0.1:`port`.
std::string HostFirst(const std::string& url, int port) {
  const std::size_t at = url.rfind('@');
  return url.substr(0, at + 1) + "127.0.0.1:" + std::to_string(port) + "," + url.substr(at + 1);
}

TEST_F(PostgresFaultTest, AMultiHostUrlReachesTheNextHostWhenTheFirstClosesTheConnection) {
  // libpq alone stops at a host that accepts the connection and drops it.
  ClosingListener dead;
  const std::string multi = HostFirst(url(), dead.port());
  database_ = pg_test::UniqueDatabaseName("stagehand_faults");
  PostgresStoreOptions options;
  options.connection = multi;
  options.database = database_;
  options.connect_timeout = seconds(2);
  Result<std::unique_ptr<TaskStore>> store =
      OpenPostgresTaskStore(kPluginId, options, SystemClock::Instance());
  ASSERT_THAT(store, IsOk());
  ASSERT_THAT((*store)->Migrate(), IsOk());
  EXPECT_THAT((*store)->DatabaseNow(), IsOk());
  EXPECT_GE(dead.accepted(), 1);
}

TEST_F(PostgresFaultTest, AMultiHostUrlDoesNotWaitOutAFirstHostThatNeverAnswers) {
  // A primary cut off by a partition: the TCP handshake completes (at its proxy), nothing more.
  proxy_test::TcpProxy silent(PortOf(url()));
  silent.Blackhole();
  const std::string multi = HostFirst(url(), silent.port());
  database_ = pg_test::UniqueDatabaseName("stagehand_faults");
  PostgresStoreOptions options;
  options.connection = multi;
  options.database = database_;
  options.connect_timeout = seconds(10);
  const auto started = std::chrono::steady_clock::now();
  Result<std::unique_ptr<TaskStore>> store =
      OpenPostgresTaskStore(kPluginId, options, SystemClock::Instance());
  const auto took = std::chrono::steady_clock::now() - started;
  ASSERT_THAT(store, IsOk());
  EXPECT_THAT((*store)->DatabaseNow(), IsOk());
  EXPECT_LT(took, seconds(5)) << "waited for the silent host's connect timeout";
}

TEST_F(PostgresFaultTest, MalformedConnectionStringIsUnavailableWithoutShowingThePassword) {
  const std::string secret = "pw-s3cret-malformed";
  // libpq echoes a URI it cannot parse, password included.
  for (const std::string& connection : {"postgresql://stagehand:" + secret + "@[::1/postgres",
                                        "host=127.0.0.1 password=" + secret + " port=1 junk"}) {
    PostgresStoreOptions options;
    options.connection = connection;
    options.database = "backstage_plugin_catalog";
    Result<std::unique_ptr<TaskStore>> store =
        OpenPostgresTaskStore("catalog", options, SystemClock::Instance());
    ASSERT_THAT(store, StatusIs(StatusCode::kUnavailable, "backstage_plugin_catalog"));
    EXPECT_EQ(store.status().message().find(secret), std::string::npos) << store.status().message();
  }
}

TEST_F(PostgresFaultTest, WrongPasswordIsUnavailableWithoutShowingIt) {
  const std::string secret = "wrong-pw-q7Zk";
  std::string bad_url = url();
  const size_t at = bad_url.find('@');
  const size_t colon = bad_url.rfind(':', at);
  if (at == std::string::npos || colon == std::string::npos || colon < bad_url.find("//")) {
    GTEST_SKIP() << "the test URL carries no password to replace";
  }
  bad_url.replace(colon + 1, at - colon - 1, secret);
  PostgresStoreOptions options;
  options.connection = bad_url;
  options.database = "backstage_plugin_secret";
  Result<std::unique_ptr<TaskStore>> store =
      OpenPostgresTaskStore("secret", options, SystemClock::Instance());
  ASSERT_THAT(store, StatusIs(StatusCode::kUnavailable, "backstage_plugin_secret"));
  EXPECT_EQ(store.status().message().find(secret), std::string::npos) << store.status().message();
}

TEST_F(PostgresFaultTest, StatementPastTheTimeoutIsUnavailableAndTheSessionStaysUsable) {
  {
    // Created, migrated and registered with the default timeout: on a busy machine a migration's
    // statement can take longer than the short timeout under test.
    std::unique_ptr<TaskStore> direct = OpenFresh();
    ASSERT_NE(direct, nullptr);
    ASSERT_THAT(direct->Upsert("locked", Every10Minutes()), IsOk());
  }
  PostgresStoreOptions options;
  options.connection = url();
  options.database = database_;
  options.pool_size = 1;
  options.statement_timeout = seconds(1);
  Result<std::unique_ptr<TaskStore>> opened =
      OpenPostgresTaskStore(kPluginId, options, SystemClock::Instance());
  ASSERT_THAT(opened, IsOk());
  TaskStore& store = **opened;

  // Another session holds the row lock, so the claim waits until its statement timeout.
  pg_test::RawConnection blocker(url(), database_);
  blocker.Exec("BEGIN");
  blocker.Exec("SELECT * FROM backstage_backend_tasks__tasks WHERE id = 'locked' FOR UPDATE");
  Result<ClaimResult> claim = store.Claim("locked", "t1", minutes(1), minutes(1));
  EXPECT_TRUE(IsUnavailable(claim.status()));
  EXPECT_NE(claim.status().message().find("57014"), std::string::npos) << claim.status().message();
  blocker.Exec("ROLLBACK");

  // The pool's only session was not lost: the next statements run on it.
  claim = store.Claim("locked", "t1", minutes(1), minutes(1));
  ASSERT_THAT(claim, IsOk());
  EXPECT_TRUE(claim->claimed);
}

// Regression (reliability suite, finding 2): a blackholed connection blocked a libpq call for
// minutes, and with it a daemon's shutdown.
TEST_F(PostgresFaultTest, BlackholedConnectionFailsWithinTheCallTimeout) {
  database_ = pg_test::UniqueDatabaseName("stagehand_faults");
  {
    // Create and migrate the database directly.
    std::unique_ptr<TaskStore> direct = OpenFresh();
    ASSERT_NE(direct, nullptr);
  }
  proxy_test::TcpProxy proxy(PortOf(url()));
  PostgresStoreOptions options;
  options.connection = WithPort(url(), proxy.port());
  options.database = database_;
  options.pool_size = 2;
  options.connect_timeout = seconds(2);
  Result<std::unique_ptr<TaskStore>> opened =
      OpenPostgresTaskStore(kPluginId, options, SystemClock::Instance());
  ASSERT_THAT(opened, IsOk());
  TaskStore& store = **opened;
  constexpr milliseconds kBound(400);
  store.SetCallTimeout(kBound);
  const TaskSchedule schedule = Every10Minutes();
  ASSERT_THAT(store.Upsert("t", schedule), IsOk());
  Result<ClaimResult> claim = store.Claim("t", "t1", minutes(1), minutes(1));
  ASSERT_TRUE(claim.ok() && claim->claimed) << claim.status().ToString();

  proxy.Blackhole();
  const auto started = std::chrono::steady_clock::now();
  Result<LeaseStatus> renewed = store.RenewLease("t", "t1", minutes(1), minutes(1));
  const auto renew_took = std::chrono::steady_clock::now() - started;
  EXPECT_TRUE(IsUnavailable(renewed.status()));
  EXPECT_LT(renew_took, kBound + milliseconds(600));
  EXPECT_GE(renew_took, kBound - milliseconds(50));

  // The abandoned session is dropped; the next call opens another, which the blackhole stalls in
  // its handshake until the connect timeout.
  const auto release_started = std::chrono::steady_clock::now();
  Result<bool> released = store.Release("t", "t1", schedule, std::nullopt);
  const auto release_took = std::chrono::steady_clock::now() - release_started;
  EXPECT_TRUE(IsUnavailable(released.status()));
  EXPECT_LT(release_took, options.connect_timeout + kBound + seconds(1));
}

TEST_F(PostgresFaultTest, StoppedServerIsUnavailableAndRestartedServerWorksAgain) {
  if (!CanControlServer())
    GTEST_SKIP() << "STAGEHAND_TEST_PG_CTL is not set (use scripts/test-postgres)";
  std::unique_ptr<TaskStore> store = OpenFresh();
  std::unique_ptr<TaskStore> other = OpenFresh();
  ASSERT_NE(store, nullptr);
  ASSERT_NE(other, nullptr);
  const TaskSchedule schedule = Every10Minutes();
  auto inbox = std::make_shared<Inbox>();
  std::unique_ptr<Notifications> subscription =
      other->Listen([inbox](const StoreEvent& event) { inbox->Add(event); });
  ASSERT_THAT(store->Upsert("before", schedule), IsOk());
  ASSERT_TRUE(inbox->WaitFor(StoreEvent::Kind::kUpsert, "before"));
  ASSERT_THAT(store->Upsert("running", schedule), IsOk());
  Result<ClaimResult> claimed = store->Claim("running", "t1", minutes(1), minutes(1));
  ASSERT_TRUE(claimed.ok() && claimed->claimed);

  PgCtl("stop");
  const std::vector<std::string> ids = {"before", "running"};
  EXPECT_TRUE(IsUnavailable(store->DatabaseNow().status()));
  EXPECT_TRUE(IsUnavailable(store->Upsert("during", schedule).status()));
  EXPECT_TRUE(IsUnavailable(store->Poll(ids, true).status()));
  EXPECT_TRUE(IsUnavailable(store->Claim("before", "t2", minutes(1), minutes(1)).status()));
  EXPECT_TRUE(IsUnavailable(store->RenewLease("running", "t1", minutes(1), minutes(1)).status()));
  EXPECT_TRUE(IsUnavailable(store->Release("running", "t1", schedule, std::nullopt).status()));
  EXPECT_TRUE(IsUnavailable(store->Trigger("before")));
  EXPECT_TRUE(IsUnavailable(store->Cancel("running", minutes(1))));
  EXPECT_TRUE(IsUnavailable(store->SweepExpired().status()));
  EXPECT_TRUE(IsUnavailable(store->States().status()));
  EXPECT_TRUE(IsUnavailable(store->Delete("before")));
  EXPECT_TRUE(IsUnavailable(store->Migrate()));
  EXPECT_TRUE(IsUnavailable(other->DatabaseNow().status()));
  const size_t before_restart = inbox->size();
  PgCtl("start");

  // Broken sessions were dropped while the server was down: the first call after the restart
  // already works.
  Result<WallTime> now = store->DatabaseNow();
  EXPECT_THAT(now, IsOk());
  Result<LeaseStatus> renewed = store->RenewLease("running", "t1", minutes(1), minutes(1));
  ASSERT_THAT(renewed, IsOk());
  EXPECT_EQ(*renewed, LeaseStatus::kHeld);
  Result<bool> released = store->Release("running", "t1", schedule, std::nullopt);
  ASSERT_THAT(released, IsOk());
  EXPECT_TRUE(*released);
  Result<PollResult> poll = store->Poll(ids, true);
  ASSERT_THAT(poll, IsOk());
  EXPECT_EQ(poll->entries[0].readiness, Readiness::kReady);
  EXPECT_EQ(poll->entries[1].readiness, Readiness::kNotReady);

  // The listener reconnected: it asks for a resync, then delivers new writes again.
  EXPECT_TRUE(inbox->WaitFor(StoreEvent::Kind::kResync, "", before_restart));
  ASSERT_THAT(store->Upsert("after", schedule), IsOk());
  EXPECT_TRUE(inbox->WaitFor(StoreEvent::Kind::kUpsert, "after", before_restart));
  ASSERT_THAT(other->Trigger("after"), IsOk());
  EXPECT_TRUE(inbox->WaitFor(StoreEvent::Kind::kTrigger, "after", before_restart));
}

// PgBouncer in transaction mode lends each statement whichever server session is free, so a
// statement prepared on one is unknown on the next. A store nobody told about the pooler finds
// out from the first such failure and runs its statements unnamed from then on: no call fails.
TEST_F(PostgresFaultTest, AStoreNotToldOfATransactionPoolerStillWorksThroughIt) {
  const std::optional<std::string> pooler = pg_test::PoolerUrl("transaction");
  ASSERT_TRUE(pooler) << "no test PgBouncer: install pgbouncer (scripts/bootstrap) and run the "
                         "tests through scripts/test-postgres";
  database_ = pg_test::UniqueDatabaseName("stagehand_pooled");
  constexpr int kWorkers = 4;
  constexpr int kRounds = 100;
  PostgresStoreOptions options;
  options.connection = *pooler;
  options.database = database_;
  options.pool_size = kWorkers;
  Result<std::unique_ptr<TaskStore>> opened =
      OpenPostgresTaskStore(kPluginId, options, SystemClock::Instance());
  ASSERT_THAT(opened, IsOk());
  std::unique_ptr<TaskStore> store = std::move(*opened);
  ASSERT_THAT(store->Migrate(), IsOk());
  TaskSchedule schedule;
  schedule.settings.cadence = testing::ParsedCadence("PT0S");
  schedule.settings.timeout_after_duration = "PT1M";
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_THAT(store->Upsert("pooled-" + std::to_string(w), schedule), IsOk());
  }
  std::mutex mu;
  std::map<std::string, int> failures;  // guarded by mu
  int released = 0;                     // guarded by mu
  {
    std::vector<std::jthread> workers;
    for (int w = 0; w < kWorkers; ++w) {
      workers.emplace_back([&, w] {
        const std::string id = "pooled-" + std::to_string(w);
        for (int round = 0; round < kRounds; ++round) {
          const std::string ticket = id + "-" + std::to_string(round);
          Status status = store->Poll(std::vector<std::string>{id}, true).status();
          bool done = false;
          if (status.ok()) {
            Result<ClaimResult> claim = store->Claim(id, ticket, minutes(1), minutes(1));
            status = claim.status();
            if (claim.ok() && claim->claimed) {
              status = store->Release(id, ticket, schedule, std::nullopt).status();
              done = status.ok();
            }
          }
          std::lock_guard lock(mu);
          if (!status.ok()) ++failures[status.ToString()];
          if (done) ++released;
        }
      });
    }
  }
  EXPECT_TRUE(failures.empty()) << failures.size() << " kinds of failure, e.g. "
                                << (failures.empty() ? "" : failures.begin()->first);
  EXPECT_EQ(released, kWorkers * kRounds);
}

TEST_F(PostgresFaultTest, RestartUnderLoadOnlyEverFailsUnavailable) {
  if (!CanControlServer())
    GTEST_SKIP() << "STAGEHAND_TEST_PG_CTL is not set (use scripts/test-postgres)";
  constexpr int kWorkers = 4;
  std::unique_ptr<TaskStore> store = OpenFresh();
  ASSERT_NE(store, nullptr);
  const TaskSchedule schedule = [] {
    TaskSchedule s;
    s.settings.cadence = testing::ParsedCadence("PT0S");
    s.settings.timeout_after_duration = "PT1M";
    return s;
  }();
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_THAT(store->Upsert("load-" + std::to_string(w), schedule), IsOk());
  }

  std::mutex mu;
  std::condition_variable changed;
  std::atomic<bool> restarted{false};
  int recovered = 0;                      // workers with a success after the restart; guarded by mu
  std::map<std::string, int> unexpected;  // guarded by mu
  int unavailable = 0;                    // guarded by mu
  {
    std::vector<std::jthread> workers;
    for (int w = 0; w < kWorkers; ++w) {
      workers.emplace_back([&, w](std::stop_token stop) {
        const std::string id = "load-" + std::to_string(w);
        bool counted = false;
        for (int round = 0; !stop.stop_requested(); ++round) {
          const bool after = restarted.load();
          const std::string ticket = id + "-" + std::to_string(round);
          Status status = store->Poll(std::vector<std::string>{id}, true).status();
          if (status.ok()) {
            Result<ClaimResult> claim = store->Claim(id, ticket, minutes(1), minutes(1));
            status = claim.status();
            if (claim.ok() && claim->claimed) {
              status = store->Release(id, ticket, schedule, std::nullopt).status();
            }
          }
          std::lock_guard lock(mu);
          if (status.ok() && after && !counted) {
            counted = true;
            ++recovered;
            changed.notify_all();
          } else if (status.code() == StatusCode::kUnavailable) {
            ++unavailable;
          } else if (!status.ok()) {
            ++unexpected[status.ToString()];
          }
        }
      });
    }
    PgCtl("restart");
    restarted = true;
    std::unique_lock lock(mu);
    EXPECT_TRUE(changed.wait_for(lock, seconds(30), [&] { return recovered == kWorkers; }))
        << recovered << " of " << kWorkers << " workers recovered";
  }
  RecordProperty("unavailable_during_restart", unavailable);
  EXPECT_TRUE(unexpected.empty()) << unexpected.size() << " unexpected outcomes, e.g. "
                                  << (unexpected.empty() ? "" : unexpected.begin()->first);
  // A worker that claimed before the restart and lost its release leaves a run that only the
  // sweep can reset; the rows are all still there and readable.
  Result<std::vector<TaskRow>> rows = store->States();
  ASSERT_THAT(rows, IsOk());
  EXPECT_EQ(rows->size(), static_cast<size_t>(kWorkers));
}

}  // namespace
}  // namespace stagehand
