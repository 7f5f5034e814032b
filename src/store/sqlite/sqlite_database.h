// A thin RAII layer over one sqlite3 connection: cached prepared statements, bound parameters and
// errors as Status values that name the plugin and the database file.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "stagehand/base/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace stagehand::store_internal {

class SqliteDatabase;

// A cached prepared statement borrowed for one execution. Destroying it resets the statement and
// clears its bindings, ready for the next borrower. Not thread-safe (nor is its database).
class SqliteStatement {
 public:
  SqliteStatement(SqliteDatabase& db, sqlite3_stmt* stmt) : db_(&db), stmt_(stmt) {}
  SqliteStatement(SqliteStatement&& other) noexcept
      : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)) {}
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;
  SqliteStatement& operator=(SqliteStatement&&) = delete;
  ~SqliteStatement();

  // Binds parameter `index` (1-based). Binding never fails for a valid index; a bad index is a bug.
  SqliteStatement& Bind(int index, std::string_view text);
  SqliteStatement& Bind(int index, std::int64_t value);
  SqliteStatement& BindOptional(int index, const std::optional<std::string>& text);
  SqliteStatement& BindOptionalInt(int index, std::optional<std::int64_t> value);
  // Binds `bytes` as a BLOB.
  SqliteStatement& BindBlob(int index, std::string_view bytes);
  SqliteStatement& BindNull(int index);

  // Advances to the next row. Returns true with a row, false when done.
  // Errors: the database's error for `what` (kUnavailable, kFailedPrecondition for schema errors).
  Result<bool> Step(std::string_view what);
  // Runs the statement to completion, ignoring any rows.
  Status Run(std::string_view what);

  bool IsNull(int column) const;
  std::string Text(int column) const;
  std::optional<std::string> OptionalText(int column) const;
  std::int64_t Int(int column) const;
  std::optional<std::int64_t> OptionalInt(int column) const;
  // The column's bytes (a BLOB's, or a text's).
  std::string Blob(int column) const;
  // The column's name in the result (e.g. "next_run_start_at").
  std::string_view ColumnName(int column) const;
  // Whether the column holds an integer (not text).
  bool IsInteger(int column) const;

 private:
  SqliteDatabase* db_;
  sqlite3_stmt* stmt_;
};

// One connection to a plugin database file. Not thread-safe: the owner serialises access.
class SqliteDatabase {
 public:
  // Opens (creating if needed, with its directory) the database at `path`, sets the busy timeout
  // and WAL mode, and defines the SQL function stagehand_version(next_run_start_at,
  // settings_json): a non-negative 64-bit hash of both values' text (NULL hashed as such), a row's
  // PollEntry::version. Errors: kUnavailable "plugin '<id>': cannot open SQLite database '<path>':
  // <reason>".
  static Result<std::unique_ptr<SqliteDatabase>> Open(const std::string& plugin_id,
                                                      const std::string& path,
                                                      std::chrono::milliseconds busy_timeout);
  ~SqliteDatabase();
  SqliteDatabase(const SqliteDatabase&) = delete;
  SqliteDatabase& operator=(const SqliteDatabase&) = delete;

  // Returns the cached statement for `sql`, preparing it on first use.
  // Errors: as Step, for a statement that does not compile (e.g. a missing table).
  Result<SqliteStatement> Prepare(std::string_view sql);
  // Runs `sql` (no parameters, possibly several statements) without caching it.
  Status Exec(std::string_view sql);
  // Returns the number of rows changed by the last INSERT, UPDATE or DELETE.
  int Changes() const;
  // Whether a transaction is open on this connection.
  bool InTransaction() const;

  // Returns the Status for SQLite result code `rc` while doing `what`, naming plugin and file.
  Status Error(int rc, std::string_view what) const;
  // Returns a Status with `code` whose message names plugin and file and then says `message`.
  Status Error(StatusCode code, std::string_view message) const;

  const std::string& path() const { return path_; }

 private:
  SqliteDatabase(sqlite3* db, std::string plugin_id, std::string path)
      : db_(db), plugin_id_(std::move(plugin_id)), path_(std::move(path)) {}

  sqlite3* db_;
  std::string plugin_id_;
  std::string path_;
  std::unordered_map<std::string, sqlite3_stmt*> statements_;
};

// Returns `values` as a JSON array of strings, the form statements read a list in with json_each().
// Bytes other than quotes, backslashes and control characters pass through unchanged; SQLite's
// JSON reader returns them as they were.
std::string JsonArray(std::span<const std::string> values);

// Runs statements as one write transaction (BEGIN IMMEDIATE, which waits for the write lock up to
// the busy timeout); inside another one, as a savepoint of it, so that the outer transaction
// commits or rolls back both. Rolls back on destruction unless committed. Not thread-safe.
class SqliteTransaction {
 public:
  explicit SqliteTransaction(SqliteDatabase& db) : db_(db) {}
  SqliteTransaction(const SqliteTransaction&) = delete;
  SqliteTransaction& operator=(const SqliteTransaction&) = delete;
  ~SqliteTransaction();

  // Errors: kUnavailable when the write lock is not obtained within the busy timeout.
  Status Begin();
  Status Commit();

 private:
  SqliteDatabase& db_;
  bool open_ = false;
  bool nested_ = false;
};

}  // namespace stagehand::store_internal
