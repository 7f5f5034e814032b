// Helpers for the SQLite integration tests: temporary directories, raw sqlite3 access that
// bypasses the store (as a Backstage process would), and forked child processes driven over pipes.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace stagehand::sqlite_test {

// A fresh directory under the system temp directory, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A plain sqlite3 connection. Failures are reported as test failures. Not thread-safe.
class RawDb {
 public:
  explicit RawDb(const std::string& path);
  ~RawDb();
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  // Runs `sql` (one or more statements, no parameters).
  void Exec(const std::string& sql);
  // Runs one statement with text parameters (nullopt binds NULL) and returns its rows; NULL
  // columns read as "NULL".
  std::vector<std::vector<std::string>> Query(
      const std::string& sql, const std::vector<std::optional<std::string>>& params = {});
  // Returns the rows of Query joined as "a|b|c" lines.
  std::string QueryLines(const std::string& sql);

 private:
  sqlite3* db_ = nullptr;
};

// Returns Backstage's part of the database's schema as a stable text dump: the sqlite_master rows
// of every table but stagehand's own (stagehand_*), PRAGMA table_info of the three Backstage
// tables and PRAGMA index_list of the tasks table.
std::string SchemaDump(RawDb& db);

// Returns stagehand's own part of the schema (stagehand_migrations, stagehand_task_runs) as a
// stable text dump: their sqlite_master rows, PRAGMA table_info and PRAGMA index_list.
std::string StagehandSchemaDump(RawDb& db);

// A forked child process running a body that talks to the parent over two pipes, one byte per
// message. Call Start before the parent opens any database. Not thread-safe.
class Child {
 public:
  // The child's body gets its pipe ends and returns the exit code; it must not use gtest macros.
  using Body = std::function<int(int from_parent, int to_parent)>;

  explicit Child(const Body& body);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Sends one byte to the child. Returns false if the child is gone.
  bool Send(char message);
  // Receives one byte from the child; nullopt if the child closed its pipe.
  std::optional<char> Receive();
  // Closes the pipes and waits for the child. Returns its exit code, or -1 if it did not exit
  // normally. Idempotent.
  int Wait();

 private:
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  std::optional<int> exit_code_;
};

// Blocking one-byte pipe I/O for child bodies, retrying on EINTR.
bool WriteByte(int fd, char byte);
std::optional<char> ReadByte(int fd);

}  // namespace stagehand::sqlite_test
