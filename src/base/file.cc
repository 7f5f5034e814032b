#include "stagehand/base/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <system_error>

namespace stagehand {
namespace {

constexpr std::size_t kReadChunk = std::size_t{64} * 1024;

std::string Reason(int error) { return std::error_code(error, std::generic_category()).message(); }

int OpenCloseOnExec(const std::string& path, int flags, mode_t mode = 0) {
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// Returns what `fd` holds from its offset to its end, or the error ReadFile describes.
Result<std::string> ReadAll(int fd, std::size_t max_bytes) {
  std::string contents;
  struct stat info {};
  const bool sized = ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_size > 0;
  // One byte more than a regular file's size, so that its end is read without growing.
  contents.reserve(sized ? std::min(static_cast<std::size_t>(info.st_size), max_bytes) + 1
                         : kReadChunk);
  for (;;) {
    const std::size_t used = contents.size();
    const std::size_t room = contents.capacity() > used ? contents.capacity() - used : kReadChunk;
    contents.resize(used + room);
    const ssize_t n = ::read(fd, contents.data() + used, room);
    if (n < 0 && errno == EINTR) {
      contents.resize(used);
      continue;
    }
    if (n < 0) {
      return UnavailableError(Reason(errno));
    }
    contents.resize(used + static_cast<std::size_t>(n));
    if (contents.size() > max_bytes) {
      return InvalidArgumentError("larger than " + std::to_string(max_bytes) + " bytes");
    }
    if (n == 0) {
      return contents;
    }
  }
}

// Returns 0, or the errno of the write that failed.
int WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return errno;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

}  // namespace

Result<std::string> ReadFile(const std::string& path, std::size_t max_bytes) {
  const int fd = OpenCloseOnExec(path, O_RDONLY);
  if (fd < 0) {
    const int error = errno;
    return error == ENOENT ? NotFoundError(Reason(error)) : UnavailableError(Reason(error));
  }
  Result<std::string> contents = ReadAll(fd, max_bytes);
  ::close(fd);
  return contents;
}

Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  const std::string temporary = path + ".tmp";
  const int fd = OpenCloseOnExec(temporary, O_WRONLY | O_CREAT | O_TRUNC, 0666);
  if (fd < 0) {
    return UnavailableError(Reason(errno));
  }
  int error = WriteAll(fd, contents);
  // Linux releases the descriptor even when close fails with EINTR, and the data is written.
  if (::close(fd) != 0 && error == 0 && errno != EINTR) {
    error = errno;
  }
  if (error == 0 && std::rename(temporary.c_str(), path.c_str()) != 0) {
    error = errno;
  }
  if (error != 0) {
    ::unlink(temporary.c_str());
    return UnavailableError(Reason(error));
  }
  return Status::Ok();
}

}  // namespace stagehand
