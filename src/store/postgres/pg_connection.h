// A thin RAII layer over libpq for the PostgreSQL task store: one connection with lazily prepared
// statements, query results, bound parameters and the classification of errors into "the
// connection is gone" and "the statement failed".
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stagehand/base/status.h"
#include "stagehand/time/clock.h"

namespace stagehand::store_internal {

// A named statement, prepared once per connection the first time it is executed.
struct PgStatement {
  int index;         // dense, unique among all statements (slot in each connection's cache)
  const char* name;  // the server-side prepared statement name
  const char* sql;   // every parameter carries an explicit cast
  // Planned at every execution rather than prepared: for statements on a table that grows from
  // empty by orders of magnitude (the run history), where a prepared statement's cached generic
  // plan, made while the table was small, keeps scanning it whole.
  bool replan = false;
};

// The number of PgStatement slots a connection keeps.
inline constexpr int kMaxStatements = 42;

// Bound parameters in text format; nullopt binds SQL NULL. Plain value type.
class PgParams {
 public:
  PgParams& Add(std::string value);
  PgParams& Add(std::string_view value) { return Add(std::string(value)); }
  PgParams& Add(const char* value) { return Add(std::string(value)); }
  PgParams& Add(double value);
  PgParams& Add(long long value);
  PgParams& Add(bool value);
  PgParams& Add(const std::optional<std::string>& value);
  PgParams& AddNull();

  int size() const { return static_cast<int>(values_.size()); }
  // Returns the libpq parameter array; valid until this object changes.
  std::vector<const char*> Pointers() const;

 private:
  std::vector<std::optional<std::string>> values_;
};

// The outcome of one statement: its rows, or the error that stopped it. Move-only.
class PgResult {
 public:
  PgResult() = default;
  PgResult(PGresult* result, std::string error, bool connection_lost);
  PgResult(PgResult&&) noexcept = default;
  PgResult& operator=(PgResult&&) noexcept = default;

  bool ok() const;
  // The SQLSTATE of a failed statement ("" when libpq produced no result).
  std::string SqlState() const;
  // A one-line description of the failure.
  const std::string& error() const { return error_; }
  // Whether the failure means the connection can no longer be used.
  bool connection_lost() const { return connection_lost_; }

  int rows() const;
  bool IsNull(int row, int column) const;
  std::string_view Get(int row, int column) const;
  std::optional<std::string> GetOptional(int row, int column) const;
  bool GetBool(int row, int column) const;
  long long GetInt(int row, int column) const;
  // Rows changed by an INSERT/UPDATE/DELETE.
  long long affected() const;

 private:
  struct Clear {
    void operator()(PGresult* result) const { PQclear(result); }
  };
  std::unique_ptr<PGresult, Clear> result_;
  std::string error_;
  bool connection_lost_ = false;
};

// The PostgreSQL server a session reached. Plain value type.
struct PgServerIdentity {
  // Its system identifier, shared by a primary and the standbys built from it; empty when the
  // server does not tell (then no change is detected).
  std::string system_id;
  // The primary's current timeline: a promoted standby starts a new one.
  std::uint32_t timeline = 0;
  // Where the session went: the host and port libpq chose from the connection's list.
  std::string host;
  std::string port;

  // Whether `other` continues the same history of writes: same system, same timeline (a server
  // that does not tell matches any). A primary restarted in place keeps both; a failover to a
  // standby, or another cluster behind the same address, changes one.
  bool SameHistoryAs(const PgServerIdentity& other) const;
};

// How to reach one database. Plain value type.
struct PgConnectParams {
  std::string conninfo;  // libpq connection string or URL (may hold a password: never print it)
  std::string database;  // overrides the database of `conninfo` when not empty
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds statement_timeout{10000};
  // Client-side bound on each statement (sending it and waiting for its result), so that a
  // connection whose packets are dropped cannot block a caller for minutes; zero means none. Also
  // sets the TCP keepalives and tcp_user_timeout of new sessions. The server may still run a
  // statement abandoned this way until its statement_timeout.
  std::chrono::milliseconds call_timeout{0};
  std::string search_path;  // a schema name (unescaped); empty keeps the server's default
  // The session's application_name (pg_stat_activity) unless `conninfo` sets one.
  std::string application_name = "stagehand";
  // A host (and port) of `conninfo`'s list to try on its own first: the one that answered last,
  // so that after a failover sessions go to the new primary without waiting on the old one first.
  // Empty: the list's order.
  std::string preferred_host;
  std::string preferred_port;
  // Statements reach the server through a pooler in transaction mode (PgBouncer's
  // pool_mode=transaction), where consecutive statements may land on different server sessions:
  // no statement is prepared by name, and no session setting but the pooler-tracked TimeZone and
  // DateStyle is made (the server's or role's statement_timeout applies; `search_path` must be
  // empty).
  bool transaction_pooler = false;
  // Where LISTEN sessions connect when not through `conninfo` (behind a transaction pooler, the
  // database itself). Empty: `conninfo`, and no LISTEN at all behind a transaction pooler.
  std::string notify_conninfo;
};

// One open session with its session settings applied (UTC, ISO dates, statement_timeout,
// search_path). Thread-compatible: one thread at a time.
class PgConnection {
 public:
  // Connects to a server that accepts writes and applies the session settings. Returns the
  // database's now() at connect in `db_now` when given. Errors: kUnavailable with libpq's reason
  // (never the password), or when the server reached is a standby.
  static Result<std::unique_ptr<PgConnection>> Open(const PgConnectParams& params,
                                                    WallTime* db_now = nullptr);

  ~PgConnection();
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  // Executes `statement`, preparing it on this connection first if needed (unless it is
  // replanned at every execution, or the session is behind a transaction pooler). A statement
  // the server does not know by name although it was prepared (a transaction pooler the params
  // did not declare) is run unnamed, as is every later one on this connection.
  PgResult Execute(const PgStatement& statement, const PgParams& params);
  // Prepares `statement` on this connection unless it already is or is replanned at every
  // execution (one round trip when it is not). Returns nullopt once it is prepared, else the
  // failed result.
  std::optional<PgResult> Prepare(const PgStatement& statement);
  // Executes SQL text with parameters (unnamed statement).
  PgResult ExecuteText(const char* sql, const PgParams& params);
  // Executes one or more parameterless statements with the simple protocol (DDL, BEGIN).
  PgResult ExecuteScript(const char* sql);

  // Whether the session is usable as far as libpq knows; reads any pending input from the server
  // first, without blocking, so that a connection the server has closed is noticed before use.
  bool Healthy();

  // Returns `identifier` quoted for SQL (PQescapeIdentifier). Errors: kInvalidArgument.
  Result<std::string> QuoteIdentifier(std::string_view identifier);

  PGconn* raw() { return conn_; }
  // The server this session reached (read at connect).
  const PgServerIdentity& server() const { return server_; }

  // Sets the bound of later statements (PgConnectParams::call_timeout); zero means none.
  void set_call_timeout(std::chrono::milliseconds timeout) { call_timeout_ = timeout; }

  // Sets the session's search_path to `schema` (unquoted; empty: the server's default) unless it
  // is already that. Prepared statements are re-parsed by the server for the new path. Returns
  // false when the session failed to change it.
  bool UseSearchPath(const std::string& schema);
  const std::string& search_path() const { return search_path_; }

  // Whether statements run unnamed: declared behind a transaction pooler, or found to be.
  bool unnamed_statements() const { return unnamed_statements_; }

  // Whether the store has warmed this session up (TaskStore::WarmUp), so it is done once.
  bool warmed() const { return warmed_; }
  void MarkWarmed() { warmed_ = true; }

 private:
  explicit PgConnection(PGconn* conn) : conn_(conn) {}
  PgResult Wrap(PGresult* result);
  // Waits for the result of the query just sent (PQsend*), within call_timeout_ when it is set.
  // A statement past the bound is abandoned with a connection-lost result; the session, with its
  // query still in flight, is then no longer idle, so the pool closes it rather than reuse it.
  PgResult AwaitResult();

  PGconn* conn_;
  std::chrono::milliseconds call_timeout_{0};
  bool prepared_[kMaxStatements] = {};
  bool unnamed_statements_ = false;
  bool warmed_ = false;
  std::string search_path_;  // the schema set at connect or by UseSearchPath
  PgServerIdentity server_;
};

// Returns the database `params` names: `database`, else the one in `conninfo`, else the user name
// libpq would use by default.
std::string DatabaseNameOf(const PgConnectParams& params);

}  // namespace stagehand::store_internal
