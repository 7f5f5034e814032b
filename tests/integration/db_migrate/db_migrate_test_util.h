// Shared helpers of the `stagehand db migrate` tests: a temp dir, config files in it, and a run of
// the command line through cli::Run with string streams.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "stagehand/cli/cli.h"

namespace stagehand::db_migrate_test {

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};

inline CliResult RunCli(std::vector<std::string> args) {
  args.insert(args.begin(), "stagehand");
  std::ostringstream out;
  std::ostringstream err;
  CliResult result;
  result.code = cli::Run(args, out, err);
  result.out = out.str();
  result.err = err.str();
  return result;
}

// A fresh directory under the system temp dir, removed with its contents at destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "stagehand-db-migrate-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Writes `text` to `name` in the directory and returns the file's path.
  std::string Write(const std::string& name, const std::string& text) const {
    const std::filesystem::path file = path_ / name;
    std::ofstream(file) << text;
    return file.string();
  }

 private:
  std::filesystem::path path_;
};

}  // namespace stagehand::db_migrate_test
