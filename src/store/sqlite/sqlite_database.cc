#include "store/sqlite/sqlite_database.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <system_error>
#include <thread>
#include <vector>

#include "store/sqlite/sqlite_sql.h"

namespace stagehand::store_internal {

namespace {

StatusCode CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_ERROR:  // e.g. "no such table": the schema is not what we expect
    case SQLITE_SCHEMA:
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
      return StatusCode::kFailedPrecondition;
    case SQLITE_MISUSE:
    case SQLITE_RANGE:
      return StatusCode::kInternal;
    default:  // BUSY, LOCKED, IOERR, CANTOPEN, FULL, READONLY, CORRUPT, NOTADB, NOMEM, ...
      return StatusCode::kUnavailable;
  }
}

bool IsFilePath(const std::string& path) {
  return !path.empty() && path != ":memory:" && path.rfind("file:", 0) != 0;
}

// Creates `directory` and its missing parents, each 0700 whatever the umask: the task database
// may hold secrets in task settings. Directories that already exist keep their mode.
std::error_code CreatePrivateDirectories(const std::filesystem::path& directory) {
  std::vector<std::filesystem::path> missing;
  std::error_code ec;
  for (std::filesystem::path p = directory; !p.empty() && !std::filesystem::exists(p, ec);
       p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0700) != 0) {
      if (errno == EEXIST) continue;  // created by another process meanwhile: not ours
      return {errno, std::generic_category()};
    }
    if (::chmod(it->c_str(), 0700) != 0) return {errno, std::generic_category()};
  }
  return {};
}

// Creates the database file `path` 0600 whatever the umask when it does not exist. SQLite then
// gives its -wal and -shm files the database file's mode. An existing file keeps its mode; any
// other failure is left for sqlite3_open_v2 to report.
void CreatePrivateFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;
  ::fchmod(fd, 0600);
  ::close(fd);
}

}  // namespace

SqliteStatement::~SqliteStatement() {
  if (stmt_ == nullptr) return;
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

SqliteStatement& SqliteStatement::Bind(int index, std::string_view text) {
  const int rc =
      sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  STAGEHAND_CHECK(rc == SQLITE_OK);
  return *this;
}

SqliteStatement& SqliteStatement::Bind(int index, std::int64_t value) {
  const int rc = sqlite3_bind_int64(stmt_, index, value);
  STAGEHAND_CHECK(rc == SQLITE_OK);
  return *this;
}

SqliteStatement& SqliteStatement::BindOptional(int index, const std::optional<std::string>& text) {
  return text ? Bind(index, std::string_view(*text)) : BindNull(index);
}

SqliteStatement& SqliteStatement::BindOptionalInt(int index, std::optional<std::int64_t> value) {
  return value ? Bind(index, *value) : BindNull(index);
}

SqliteStatement& SqliteStatement::BindBlob(int index, std::string_view bytes) {
  const int rc = sqlite3_bind_blob64(stmt_, index, bytes.data(), bytes.size(), SQLITE_TRANSIENT);
  STAGEHAND_CHECK(rc == SQLITE_OK);
  return *this;
}

SqliteStatement& SqliteStatement::BindNull(int index) {
  const int rc = sqlite3_bind_null(stmt_, index);
  STAGEHAND_CHECK(rc == SQLITE_OK);
  return *this;
}

Result<bool> SqliteStatement::Step(std::string_view what) {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Error(rc, what);
}

Status SqliteStatement::Run(std::string_view what) {
  while (true) {
    STAGEHAND_ASSIGN_OR_RETURN(bool row, Step(what));
    if (!row) return Status::Ok();
  }
}

bool SqliteStatement::IsNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

std::string SqliteStatement::Text(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  if (text == nullptr) return {};
  const int size = sqlite3_column_bytes(stmt_, column);
  return std::string(reinterpret_cast<const char*>(text), static_cast<std::size_t>(size));
}

std::optional<std::string> SqliteStatement::OptionalText(int column) const {
  if (IsNull(column)) return std::nullopt;
  return Text(column);
}

std::int64_t SqliteStatement::Int(int column) const { return sqlite3_column_int64(stmt_, column); }

std::optional<std::int64_t> SqliteStatement::OptionalInt(int column) const {
  if (IsNull(column)) return std::nullopt;
  return Int(column);
}

std::string SqliteStatement::Blob(int column) const {
  const void* bytes = sqlite3_column_blob(stmt_, column);
  if (bytes == nullptr) return {};
  const int size = sqlite3_column_bytes(stmt_, column);
  return std::string(static_cast<const char*>(bytes), static_cast<std::size_t>(size));
}

std::string_view SqliteStatement::ColumnName(int column) const {
  const char* name = sqlite3_column_name(stmt_, column);
  return name != nullptr ? name : "";
}

bool SqliteStatement::IsInteger(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_INTEGER;
}

namespace {

// stagehand_version(next_run_start_at, settings_json): FNV-1a of both values' text, so that values
// of any storage format compare equal exactly when their text does. Each value is hashed as a
// NULL flag, its length and its bytes, so a NULL next start has versions of its own and no two
// pairs run together into the same input.
void VersionFunction(sqlite3_context* context, int argc, sqlite3_value** argv) {
  std::uint64_t hash = 14695981039346656037ULL;
  const auto mix = [&hash](std::uint64_t byte) {
    hash ^= byte;
    hash *= 1099511628211ULL;
  };
  for (int arg = 0; arg < argc; ++arg) {
    sqlite3_value* value = argv[arg];
    if (sqlite3_value_type(value) == SQLITE_NULL) {
      mix(0);
      continue;
    }
    mix(1);
    const auto* text = sqlite3_value_text(value);
    const int size = sqlite3_value_bytes(value);
    for (int shift = 0; shift < 32; shift += 8) {
      mix((static_cast<std::uint64_t>(size) >> shift) & 0xffU);
    }
    for (int i = 0; i < size; ++i) mix(text[i]);
  }
  hash &= 0x7fffffffffffffffULL;
  sqlite3_result_int64(context, static_cast<sqlite3_int64>(hash));
}

}  // namespace

Result<std::unique_ptr<SqliteDatabase>> SqliteDatabase::Open(
    const std::string& plugin_id, const std::string& path, std::chrono::milliseconds busy_timeout) {
  const auto fail = [&](std::string_view reason) {
    return UnavailableError(
        fmt::format("plugin '{}': cannot open SQLite database '{}': {}", plugin_id, path, reason));
  };
  if (IsFilePath(path)) {
    const std::filesystem::path directory = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!directory.empty() && !std::filesystem::is_directory(directory, ec)) {
      ec = CreatePrivateDirectories(directory);
      if (ec) {
        return fail(
            fmt::format("cannot create directory '{}': {}", directory.string(), ec.message()));
      }
    }
  }
  if (IsFilePath(path)) CreatePrivateFile(path);
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &raw,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, nullptr);
  if (rc != SQLITE_OK) {
    const std::string reason = raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc);
    sqlite3_close(raw);
    return fail(reason);
  }
  std::unique_ptr<SqliteDatabase> db(new SqliteDatabase(raw, plugin_id, path));
  sqlite3_busy_timeout(raw, static_cast<int>(busy_timeout.count()));
  if (sqlite3_create_function(raw, "stagehand_version", 2,
                              SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS, nullptr,
                              &VersionFunction, nullptr, nullptr) != SQLITE_OK) {
    return fail(sqlite3_errmsg(raw));
  }
  // Switching to WAL reads the file, so a missing directory, a file that is not a database or an
  // unwritable location is reported here rather than at the first statement.
  // Switching a fresh file to WAL takes an exclusive lock for which SQLite does not always call the
  // busy handler, so processes opening one new file at once retry it for the busy timeout.
  if (IsFilePath(path)) {
    const auto deadline = std::chrono::steady_clock::now() + busy_timeout;
    while (!db->Exec(sqlite_sql::kConnectionSetup).ok()) {
      const int code = sqlite3_errcode(raw);
      if ((code != SQLITE_BUSY && code != SQLITE_LOCKED) ||
          std::chrono::steady_clock::now() >= deadline) {
        return fail(sqlite3_errmsg(raw));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (sqlite3_db_readonly(raw, "main") == 1) return fail("the database is read-only");
  return db;
}

SqliteDatabase::~SqliteDatabase() {
  for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
  sqlite3_close(db_);
}

Result<SqliteStatement> SqliteDatabase::Prepare(std::string_view sql) {
  auto it = statements_.find(std::string(sql));
  if (it == statements_.end()) {
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                      SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return Error(rc, "preparing a statement");
    it = statements_.emplace(std::string(sql), stmt).first;
  }
  return SqliteStatement(*this, it->second);
}

Status SqliteDatabase::Exec(std::string_view sql) {
  const int rc = sqlite3_exec(db_, std::string(sql).c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(rc, sql);
  return Status::Ok();
}

bool SqliteDatabase::InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }

int SqliteDatabase::Changes() const { return sqlite3_changes(db_); }

Status SqliteDatabase::Error(int rc, std::string_view what) const {
  return Error(CodeFor(rc), fmt::format("{}: {}", what, sqlite3_errmsg(db_)));
}

Status SqliteDatabase::Error(StatusCode code, std::string_view message) const {
  return Status(code,
                fmt::format("plugin '{}': SQLite database '{}': {}", plugin_id_, path_, message));
}

std::string JsonArray(std::span<const std::string> values) {
  std::string json = "[";
  for (const std::string& value : values) {
    if (json.size() > 1) json += ',';
    json += '"';
    for (const char c : value) {
      if (c == '"' || c == '\\') {
        json += '\\';
        json += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        json += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      } else {
        json += c;
      }
    }
    json += '"';
  }
  json += ']';
  return json;
}

SqliteTransaction::~SqliteTransaction() {
  if (!open_) return;
  (void)db_.Exec(nested_ ? sqlite_sql::kRollbackSavepoint : sqlite_sql::kRollback);
}

Status SqliteTransaction::Begin() {
  nested_ = db_.InTransaction();
  STAGEHAND_RETURN_IF_ERROR(db_.Exec(nested_ ? sqlite_sql::kSavepoint : sqlite_sql::kBegin));
  open_ = true;
  return Status::Ok();
}

Status SqliteTransaction::Commit() {
  STAGEHAND_RETURN_IF_ERROR(
      db_.Exec(nested_ ? sqlite_sql::kReleaseSavepoint : sqlite_sql::kCommit));
  open_ = false;
  return Status::Ok();
}

}  // namespace stagehand::store_internal
