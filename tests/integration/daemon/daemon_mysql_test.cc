// Two `stagehand serve` processes on the test MariaDB form one fleet: a global task triggered over
// REST on one of them runs exactly once, on either, and both report the same state. Fails (does not
// skip) under CI without STAGEHAND_TEST_MARIADB_PORT.

#include <gtest/gtest.h>

#include <string>

#include "integration/daemon/daemon_process.h"
#include "integration/mysql/test_server.h"

namespace stagehand::daemon_test {
namespace {

class DaemonMySqlTest : public mysql_test::ServerTest {
 protected:
  void TearDown() override {
    daemons_.clear();
    if (!prefix_.empty()) {
      if (std::unique_ptr<store_internal::MyConnection> admin = Connect("")) {
        admin->Execute("DROP DATABASE IF EXISTS `" + prefix_ + "jobs`");
      }
    }
    mysql_test::ServerTest::TearDown();
  }

  std::string Config() {
    prefix_ = mysql_test::UniqueDatabaseName() + "_";
    return "backend:\n"
           "  listen: { host: 127.0.0.1 }\n"
           "  database:\n"
           "    client: mysql2\n"
           "    connection: '" +
           Url("ignored") +
           "'\n"
           "    prefix: '" +
           prefix_ +
           "'\n"
           "  auth: { dangerouslyDisableDefaultAuthPolicy: true }\n"
           "stagehand:\n"
           "  scheduler: { pollInterval: 200ms }\n"
           "  plugins:\n"
           "    jobs:\n"
           "      tasks:\n" +
           OnceTaskYaml(dir_ / "runs");
  }

  TempDir dir_;
  std::string prefix_;
  std::vector<std::unique_ptr<DaemonProcess>> daemons_;
};

TEST_F(DaemonMySqlTest, TaskTriggeredOnOneDaemonRunsExactlyOnceOnEither) {
  WriteFile(dir_ / "app.yaml", Config());
  ExpectATriggerRunsOnceOnEither(dir_.path(), dir_ / "app.yaml", daemons_);
}

}  // namespace
}  // namespace stagehand::daemon_test
