#include "stagehand/base/file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "stagehand-file-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  fs::path dir_;
};

// Returns a descriptor of this process other than `except` that names `target`, or -1.
int DescriptorNaming(const fs::path& target, int except) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator("/proc/self/fd", ec)) {
    const int fd = std::atoi(entry.path().filename().c_str());
    std::error_code unreadable;
    if (fd != except && fs::read_symlink(entry.path(), unreadable) == target) {
      return fd;
    }
  }
  return -1;
}

// Waits up to 5 s for another thread's descriptor naming `target`; returns it, or -1.
int AwaitDescriptorNaming(const fs::path& target, int except) {
  for (int i = 0; i < 500; ++i) {
    const int fd = DescriptorNaming(target, except);
    if (fd >= 0) {
      return fd;
    }
    std::this_thread::sleep_for(10ms);
  }
  return -1;
}

TEST_F(FileTest, ReadsTheWholeFileByteForByte) {
  const std::string bytes = std::string("a\0b\r\n", 5) + std::string(200'000, 'x');
  ASSERT_THAT(WriteFileAtomically((dir_ / "f").string(), bytes), IsOk());
  Result<std::string> read = ReadFile((dir_ / "f").string());
  ASSERT_THAT(read, IsOk());
  EXPECT_EQ(*read, bytes);
}

TEST_F(FileTest, ReadsAnEmptyFile) {
  ASSERT_THAT(WriteFileAtomically((dir_ / "empty").string(), ""), IsOk());
  Result<std::string> read = ReadFile((dir_ / "empty").string());
  ASSERT_THAT(read, IsOk());
  EXPECT_EQ(*read, "");
}

TEST_F(FileTest, ReadsProcFilesWhoseSizeReadsZero) {
  Result<std::string> read = ReadFile("/proc/self/status");
  ASSERT_THAT(read, IsOk());
  EXPECT_NE(read->find("Pid:"), std::string::npos);
}

TEST_F(FileTest, MissingFileIsNotFoundWithTheReason) {
  Result<std::string> read = ReadFile((dir_ / "missing").string());
  EXPECT_THAT(read, StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(read.status().message(), "No such file or directory");
}

TEST_F(FileTest, DirectoryIsUnavailable) {
  Result<std::string> read = ReadFile(dir_.string());
  EXPECT_THAT(read, StatusIs(StatusCode::kUnavailable));
  EXPECT_EQ(read.status().message(), "Is a directory");
}

TEST_F(FileTest, FileOfMaxBytesIsReadAndOneByteMoreIsRefused) {
  ASSERT_THAT(WriteFileAtomically((dir_ / "f").string(), "12345"), IsOk());
  Result<std::string> fits = ReadFile((dir_ / "f").string(), 5);
  ASSERT_THAT(fits, IsOk());
  EXPECT_EQ(*fits, "12345");
  Result<std::string> over = ReadFile((dir_ / "f").string(), 4);
  EXPECT_THAT(over, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(over.status().message(), "larger than 4 bytes");
}

TEST_F(FileTest, UnboundedStreamIsRefusedAtMaxBytes) {
  Result<std::string> read = ReadFile("/dev/zero", 100'000);
  EXPECT_THAT(read, StatusIs(StatusCode::kInvalidArgument));
}

TEST_F(FileTest, WriteReplacesTheFileAndLeavesNoTemporary) {
  const std::string path = (dir_ / "ready").string();
  ASSERT_THAT(WriteFileAtomically(path, "old contents\n"), IsOk());
  ASSERT_THAT(WriteFileAtomically(path, "new\n"), IsOk());
  EXPECT_EQ(ReadFile(path).value(), "new\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(FileTest, WriteCreatesTheFileWithTheUmasksMode) {
  const mode_t previous = ::umask(027);
  const Status written = WriteFileAtomically((dir_ / "f").string(), "x");
  ::umask(previous);
  ASSERT_THAT(written, IsOk());
  struct stat info {};
  ASSERT_EQ(::stat((dir_ / "f").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0640U);
}

TEST_F(FileTest, WriteIntoAMissingDirectoryIsUnavailable) {
  const Status written = WriteFileAtomically((dir_ / "no" / "f").string(), "x");
  EXPECT_THAT(written, StatusIs(StatusCode::kUnavailable));
  EXPECT_EQ(written.message(), "No such file or directory");
}

TEST_F(FileTest, FailedRenameRemovesTheTemporary) {
  fs::create_directories(dir_ / "occupied" / "child");
  const Status written = WriteFileAtomically((dir_ / "occupied").string(), "x");
  EXPECT_THAT(written, StatusIs(StatusCode::kUnavailable));
  EXPECT_FALSE(fs::exists(dir_ / "occupied.tmp"));
}

// A FIFO holds ReadFile inside its read, so the descriptor can be inspected while it is open.
TEST_F(FileTest, ReadDescriptorIsCloseOnExec) {
  const fs::path fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result<std::string> read = InternalError("not read");
  std::thread reader([&] { read = ReadFile(fifo.string()); });
  const int writer = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC);
  const int fd = AwaitDescriptorNaming(fifo, writer);
  const int flags = fd >= 0 ? ::fcntl(fd, F_GETFD) : -1;
  EXPECT_EQ(::write(writer, "fifo", 4), 4);
  ::close(writer);
  reader.join();
  ASSERT_GE(fd, 0) << "ReadFile's descriptor was not found";
  EXPECT_NE(flags & FD_CLOEXEC, 0) << "ReadFile's descriptor " << fd;
  ASSERT_THAT(read, IsOk());
  EXPECT_EQ(*read, "fifo");
}

// More than a pipe holds, so WriteFileAtomically waits in its write until the test reads.
TEST_F(FileTest, WriteDescriptorIsCloseOnExec) {
  const fs::path path = dir_ / "out";
  const fs::path fifo = dir_ / "out.tmp";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string contents(1 << 20, 'w');
  Status written = InternalError("not written");
  std::thread writer([&] { written = WriteFileAtomically(path.string(), contents); });
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_CLOEXEC);
  const int fd = AwaitDescriptorNaming(fifo, reader);
  const int flags = fd >= 0 ? ::fcntl(fd, F_GETFD) : -1;
  std::string drained;
  std::array<char, 65536> buffer{};
  for (ssize_t n; (n = ::read(reader, buffer.data(), buffer.size())) > 0;) {
    drained.append(buffer.data(), static_cast<std::size_t>(n));
  }
  ::close(reader);
  writer.join();
  ASSERT_GE(fd, 0) << "WriteFileAtomically's descriptor was not found";
  EXPECT_NE(flags & FD_CLOEXEC, 0) << "WriteFileAtomically's descriptor " << fd;
  EXPECT_THAT(written, IsOk());
  EXPECT_EQ(drained.size(), contents.size());
}

}  // namespace
}  // namespace stagehand
