// The MySQL session layer against the test MariaDB: parameters bound as literals arrive intact
// whatever they hold, placeholders inside quotes, identifiers and comments are left alone, and
// failures are classified and never show the password; a session the server closed while idle is
// seen as such, and the pool does not lend it.

#include <fcntl.h>

#include <set>
#include <string>

#include "integration/mysql/test_server.h"
#include "store/mysql/my_pool.h"

namespace stagehand {
namespace {

using store_internal::MyConnection;
using store_internal::MyParams;
using store_internal::MyResult;

class MySqlConnectionTest : public mysql_test::ServerTest {};

TEST_F(MySqlConnectionTest, TextParametersArriveByteForByte) {
  std::unique_ptr<MyConnection> db = Connect();
  ASSERT_NE(db, nullptr);
  const std::string hostile = std::string("it's \\ a \"test\"\n\t; -- ? `x` ") +
                              std::string(1, '\0') + "\x1a" + "\xc3\xa9\xf0\x9f\x98\x80";
  MyResult echoed =
      db->Execute("SELECT ?, ?, ?, ?", MyParams().Add(hostile).Add(42LL).Add(0.25).AddNull());
  ASSERT_TRUE(echoed.ok()) << echoed.error();
  ASSERT_EQ(echoed.rows(), 1);
  EXPECT_EQ(echoed.Get(0, 0), hostile);
  EXPECT_EQ(echoed.GetInt(0, 1), 42);
  EXPECT_EQ(echoed.Get(0, 2), "0.25");
  EXPECT_TRUE(echoed.IsNull(0, 3));
}

TEST_F(MySqlConnectionTest, QuestionMarksInQuotesIdentifiersAndCommentsAreNotPlaceholders) {
  std::unique_ptr<MyConnection> db = Connect();
  ASSERT_NE(db, nullptr);
  MyResult result =
      db->Execute("SELECT '?', \"it\"\"s ?\", ? AS `a?b` /* ? */ -- ?\n, 'x\\'?' # ?\n",
                  MyParams().Add("value"));
  ASSERT_TRUE(result.ok()) << result.error();
  EXPECT_EQ(result.Get(0, 0), "?");
  EXPECT_EQ(result.Get(0, 1), "it\"s ?");
  EXPECT_EQ(result.Get(0, 2), "value");
  EXPECT_EQ(result.Get(0, 3), "x'?");
}

TEST_F(MySqlConnectionTest, AParameterCountThatDiffersIsAFailureNotSent) {
  std::unique_ptr<MyConnection> db = Connect();
  ASSERT_NE(db, nullptr);
  MyResult too_few = db->Execute("SELECT ?, ?", MyParams().Add("one"));
  EXPECT_FALSE(too_few.ok());
  EXPECT_NE(too_few.error().find("1 parameters for 2 placeholders"), std::string::npos)
      << too_few.error();
  EXPECT_FALSE(too_few.connection_lost());
  EXPECT_FALSE(db->Execute("SELECT 1", MyParams().Add("extra")).ok());
  EXPECT_TRUE(db->Execute("SELECT 1").ok()) << "the session is still usable";
}

TEST_F(MySqlConnectionTest, UpdatesCountTheRowsTheyMatchAsMysql2Does) {
  std::unique_ptr<MyConnection> db = Connect();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Execute("CREATE TABLE t (id int primary key, v int)").ok());
  ASSERT_TRUE(db->Execute("INSERT INTO t VALUES (1, 5), (2, 5)").ok());
  MyResult unchanged = db->Execute("UPDATE t SET v = 5 WHERE id = ?", MyParams().Add(1LL));
  ASSERT_TRUE(unchanged.ok()) << unchanged.error();
  EXPECT_EQ(unchanged.affected(), 1) << "a matched row whose value did not change still counts";
}

TEST_F(MySqlConnectionTest, AFailedStatementKeepsTheSessionAndNamesTheError) {
  std::unique_ptr<MyConnection> db = Connect();
  ASSERT_NE(db, nullptr);
  MyResult failed = db->Execute("SELECT * FROM no_such_table");
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(failed.error_code(), 1146u);  // ER_NO_SUCH_TABLE
  EXPECT_EQ(failed.sql_state(), "42S02");
  EXPECT_NE(failed.error().find("no_such_table"), std::string::npos) << failed.error();
  EXPECT_FALSE(failed.connection_lost());
  EXPECT_TRUE(db->Healthy());
}

// Waits (bounded) until the server no longer lists session `id`: the KILL has closed it.
void AwaitSessionGone(MyConnection& observer, long long id) {
  for (int attempt = 0; attempt < 500; ++attempt) {
    MyResult listed = observer.Execute(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", MyParams().Add(id));
    ASSERT_TRUE(listed.ok()) << listed.error();
    if (listed.GetInt(0, 0) == 0) return;
    usleep(10'000);
  }
  FAIL() << "session " << id << " still listed 5 s after its KILL";
}

TEST_F(MySqlConnectionTest, AKilledSessionIsNotHealthyAndIsLost) {
  std::unique_ptr<MyConnection> db = Connect();
  std::unique_ptr<MyConnection> other = Connect();
  ASSERT_NE(db, nullptr);
  ASSERT_NE(other, nullptr);
  MyResult id = db->Execute("SELECT CONNECTION_ID()");
  ASSERT_TRUE(id.ok());
  EXPECT_TRUE(db->Healthy());
  ASSERT_TRUE(other->Execute("KILL ?", MyParams().Add(id.GetInt(0, 0))).ok());
  ASSERT_NO_FATAL_FAILURE(AwaitSessionGone(*other, id.GetInt(0, 0)));
  EXPECT_FALSE(db->Healthy());
  MyResult after = db->Execute("SELECT 1");
  EXPECT_FALSE(after.ok());
  EXPECT_TRUE(after.connection_lost()) << after.error_code() << " " << after.error();
}

TEST_F(MySqlConnectionTest, APoolLendsANewSessionInsteadOfOneTheServerClosed) {
  // An idle session the server closed (KILL here; wait_timeout after a quiet night, a restart)
  // must not cost the next statement: the pool opens another instead of lending it.
  store_internal::MyConnectParams params = params_;
  params.database = database_;
  store_internal::MyPool pool(params, 1, {});
  long long first_id = 0;
  {
    Result<store_internal::MyPool::Lease> lease = pool.Borrow();
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    MyResult id = (*lease)->Execute("SELECT CONNECTION_ID()");
    ASSERT_TRUE(id.ok()) << id.error();
    first_id = id.GetInt(0, 0);
  }
  std::unique_ptr<MyConnection> other = Connect();
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(other->Execute("KILL ?", MyParams().Add(first_id)).ok());
  ASSERT_NO_FATAL_FAILURE(AwaitSessionGone(*other, first_id));

  Result<store_internal::MyPool::Lease> lease = pool.Borrow();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  MyResult id = (*lease)->Execute("SELECT CONNECTION_ID()");
  ASSERT_TRUE(id.ok()) << "the pool lent the killed session: " << id.error();
  EXPECT_NE(id.GetInt(0, 0), first_id);
}

TEST_F(MySqlConnectionTest, AWrongPasswordIsUnavailableWithoutShowingIt) {
  store_internal::MyConnectParams params = params_;
  params.password = "not-the-Secret-7";
  Result<std::unique_ptr<MyConnection>> refused = MyConnection::Open(params);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(refused.status().message().find("not-the-Secret-7"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("127.0.0.1:" + std::to_string(params.port)),
            std::string::npos)
      << refused.status().message();
}

TEST_F(MySqlConnectionTest, TheSessionsSocketIsCloseOnExec) {
  const auto open_descriptors = [] {
    std::set<int> open;
    for (int fd = 3; fd < 1024; ++fd) {
      if (fcntl(fd, F_GETFD) >= 0) open.insert(fd);
    }
    return open;
  };
  const std::set<int> before = open_descriptors();
  std::unique_ptr<MyConnection> db = Connect();
  ASSERT_NE(db, nullptr);
  int opened = 0;
  for (int fd : open_descriptors()) {
    if (before.count(fd) > 0) continue;
    ++opened;
    EXPECT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC) << "descriptor " << fd << " is inherited";
  }
  EXPECT_GT(opened, 0);
}

TEST_F(MySqlConnectionTest, TheSessionTimeZoneIsTheOneAsked) {
  params_.time_zone = "+05:30";
  std::unique_ptr<MyConnection> db = Connect();
  ASSERT_NE(db, nullptr);
  MyResult zone = db->Execute("SELECT @@session.time_zone");
  ASSERT_TRUE(zone.ok());
  EXPECT_EQ(zone.Get(0, 0), "+05:30");
}

}  // namespace
}  // namespace stagehand
