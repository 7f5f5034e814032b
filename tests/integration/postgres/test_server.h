// Test helpers for the PostgreSQL server that scripts/test-postgres starts: its URL, a global
// environment that skips (or, under CI, fails) when there is none, throwaway databases, and a raw
// libpq connection for writing and reading rows behind the store's back.
#pragma once

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace stagehand::pg_test {

// Returns STAGEHAND_TEST_POSTGRES_URL, or nullopt when it is unset or empty.
inline std::optional<std::string> ServerUrl() {
  const char* url = std::getenv("STAGEHAND_TEST_POSTGRES_URL");
  if (url == nullptr || *url == '\0') return std::nullopt;
  return std::string(url);
}

// Returns the URL of the test PgBouncer in pool mode `mode` ("transaction" or "session":
// STAGEHAND_TEST_PGBOUNCER_TRANSACTION_URL or _SESSION_URL), or nullopt when none was started.
inline std::optional<std::string> PoolerUrl(const std::string& mode) {
  const char* url = std::getenv(mode == "transaction" ? "STAGEHAND_TEST_PGBOUNCER_TRANSACTION_URL"
                                                      : "STAGEHAND_TEST_PGBOUNCER_SESSION_URL");
  if (url == nullptr || *url == '\0') return std::nullopt;
  return std::string(url);
}

inline constexpr char kNoServerMessage[] =
    "STAGEHAND_TEST_POSTGRES_URL is not set; run the tests through scripts/test-postgres to "
    "include the PostgreSQL tests";

// Skips every test of the binary when there is no test server, or fails them when the CI
// environment variable is set (CI must never silently skip the PostgreSQL tests). For binaries
// whose fixtures cannot skip by themselves (the contract suite).
class ServerEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (ServerUrl()) return;
    if (std::getenv("CI") != nullptr) {
      GTEST_FAIL() << kNoServerMessage << " (CI is set, so this is a failure, not a skip)";
    }
    // gtest prints no "[  SKIPPED ]" line for a skip in a global environment; ctest looks for
    // that marker to report a test as skipped rather than passed.
    GTEST_SKIP() << "[  SKIPPED ] " << kNoServerMessage;
  }
};

// A test that needs the test server: skipped without it, failed without it under CI.
class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::optional<std::string> url = ServerUrl()) {
      url_ = *url;
      return;
    }
    if (std::getenv("CI") != nullptr) {
      GTEST_FAIL() << kNoServerMessage << " (CI is set, so this is a failure, not a skip)";
    }
    GTEST_SKIP() << kNoServerMessage;
  }

  const std::string& url() const { return url_; }

 private:
  std::string url_;
};

// Returns a database name no other test (or test process) uses.
inline std::string UniqueDatabaseName(const std::string& prefix) {
  static std::atomic<int> counter{0};
  std::random_device random;
  return prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
         std::to_string(random() % 1'000'000);
}

struct ResultDeleter {
  void operator()(PGresult* result) const { PQclear(result); }
};
using RawResult = std::unique_ptr<PGresult, ResultDeleter>;

// A plain libpq session, independent of the store's own code. Not thread-safe.
class RawConnection {
 public:
  // Connects to `url`, or to `database` on that server when it is not empty.
  explicit RawConnection(const std::string& url, const std::string& database = "") {
    const char* keywords[] = {"dbname", database.empty() ? nullptr : "dbname", nullptr};
    const char* values[] = {url.c_str(), database.c_str(), nullptr};
    conn_ = PQconnectdbParams(keywords, values, 1);
    if (PQstatus(conn_) != CONNECTION_OK) {
      ADD_FAILURE() << "cannot connect to the test server: " << PQerrorMessage(conn_);
      return;
    }
    PQsetNoticeProcessor(
        conn_, [](void*, const char*) {}, nullptr);
    Exec("SET TimeZone = 'UTC'");
  }
  ~RawConnection() { PQfinish(conn_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool ok() const { return PQstatus(conn_) == CONNECTION_OK; }
  PGconn* raw() { return conn_; }

  // Runs `sql` with text parameters (nullopt binds NULL); adds a test failure if it fails.
  RawResult Exec(const std::string& sql,
                 const std::vector<std::optional<std::string>>& params = {}) {
    RawResult result = TryExec(sql, params);
    const ExecStatusType status = PQresultStatus(result.get());
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      ADD_FAILURE() << "SQL failed: " << PQresultErrorMessage(result.get()) << "in: " << sql;
    }
    return result;
  }

  // Runs `sql` and returns the result whatever its status.
  RawResult TryExec(const std::string& sql,
                    const std::vector<std::optional<std::string>>& params = {}) {
    if (params.empty())
      return RawResult(PQexec(conn_, sql.c_str()));  // may hold several statements
    std::vector<const char*> values;
    for (const auto& param : params) values.push_back(param ? param->c_str() : nullptr);
    return RawResult(PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr,
                                  values.data(), nullptr, nullptr, 0));
  }

  // Runs a query and returns column 0 of row 0 ("" when absent or NULL).
  std::string Scalar(const std::string& sql,
                     const std::vector<std::optional<std::string>>& params = {}) {
    RawResult result = Exec(sql, params);
    if (PQntuples(result.get()) < 1 || PQgetisnull(result.get(), 0, 0)) return "";
    return PQgetvalue(result.get(), 0, 0);
  }

 private:
  PGconn* conn_ = nullptr;
};

// Returns `name` quoted as an SQL identifier.
inline std::string QuoteIdentifier(RawConnection& connection, const std::string& name) {
  char* quoted = PQescapeIdentifier(connection.raw(), name.c_str(), name.size());
  std::string result = quoted == nullptr ? name : quoted;
  PQfreemem(quoted);
  return result;
}

// Drops `database` on the test server, disconnecting its sessions.
inline void DropDatabase(const std::string& url, const std::string& database) {
  RawConnection admin(url);
  if (!admin.ok()) return;
  admin.Exec("DROP DATABASE IF EXISTS " + QuoteIdentifier(admin, database) + " WITH (FORCE)");
}

// Creates an empty `database` on the test server.
inline void CreateDatabase(const std::string& url, const std::string& database) {
  RawConnection admin(url);
  if (!admin.ok()) return;
  admin.Exec("CREATE DATABASE " + QuoteIdentifier(admin, database));
}

}  // namespace stagehand::pg_test
