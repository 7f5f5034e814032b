#include "sqlite_test_util.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace stagehand::sqlite_test {

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "stagehand-sqlite-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

RawDb::RawDb(const std::string& path) {
  EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK) << path;
  sqlite3_busy_timeout(db_, 5000);
}

RawDb::~RawDb() { sqlite3_close(db_); }

void RawDb::Exec(const std::string& sql) {
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
      << sql << ": " << (error != nullptr ? error : "");
  sqlite3_free(error);
}

std::vector<std::vector<std::string>> RawDb::Query(
    const std::string& sql, const std::vector<std::optional<std::string>>& params) {
  std::vector<std::vector<std::string>> rows;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db_);
    return rows;
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const int index = static_cast<int>(i) + 1;
    if (params[i]) {
      sqlite3_bind_text(stmt, index, params[i]->c_str(), -1, SQLITE_TRANSIENT);
    } else {
      sqlite3_bind_null(stmt, index);
    }
  }
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    std::vector<std::string> row;
    for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
      const unsigned char* text = sqlite3_column_text(stmt, c);
      row.emplace_back(text == nullptr ? "NULL" : reinterpret_cast<const char*>(text));
    }
    rows.push_back(std::move(row));
  }
  EXPECT_EQ(rc, SQLITE_DONE) << sql << ": " << sqlite3_errmsg(db_);
  sqlite3_finalize(stmt);
  return rows;
}

std::string RawDb::QueryLines(const std::string& sql) {
  std::string text;
  for (const std::vector<std::string>& row : Query(sql)) {
    for (std::size_t c = 0; c < row.size(); ++c) text += (c == 0 ? "" : "|") + row[c];
    text += '\n';
  }
  return text;
}

std::string SchemaDump(RawDb& db) {
  std::string dump = "# sqlite_master: type|name|tbl_name|sql\n";
  dump += db.QueryLines(
      "SELECT type, name, tbl_name, sql FROM sqlite_master "
      "WHERE tbl_name NOT LIKE 'stagehand\\_%' ESCAPE '\\' ORDER BY type, name");
  for (const char* table :
       {"backstage_backend_tasks__knex_migrations", "backstage_backend_tasks__knex_migrations_lock",
        "backstage_backend_tasks__tasks"}) {
    dump += std::string("# table_info ") + table + ": cid|name|type|notnull|dflt_value|pk\n";
    dump += db.QueryLines(std::string("PRAGMA table_info(`") + table + "`)");
  }
  dump += "# index_list backstage_backend_tasks__tasks: seq|name|unique|origin|partial\n";
  dump += db.QueryLines("PRAGMA index_list(`backstage_backend_tasks__tasks`)");
  return dump;
}

std::string StagehandSchemaDump(RawDb& db) {
  std::string dump = "# sqlite_master: type|name|tbl_name|sql\n";
  dump += db.QueryLines(
      "SELECT type, name, tbl_name, sql FROM sqlite_master "
      "WHERE tbl_name LIKE 'stagehand\\_%' ESCAPE '\\' ORDER BY type, name");
  for (const char* table :
       {"stagehand_migrations", "stagehand_task_registrations", "stagehand_task_runs"}) {
    dump += std::string("# table_info ") + table + ": cid|name|type|notnull|dflt_value|pk\n";
    dump += db.QueryLines(std::string("PRAGMA table_info(`") + table + "`)");
    dump += std::string("# index_list ") + table + ": seq|name|unique|origin|partial\n";
    dump += db.QueryLines(std::string("PRAGMA index_list(`") + table + "`)");
  }
  return dump;
}

bool WriteByte(int fd, char byte) {
  while (true) {
    const ssize_t n = write(fd, &byte, 1);
    if (n == 1) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

std::optional<char> ReadByte(int fd) {
  char byte = 0;
  while (true) {
    const ssize_t n = read(fd, &byte, 1);
    if (n == 1) return byte;
    if (n < 0 && errno == EINTR) continue;
    return std::nullopt;
  }
}

Child::Child(const Body& body) {
  int down[2];
  int up[2];
  if (pipe(down) != 0 || pipe(up) != 0) {
    ADD_FAILURE() << "pipe failed";
    return;
  }
  // A child that died must show up as a failed Send, not kill the test with SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  std::fflush(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    // Keep only this child's own pipe ends: a copy of another child's pipe would keep that child
    // from seeing end-of-file when the parent closes its side, and a failing test would hang.
    const long max_fd = sysconf(_SC_OPEN_MAX);
    for (int fd = 3; fd < (max_fd > 0 ? max_fd : 1024); ++fd) {
      if (fd != down[0] && fd != up[1]) close(fd);
    }
    const int code = body(down[0], up[1]);
    _exit(code);
  }
  close(down[0]);
  close(up[1]);
  to_child_ = down[1];
  from_child_ = up[0];
  if (pid_ < 0) ADD_FAILURE() << "fork failed";
}

Child::~Child() { Wait(); }

bool Child::Send(char message) { return to_child_ >= 0 && WriteByte(to_child_, message); }

std::optional<char> Child::Receive() {
  if (from_child_ < 0) return std::nullopt;
  return ReadByte(from_child_);
}

int Child::Wait() {
  if (exit_code_) return *exit_code_;
  if (to_child_ >= 0) close(to_child_);
  if (from_child_ >= 0) close(from_child_);
  to_child_ = from_child_ = -1;
  int status = 0;
  exit_code_ = -1;
  if (pid_ > 0 && waitpid(pid_, &status, 0) == pid_ && WIFEXITED(status)) {
    exit_code_ = WEXITSTATUS(status);
  }
  return *exit_code_;
}

}  // namespace stagehand::sqlite_test
