// A thin RAII layer over MariaDB Connector/C (libmariadb) for the MySQL task store: one session
// with its settings applied, SQL text whose `?` parameters are bound on the client as escaped
// literals (as knex's mysql2 client sends them), text results, and the classification of errors
// into "the connection is gone" and "the statement failed". Works with MySQL and MariaDB servers.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "stagehand/base/status.h"

struct st_mysql;

namespace stagehand::store_internal {

// Values for the `?` placeholders of one statement, in order; nullopt (and a double that is not
// finite) binds NULL. Plain value type.
class MyParams {
 public:
  MyParams& Add(std::string value);
  MyParams& Add(std::string_view value) { return Add(std::string(value)); }
  MyParams& Add(const char* value) { return Add(std::string(value)); }
  MyParams& Add(double value);
  template <typename Integer>
  requires std::integral<Integer> MyParams& Add(Integer value) {
    values_.emplace_back(static_cast<std::int64_t>(value));
    return *this;
  }
  MyParams& Add(const std::optional<std::string>& value);
  MyParams& AddNull();

  int size() const { return static_cast<int>(values_.size()); }

 private:
  friend class MyConnection;
  using Value = std::variant<std::monostate, std::string, double, std::int64_t>;
  std::vector<Value> values_;
};

// The outcome of one statement: its rows (as text, NULL as nullopt), or the error that stopped
// it. A value type.
class MyResult {
 public:
  bool ok() const { return error_code_ == 0; }
  // The server's or the client library's error number (0 when the statement succeeded).
  unsigned error_code() const { return error_code_; }
  // The SQLSTATE of a failed statement.
  const std::string& sql_state() const { return sql_state_; }
  // A one-line description of the failure (never a password).
  const std::string& error() const { return error_; }
  // Whether the failure means the session can no longer be used.
  bool connection_lost() const { return connection_lost_; }

  int rows() const { return static_cast<int>(rows_.size()); }
  int columns() const { return columns_; }
  bool IsNull(int row, int column) const { return !Cell(row, column).has_value(); }
  std::string_view Get(int row, int column) const;
  const std::optional<std::string>& GetOptional(int row, int column) const;
  std::int64_t GetInt(int row, int column) const;
  // Rows matched by an UPDATE (the session reports found rows, as mysql2 does), inserted or
  // deleted.
  long long affected() const { return affected_; }

 private:
  friend class MyConnection;
  const std::optional<std::string>& Cell(int row, int column) const {
    return rows_[static_cast<std::size_t>(row)][static_cast<std::size_t>(column)];
  }

  unsigned error_code_ = 0;
  std::string sql_state_;
  std::string error_;
  bool connection_lost_ = false;
  int columns_ = 0;
  long long affected_ = 0;
  std::vector<std::vector<std::optional<std::string>>> rows_;
};

// How to reach one server and database. Plain value type.
struct MyConnectParams {
  std::string host = "127.0.0.1";  // ignored when `socket_path` is set
  int port = 3306;
  std::string socket_path;  // a Unix socket instead of TCP
  std::string user;
  std::string password;  // never printed
  std::string database;  // empty: none selected
  std::chrono::milliseconds connect_timeout{5000};
  // Bound on waiting for one statement's answer (the library counts whole seconds, at least 1);
  // zero means none.
  std::chrono::milliseconds call_timeout{0};
  // The session's time_zone (e.g. "+00:00"); empty keeps the server's default, as knex does.
  std::string time_zone;
  bool tls_required = false;
};

// One open session. Thread-compatible: one thread at a time.
class MyConnection {
 public:
  // Connects (utf8mb4, found rows) and applies the session settings. Errors: kUnavailable with
  // the library's reason (never the password).
  static Result<std::unique_ptr<MyConnection>> Open(const MyConnectParams& params);

  ~MyConnection();
  MyConnection(const MyConnection&) = delete;
  MyConnection& operator=(const MyConnection&) = delete;

  // Executes `sql` with each `?` outside quotes, identifiers and comments replaced by the next
  // parameter as a literal. A count of placeholders that differs from the parameters' is a
  // failed result, not sent.
  MyResult Execute(std::string_view sql, const MyParams& params = {});

  // Whether an idle session is still open: false once a statement lost the connection or the
  // server has closed the session (KILL, wait_timeout, a restart). No round trip.
  bool Healthy();

  // Whether a statement of this session failed by losing the connection: the session is of no
  // more use (MyPool closes it when it comes back).
  bool lost() const { return lost_; }

  // Returns `identifier` quoted with backticks for SQL. Errors: kInvalidArgument for an empty
  // identifier or one holding NUL.
  static Result<std::string> QuoteIdentifier(std::string_view identifier);

  // Returns `sql` with its parameters bound as literals (what Execute sends).
  Result<std::string> Bind(std::string_view sql, const MyParams& params);

 private:
  explicit MyConnection(st_mysql* mysql) : mysql_(mysql) {}
  MyResult Failure();
  std::string Literal(const MyParams::Value& value);

  st_mysql* mysql_;
  bool lost_ = false;
};

}  // namespace stagehand::store_internal
