// Test helpers for the MariaDB server that scripts/lib/mariadb.sh starts: a fixture that skips
// (or, under CI, fails) when there is none, and throwaway databases on it.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "store/mysql/my_connection.h"

namespace stagehand::mysql_test {

// The test server's port (STAGEHAND_TEST_MARIADB_PORT), or nullopt when it is unset or empty.
inline std::optional<int> ServerPort() {
  const char* port = std::getenv("STAGEHAND_TEST_MARIADB_PORT");
  if (port == nullptr || *port == '\0') return std::nullopt;
  return std::atoi(port);
}

// A database name no other test of any process uses.
inline std::string UniqueDatabaseName() {
  static std::atomic<int> counter{0};
  std::random_device random;
  return "stagehand_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
         std::to_string(random() % 1'000'000);
}

inline constexpr char kNoServerMessage[] =
    "STAGEHAND_TEST_MARIADB_PORT is not set; run the tests through scripts/test to include the "
    "MySQL tests";

// A test that needs the test server: skipped without it, failed without it under CI. Each test
// gets a database of its own, dropped after it.
class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::optional<int> port = ServerPort();
    if (!port) {
      if (std::getenv("CI") != nullptr) {
        GTEST_FAIL() << kNoServerMessage << " (CI is set, so this is a failure, not a skip)";
      }
      GTEST_SKIP() << kNoServerMessage;
    }
    params_.port = *port;
    params_.user = "stagehand";
    params_.password = "stagehand";
    database_ = UniqueDatabaseName();
    std::unique_ptr<store_internal::MyConnection> admin = Connect("");
    ASSERT_NE(admin, nullptr);
    ASSERT_TRUE(admin->Execute("CREATE DATABASE `" + database_ + "`").ok());
  }

  void TearDown() override {
    if (database_.empty()) return;
    if (std::unique_ptr<store_internal::MyConnection> admin = Connect("")) {
      admin->Execute("DROP DATABASE IF EXISTS `" + database_ + "`");
    }
  }

  // Opens a session on `database` (none when empty; the test's database by default).
  std::unique_ptr<store_internal::MyConnection> Connect(
      const std::optional<std::string>& database = std::nullopt) {
    store_internal::MyConnectParams params = params_;
    params.database = database.value_or(database_);
    Result<std::unique_ptr<store_internal::MyConnection>> connection =
        store_internal::MyConnection::Open(params);
    EXPECT_TRUE(connection.ok()) << connection.status().ToString();
    return connection.ok() ? std::move(*connection) : nullptr;
  }

  // The test server's URL with `database`.
  std::string Url(const std::string& database) const {
    return "mysql://stagehand:stagehand@127.0.0.1:" + std::to_string(params_.port) + "/" + database;
  }

  store_internal::MyConnectParams params_;
  std::string database_;
};

}  // namespace stagehand::mysql_test
