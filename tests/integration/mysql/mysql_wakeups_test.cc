// How hosts on MySQL learn of changes (ADR 0019), against the test MariaDB: stagehand's own tables,
// a waiter blocked on its named lock woken by a writer's KILL QUERY, and the sessions a writer must
// never end.

#include <gmock/gmock.h>

#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "integration/mysql/test_server.h"
#include "integration/tcp_proxy.h"
#include "store/mysql/my_wake_sender.h"
#include "store/mysql/my_wakeups.h"

namespace stagehand {
namespace {

using std::chrono::seconds;
using store_internal::ChangeWaiter;
using store_internal::MyConnection;
using store_internal::MyParams;
using store_internal::MyResult;
using store_internal::WaiterWaker;
using store_internal::WakeSender;

Status ErrorOf(std::string_view operation, const MyResult& result) {
  return InternalError(std::string(operation) + ": " + result.error());
}

// Polls `condition` every 10 ms for up to 10 s (real time: the server's state is only seen by
// asking it).
bool Eventually(const std::function<bool()>& condition) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

class MySqlWakeupsTest : public mysql_test::ServerTest {
 protected:
  void SetUp() override {
    mysql_test::ServerTest::SetUp();
    if (IsSkipped() || HasFailure()) return;
    writer_ = Connect();
    ASSERT_NE(writer_, nullptr);
    const Status migrated = store_internal::MigrateMySqlStagehand(*writer_, "plugin 'p'", ErrorOf);
    ASSERT_TRUE(migrated.ok()) << migrated.ToString();
  }

  std::int64_t Change() {
    MyResult added =
        writer_->Execute("INSERT INTO stagehand_changes (kind, task_id) VALUES ('trigger', 't')");
    EXPECT_TRUE(added.ok()) << added.error();
    MyResult seq = writer_->Execute("SELECT LAST_INSERT_ID()");
    return seq.GetInt(0, 0);
  }

  // Whether `host`'s wait statement is running on the server.
  bool Sleeping(const std::string& host) {
    MyResult found =
        writer_->Execute("SELECT count(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE ?",
                         MyParams().Add("SELECT IF(%GET_LOCK(%)), '" + host + "'"));
    return found.ok() && found.GetInt(0, 0) == 1;
  }

  // Starts `waiter` waiting (30 s at most) with `seen` seen; the future holds what Wait returned.
  std::future<Result<std::int64_t>> StartWaiting(ChangeWaiter& waiter, std::int64_t seen) {
    return std::async(std::launch::async,
                      [&waiter, seen] { return waiter.Wait(seen, seconds(30)); });
  }

  std::unique_ptr<MyConnection> writer_;
};

TEST_F(MySqlWakeupsTest, OwnMigrationsCreateTheirTablesOnceAndNeverTouchKnexs) {
  ASSERT_TRUE(store_internal::MigrateMySqlStagehand(*writer_, "plugin 'p'", ErrorOf).ok());
  MyResult listed = writer_->Execute("SELECT name FROM stagehand_migrations ORDER BY name");
  ASSERT_TRUE(listed.ok()) << listed.error();
  ASSERT_EQ(listed.rows(), 4);
  EXPECT_EQ(listed.Get(0, 0), "0001_changes_and_waiters");
  EXPECT_EQ(listed.Get(1, 0), "0002_task_runs");
  EXPECT_EQ(listed.Get(2, 0), "0003_task_registrations");
  EXPECT_EQ(listed.Get(3, 0), "0004_request_keys");
  MyResult knex = writer_->Execute(
      "SELECT count(*) FROM information_schema.TABLES WHERE table_schema = database() AND "
      "table_name LIKE 'backstage%'");
  EXPECT_EQ(knex.GetInt(0, 0), 0);

  ASSERT_TRUE(
      writer_->Execute("INSERT INTO stagehand_migrations (name) VALUES ('0099_future')").ok());
  const Status refused = store_internal::MigrateMySqlStagehand(*writer_, "plugin 'p'", ErrorOf);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("0099_future"));
}

TEST_F(MySqlWakeupsTest, AWriterWakesAWaiterThatHasNotSeenItsChange) {
  ChangeWaiter waiter(Connect(), Connect(), "host-a");
  const std::int64_t seen = Change();
  std::future<Result<std::int64_t>> waited = StartWaiting(waiter, seen);
  ASSERT_TRUE(Eventually([&] { return Sleeping("host-a"); }));
  const std::int64_t change = Change();
  WaiterWaker waker("host-b");
  Result<int> woken = waker.Wake(*writer_, change, [](const std::string&) {});
  ASSERT_TRUE(woken.ok()) << woken.status().ToString();
  EXPECT_EQ(*woken, 1);
  ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready)
      << "the waiter slept on after the wake";
  ASSERT_TRUE(waited.get().ok());
}

TEST_F(MySqlWakeupsTest, AChangeMadeBeforeTheWaitEndsItAtOnce) {
  ChangeWaiter waiter(Connect(), Connect(), "host-a");
  const std::int64_t seen = Change();
  const std::int64_t change = Change();
  std::future<Result<std::int64_t>> waited = StartWaiting(waiter, seen);
  ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready);
  Result<std::int64_t> latest = waited.get();
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(*latest, change);
}

TEST_F(MySqlWakeupsTest, AChangeCommittedWhileTheWaitIsOnItsWayIsNeverMissed) {
  // The waiter's session stalls right before its wait statement reaches the server (as a
  // descheduled thread would): a writer commits and wakes meanwhile, finding nobody asleep. The
  // wait, once it arrives, must still see the change.
  proxy_test::TcpProxy proxy(params_.port);
  store_internal::MyConnectParams through_proxy = params_;
  through_proxy.database = database_;
  through_proxy.port = proxy.port();
  Result<std::unique_ptr<MyConnection>> session = MyConnection::Open(through_proxy);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ChangeWaiter waiter(std::move(*session), Connect(), "host-a");
  const std::int64_t seen = Change();
  proxy.HoldNext("GET_LOCK(");
  std::future<Result<std::int64_t>> waited = StartWaiting(waiter, seen);
  ASSERT_TRUE(proxy.WaitUntilHeld(seconds(10)));
  const std::int64_t change = Change();
  Result<int> woken = WaiterWaker("host-b").Wake(*writer_, change, [](const std::string&) {});
  ASSERT_TRUE(woken.ok()) << woken.status().ToString();
  EXPECT_EQ(*woken, 0) << "the waiter was not in its wait yet";
  proxy.ReleaseHeld();
  ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready)
      << "the waiter slept through a change committed before its wait began";
  Result<std::int64_t> latest = waited.get();
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(*latest, change);
}

TEST_F(MySqlWakeupsTest, ASenderWakesTheWaitersWithoutItsCallerWaitingForTheServer) {
  ChangeWaiter waiter(Connect(), Connect(), "host-a");
  const std::int64_t seen = Change();
  std::future<Result<std::int64_t>> waited = StartWaiting(waiter, seen);
  ASSERT_TRUE(Eventually([&] { return Sleeping("host-a"); }));
  // The sender's KILL stalls on its way to the server (as one the server holds for its two
  // seconds of retries would): the writer that asked for the wake has its answer meanwhile.
  proxy_test::TcpProxy proxy(params_.port);
  store_internal::MyConnectParams through_proxy = params_;
  through_proxy.database = database_;
  through_proxy.port = proxy.port();
  WakeSender sender(through_proxy);
  proxy.HoldNext("KILL QUERY");
  std::future<void> sent = std::async(std::launch::async, [&] { sender.Send(Change()); });
  ASSERT_EQ(sent.wait_for(seconds(10)), std::future_status::ready) << "Send waited for the wake";
  ASSERT_TRUE(proxy.WaitUntilHeld(seconds(10)));
  EXPECT_EQ(waited.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  // Asked again meanwhile, it sends one more wake after the one under way.
  sender.Send(Change());
  proxy.ReleaseHeld();
  ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready)
      << "the waiter slept on after the wake";
  ASSERT_TRUE(waited.get().ok());
  sender.Flush();
}

TEST_F(MySqlWakeupsTest, WakesOfSeveralHostsAtOnceNeverStall) {
  // Three hosts, each waiting and each waking the others after its own change, all at once. In
  // SLEEP, about one round in twelve had a kill the server held for two seconds.
  constexpr int kHosts = 3;
  constexpr int kRounds = 60;
  std::vector<std::unique_ptr<ChangeWaiter>> waiters;
  std::vector<std::unique_ptr<MyConnection>> writers;
  for (int host = 0; host < kHosts; ++host) {
    waiters.push_back(
        std::make_unique<ChangeWaiter>(Connect(), Connect(), "host-" + std::to_string(host)));
    writers.push_back(Connect());
    ASSERT_NE(writers.back(), nullptr);
  }
  std::int64_t seen = Change();
  double slowest_ms = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::future<Result<std::int64_t>>> waited;
    for (auto& waiter : waiters) waited.push_back(StartWaiting(*waiter, seen));
    ASSERT_TRUE(Eventually([&] {
      for (int host = 0; host < kHosts; ++host) {
        if (!Sleeping("host-" + std::to_string(host))) return false;
      }
      return true;
    }));
    const auto begin = std::chrono::steady_clock::now();
    std::vector<std::thread> waking;
    for (int host = 0; host < kHosts; ++host) {
      waking.emplace_back([&, host] {
        MyConnection& writer = *writers[static_cast<std::size_t>(host)];
        ASSERT_TRUE(writer
                        .Execute("INSERT INTO stagehand_changes (kind, task_id) VALUES "
                                 "('trigger', 't')")
                        .ok());
        const std::int64_t change = writer.Execute("SELECT LAST_INSERT_ID()").GetInt(0, 0);
        ASSERT_TRUE(WaiterWaker("writer-" + std::to_string(host))
                        .Wake(writer, change, [](const std::string&) {})
                        .ok());
      });
    }
    for (std::thread& thread : waking) thread.join();
    for (auto& wait : waited) {
      ASSERT_EQ(wait.wait_for(seconds(10)), std::future_status::ready);
      Result<std::int64_t> latest = wait.get();
      ASSERT_TRUE(latest.ok()) << latest.status().ToString();
    }
    slowest_ms =
        std::max(slowest_ms,
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin)
                     .count());
    seen = writer_->Execute("SELECT max(seq) FROM stagehand_changes").GetInt(0, 0);
  }
  EXPECT_LT(slowest_ms, 1000) << "a round of wakes took " << slowest_ms << " ms";
}

TEST_F(MySqlWakeupsTest, AWaitWhoseLockHolderIsGoneEndsAtOnce) {
  ChangeWaiter waiter(Connect(), Connect(), "host-a");
  const std::int64_t seen = Change();
  std::future<Result<std::int64_t>> waited = StartWaiting(waiter, seen);
  ASSERT_TRUE(Eventually([&] { return Sleeping("host-a"); }));
  // The waiter's lock, named as ADR 0019 says.
  const std::string lock = "CONCAT('stagehand_wait_', SHA1(CONCAT(DATABASE(), '/', 'host-a')))";
  MyResult holder = writer_->Execute("SELECT IS_USED_LOCK(" + lock + ")");
  ASSERT_TRUE(holder.ok() && !holder.IsNull(0, 0)) << holder.error();
  ASSERT_TRUE(writer_->Execute("KILL ?", MyParams().Add(holder.GetInt(0, 0))).ok());
  ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready)
      << "the wait went on without its lock's holder";
  Result<std::int64_t> ended = waited.get();
  ASSERT_FALSE(ended.ok());
  EXPECT_EQ(ended.status().code(), StatusCode::kUnavailable) << ended.status().ToString();
  MyResult free = writer_->Execute("SELECT IS_FREE_LOCK(" + lock + ")");
  EXPECT_EQ(free.GetInt(0, 0), 1) << "the waiter kept the lock it found free";
}

TEST_F(MySqlWakeupsTest, AWaiterIsWokenOncePerWaitAndNotForWhatItHasSeen) {
  ChangeWaiter waiter(Connect(), Connect(), "host-a");
  const std::int64_t seen = Change();
  std::future<Result<std::int64_t>> waited = StartWaiting(waiter, seen);
  ASSERT_TRUE(Eventually([&] { return Sleeping("host-a"); }));
  WaiterWaker waker("host-b");
  const auto ignore = [](const std::string&) {};
  EXPECT_EQ(*waker.Wake(*writer_, seen, ignore), 0) << "woken for a change it had seen";
  EXPECT_EQ(*waker.Wake(*writer_, Change(), ignore), 1);
  ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready);
  // Recorded again as having seen only `seen`, it is not woken twice by this writer.
  ASSERT_TRUE(
      writer_->Execute("UPDATE stagehand_waiters SET seen_seq = ?", MyParams().Add(seen)).ok());
  EXPECT_EQ(*waker.Wake(*writer_, Change(), ignore), 0);
}

TEST_F(MySqlWakeupsTest, ASessionThatIsNotInTheWaitIsNeverEnded) {
  // A waiter record names a session that runs something else (as a session that reused a dead
  // waiter's id after a server restart would).
  std::unique_ptr<MyConnection> stranger = Connect();
  ASSERT_NE(stranger, nullptr);
  const std::int64_t id = stranger->Execute("SELECT CONNECTION_ID()").GetInt(0, 0);
  ASSERT_TRUE(writer_
                  ->Execute("INSERT INTO stagehand_waiters (host, connection_id, seen_seq, "
                            "wait_seconds, updated_at) VALUES ('gone', ?, 0, 2, NOW())",
                            MyParams().Add(id))
                  .ok());
  std::future<MyResult> busy = std::async(std::launch::async, [&] {
    return stranger->Execute("SELECT SLEEP(2), 'other'");  // alike, but not the wait's text
  });
  ASSERT_TRUE(Eventually([&] {
    MyResult running = writer_->Execute(
        "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO LIKE 'SELECT "
        "SLEEP(2)%'",
        MyParams().Add(id));
    return running.ok() && running.GetInt(0, 0) == 1;
  }));
  WaiterWaker waker("host-b");
  EXPECT_EQ(*waker.Wake(*writer_, Change(), [](const std::string&) {}), 0);
  const MyResult slept = busy.get();
  ASSERT_TRUE(slept.ok()) << "the stranger's statement was killed: " << slept.error();
  EXPECT_EQ(slept.Get(0, 0), "0") << "the stranger's SLEEP was interrupted";
}

TEST_F(MySqlWakeupsTest, AnAccountThatMayNotWakeAWaiterSaysSoOnce) {
  std::unique_ptr<MyConnection> admin = Connect("");
  ASSERT_NE(admin, nullptr);
  const std::string user = "limited_" + std::to_string(::getpid());
  admin->Execute("DROP USER IF EXISTS '" + user + "'@'127.0.0.1'");
  ASSERT_TRUE(
      admin->Execute("CREATE USER '" + user + "'@'127.0.0.1' IDENTIFIED BY 'limited'").ok());
  // PROCESS shows it the waiter; without CONNECTION ADMIN it may not end another account's query.
  ASSERT_TRUE(admin->Execute("GRANT PROCESS ON *.* TO '" + user + "'@'127.0.0.1'").ok());
  ASSERT_TRUE(
      admin->Execute("GRANT ALL ON `" + database_ + "`.* TO '" + user + "'@'127.0.0.1'").ok());
  store_internal::MyConnectParams params = params_;
  params.user = user;
  params.password = "limited";
  params.database = database_;
  Result<std::unique_ptr<MyConnection>> limited = MyConnection::Open(params);
  ASSERT_TRUE(limited.ok()) << limited.status().ToString();

  ChangeWaiter waiter(Connect(), Connect(), "host-a");
  const std::int64_t seen = Change();
  std::future<Result<std::int64_t>> waited = StartWaiting(waiter, seen);
  ASSERT_TRUE(Eventually([&] { return Sleeping("host-a"); }));
  WaiterWaker waker("host-b");
  std::vector<std::string> refused;
  const auto record = [&](const std::string& host) { refused.push_back(host); };
  EXPECT_EQ(*waker.Wake(**limited, Change(), record), 0);
  EXPECT_EQ(*waker.Wake(**limited, Change(), record), 0);
  EXPECT_EQ(refused, std::vector<std::string>{"host-a"});
  // The waiter is still asleep; the writer's own account wakes it.
  EXPECT_TRUE(Sleeping("host-a"));
  EXPECT_EQ(*WaiterWaker("host-c").Wake(*writer_, Change(), [](const std::string&) {}), 1);
  ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready);
  limited->reset();
  admin->Execute("DROP USER '" + user + "'@'127.0.0.1'");
}

TEST_F(MySqlWakeupsTest, ALeavingWaiterRemovesItsRecordAndBadNamesAreRefused) {
  {
    ChangeWaiter waiter(Connect(), Connect(), "host-a");
    const std::int64_t seen = Change();
    Change();
    ASSERT_TRUE(waiter.Wait(seen, seconds(1)).ok());
    EXPECT_EQ(writer_->Execute("SELECT count(*) FROM stagehand_waiters").GetInt(0, 0), 1);
  }
  EXPECT_EQ(writer_->Execute("SELECT count(*) FROM stagehand_waiters").GetInt(0, 0), 0);
  ChangeWaiter bad(Connect(), Connect(), "host a'; --");
  Result<std::int64_t> refused = bad.Wait(0, seconds(1));
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stagehand
