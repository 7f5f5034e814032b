#include "stagehand/executors/command_task.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string_view>
#include <utility>

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace stagehand {
namespace {

constexpr std::size_t kTailLines = 10;
constexpr std::size_t kTailBytes = 1024;
// A longer stretch without a newline is logged as one line, so that memory stays bounded.
constexpr std::size_t kMaxLineBytes = 4096;
constexpr std::size_t kReadChunk = std::size_t{16} * 1024;
// How often the grace deadline is compared with the clock while the group is terminating, so a
// ManualClock drives it as well as the real one.
constexpr int kGraceSliceMs = 20;
// Without a pidfd, how often the child is checked for exit.
constexpr int kExitSliceMs = 50;
constexpr int kIdleSliceMs = 500;
// After the program exited and its group was killed, how long the pipes may stay silent before
// the rest of the output is given up (a process outside the group may still hold them).
constexpr int kDrainIdleMs = 100;

std::string ErrnoText(int err) {
  std::array<char, 256> buffer{};
  return strerror_r(err, buffer.data(), buffer.size());
}

// An owned file descriptor. Not thread-safe.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) {
      close(fd_);
    }
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// posix_spawn attributes and file actions, destroyed on every path. Not thread-safe.
class SpawnSetup {
 public:
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions_);
    posix_spawnattr_init(&attr_);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions_);
    posix_spawnattr_destroy(&attr_);
  }
  posix_spawn_file_actions_t* actions() { return &actions_; }
  posix_spawnattr_t* attr() { return &attr_; }

 private:
  posix_spawn_file_actions_t actions_{};
  posix_spawnattr_t attr_{};
};

struct Stream {
  Fd fd;
  std::string_view name;
  LogLevel level = LogLevel::kInfo;
  std::string partial;
};

// Turns the bytes of both streams into log records, within the output cap, and keeps the tail of
// stderr for the failure message. Not thread-safe.
class OutputSink {
 public:
  OutputSink(const CommandSpec& spec, Logger& logger) : spec_(spec), logger_(logger) {}

  void Append(Stream& stream, std::string_view bytes) {
    while (!bytes.empty()) {
      std::size_t newline = bytes.find('\n');
      if (newline == std::string_view::npos) {
        stream.partial.append(bytes);
        while (stream.partial.size() >= kMaxLineBytes) {
          Emit(stream, std::string_view(stream.partial).substr(0, kMaxLineBytes));
          stream.partial.erase(0, kMaxLineBytes);
        }
        return;
      }
      stream.partial.append(bytes.substr(0, newline));
      Emit(stream, stream.partial);
      stream.partial.clear();
      bytes.remove_prefix(newline + 1);
    }
  }

  void Flush(Stream& stream) {
    if (!stream.partial.empty()) {
      Emit(stream, stream.partial);
    }
    stream.partial.clear();
  }

  std::string StderrTail() const {
    std::string out;
    for (const std::string& line : tail_) {
      if (!out.empty()) {
        out += '\n';
      }
      out += line;
    }
    return out;
  }

 private:
  LogFields Fields(std::string_view stream) const {
    LogFields fields;
    if (!spec_.task_id.empty()) {
      fields.emplace_back("task", spec_.task_id);
    }
    fields.emplace_back("stream", std::string(stream));
    return fields;
  }

  void Emit(const Stream& stream, std::string_view line) {
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    if (stream.level == LogLevel::kWarn) {
      RememberStderr(line);
    }
    if (truncated_) {
      return;
    }
    if (logged_bytes_ + line.size() + 1 > spec_.output_cap_bytes) {
      truncated_ = true;
      LogFields fields = Fields(stream.name);
      fields.emplace_back("cap_bytes", std::to_string(spec_.output_cap_bytes));
      logger_.Warn("\u2026 output truncated", fields);
      return;
    }
    logged_bytes_ += line.size() + 1;
    logger_.Log(stream.level, line, Fields(stream.name));
  }

  void RememberStderr(std::string_view line) {
    if (line.size() > kTailBytes) {
      line = line.substr(line.size() - kTailBytes);
    }
    tail_.emplace_back(line);
    tail_bytes_ += line.size() + 1;
    while (tail_.size() > kTailLines || (tail_.size() > 1 && tail_bytes_ > kTailBytes + 1)) {
      tail_bytes_ -= tail_.front().size() + 1;
      tail_.pop_front();
    }
  }

  const CommandSpec& spec_;
  Logger& logger_;
  std::size_t logged_bytes_ = 0;
  bool truncated_ = false;
  std::deque<std::string> tail_;
  std::size_t tail_bytes_ = 0;
};

// Reads what is available on `stream` (at most a few chunks, so the caller stays responsive).
// Closes it at end of file or on a read error.
void ReadAvailable(Stream& stream, OutputSink& sink) {
  std::array<char, kReadChunk> buffer{};
  for (int i = 0; i < 4 && stream.fd.valid(); ++i) {
    ssize_t n = read(stream.fd.get(), buffer.data(), buffer.size());
    if (n > 0) {
      sink.Append(stream, std::string_view(buffer.data(), static_cast<std::size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    }
    sink.Flush(stream);
    stream.fd.Reset();
  }
}

Status MakePipe(Fd& read_end, Fd& write_end) {
  std::array<int, 2> fds{};
  if (pipe2(fds.data(), O_CLOEXEC) != 0) {
    return UnavailableError(fmt::format("cannot create a pipe: {}", ErrnoText(errno)));
  }
  read_end = Fd(fds[0]);
  write_end = Fd(fds[1]);
  int flags = fcntl(read_end.get(), F_GETFL);
  if (flags < 0 || fcntl(read_end.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return UnavailableError(fmt::format("cannot configure a pipe: {}", ErrnoText(errno)));
  }
  return Status::Ok();
}

std::vector<std::string> MergedEnvironment(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> merged;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view kv(*entry);
    std::string_view key = kv.substr(0, kv.find('='));
    if (overrides.find(std::string(key)) == overrides.end()) {
      merged.emplace_back(kv);
    }
  }
  for (const auto& [key, value] : overrides) {
    std::string entry = key;
    entry += '=';
    entry += value;
    merged.push_back(std::move(entry));
  }
  return merged;
}

std::vector<char*> PointersTo(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) {
    pointers.push_back(s.data());
  }
  pointers.push_back(nullptr);
  return pointers;
}

// Returns whether the child has exited, filling `info`, without reaping it: the zombie keeps the
// process group id reserved until the group has been killed.
bool HasExited(pid_t pid, siginfo_t& info) {
  info = {};
  while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno != EINTR) {
      return true;  // ECHILD: nothing left to wait for.
    }
  }
  return info.si_pid == pid;
}

std::string DescribeExit(const siginfo_t& info) {
  if (info.si_code == CLD_EXITED) {
    return fmt::format("exited with code {}", info.si_status);
  }
  const char* abbrev = sigabbrev_np(info.si_status);
  return fmt::format("was killed by signal {} (SIG{})", info.si_status,
                     abbrev != nullptr ? abbrev : "?");
}

void DrainAfterExit(std::array<Stream, 2>& streams, OutputSink& sink, int wake_fd) {
  while (streams[0].fd.valid() || streams[1].fd.valid()) {
    std::array<pollfd, 3> fds{};
    nfds_t count = 0;
    std::array<Stream*, 2> polled{};
    for (Stream& stream : streams) {
      if (!stream.fd.valid()) {
        continue;
      }
      polled[count] = &stream;
      fds[count++] = pollfd{stream.fd.get(), POLLIN, 0};
    }
    nfds_t streams_polled = count;
    fds[count++] = pollfd{wake_fd, POLLIN, 0};
    int ready = poll(fds.data(), count, kDrainIdleMs);
    if (ready < 0 && errno == EINTR) {
      continue;
    }
    if (ready <= 0) {
      break;
    }
    for (nfds_t i = 0; i < streams_polled; ++i) {
      if (fds[i].revents != 0) {
        ReadAvailable(*polled[i], sink);
      }
    }
    if ((fds[streams_polled].revents & POLLIN) != 0) {
      break;
    }
  }
  for (Stream& stream : streams) {
    sink.Flush(stream);
  }
}

}  // namespace

Status RunCommand(const CommandSpec& spec, Logger& logger, Clock& clock,
                  const std::stop_token& stop) {
  if (spec.argv.empty()) {
    return InvalidArgumentError("command: argv is empty");
  }
  const std::string& program = spec.argv.front();
  if (!spec.working_directory.empty()) {
    struct stat st {};
    if (stat(spec.working_directory.c_str(), &st) != 0) {
      return FailedPreconditionError(fmt::format("cannot start '{}': working directory '{}': {}",
                                                 program, spec.working_directory,
                                                 ErrnoText(errno)));
    }
    if (!S_ISDIR(st.st_mode)) {
      return FailedPreconditionError(
          fmt::format("cannot start '{}': working directory '{}' is not a directory", program,
                      spec.working_directory));
    }
  }
  if (stop.stop_requested()) {
    return CancelledError(fmt::format("command '{}' not started: stopped", program));
  }

  std::array<Stream, 2> streams;
  streams[0].name = "stdout";
  streams[0].level = LogLevel::kInfo;
  streams[1].name = "stderr";
  streams[1].level = LogLevel::kWarn;
  Fd out_write;
  Fd err_write;
  STAGEHAND_RETURN_IF_ERROR(MakePipe(streams[0].fd, out_write));
  STAGEHAND_RETURN_IF_ERROR(MakePipe(streams[1].fd, err_write));
  Fd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    return UnavailableError(fmt::format("cannot create an eventfd: {}", ErrnoText(errno)));
  }

  std::vector<std::string> args = spec.argv;
  std::vector<char*> argv = PointersTo(args);
  std::vector<std::string> env = MergedEnvironment(spec.env);
  std::vector<char*> envp = PointersTo(env);

  SpawnSetup setup;
  posix_spawn_file_actions_addopen(setup.actions(), STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(setup.actions(), out_write.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(setup.actions(), err_write.get(), STDERR_FILENO);
  if (!spec.working_directory.empty()) {
    posix_spawn_file_actions_addchdir_np(setup.actions(), spec.working_directory.c_str());
  }
  // The host may block or ignore signals (a signal-handling thread, SIGPIPE); the child starts
  // clean.
  sigset_t mask;
  sigemptyset(&mask);
  posix_spawnattr_setsigmask(setup.attr(), &mask);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGALRM, SIGTERM, SIGCHLD, SIGUSR1, SIGUSR2}) {
    sigaddset(&defaults, sig);
  }
  posix_spawnattr_setsigdefault(setup.attr(), &defaults);
  posix_spawnattr_setpgroup(setup.attr(), 0);
  posix_spawnattr_setflags(
      setup.attr(),
      static_cast<short>(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF));

  pid_t pid = -1;
  int spawn_error =
      posix_spawnp(&pid, program.c_str(), setup.actions(), setup.attr(), argv.data(), envp.data());
  if (spawn_error != 0) {
    return FailedPreconditionError(
        fmt::format("cannot start '{}': {}", program, ErrnoText(spawn_error)));
  }
  out_write.Reset();
  err_write.Reset();
  // glibc 2.36's <sys/pidfd.h> lacks C linkage in C++, hence the raw system call.
  Fd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0U)));

  LogFields start_fields;
  if (!spec.task_id.empty()) {
    start_fields.emplace_back("task", spec.task_id);
  }
  start_fields.emplace_back("program", program);
  start_fields.emplace_back("pid", std::to_string(pid));
  logger.Debug("command started", start_fields);

  int wake_fd = wake.get();
  std::stop_callback on_stop(stop, [wake_fd] {
    std::uint64_t one = 1;
    if (write(wake_fd, &one, sizeof(one)) < 0) {
      // The counter is already non-zero; the poller will wake anyway.
    }
  });

  OutputSink sink(spec, logger);
  siginfo_t info{};
  bool terminating = false;
  bool killed = false;
  MonoTime kill_deadline{};
  while (!HasExited(pid, info)) {
    if (stop.stop_requested() && !terminating) {
      kill(-pid, SIGTERM);
      terminating = true;
      kill_deadline = clock.MonoNow() + spec.kill_grace;
    }
    if (terminating && !killed && clock.MonoNow() >= kill_deadline) {
      kill(-pid, SIGKILL);
      killed = true;
    }
    std::array<pollfd, 4> fds{};
    std::array<Stream*, 2> polled{};
    nfds_t count = 0;
    for (Stream& stream : streams) {
      if (!stream.fd.valid()) {
        continue;
      }
      polled[count] = &stream;
      fds[count++] = pollfd{stream.fd.get(), POLLIN, 0};
    }
    nfds_t streams_polled = count;
    if (pidfd.valid()) {
      fds[count++] = pollfd{pidfd.get(), POLLIN, 0};
    }
    if (!terminating) {
      fds[count++] = pollfd{wake_fd, POLLIN, 0};
    }
    int timeout_ms = kIdleSliceMs;
    if (terminating && !killed) {
      timeout_ms = kGraceSliceMs;
    } else if (!pidfd.valid()) {
      timeout_ms = kExitSliceMs;
    }
    int ready = poll(fds.data(), count, timeout_ms);
    if (ready <= 0) {
      continue;
    }
    for (nfds_t i = 0; i < streams_polled; ++i) {
      if (fds[i].revents != 0) {
        ReadAvailable(*polled[i], sink);
      }
    }
  }

  // Whatever the program left running in its group does not outlive the run.
  // Reaps the program and, when this process is a child subreaper, the members of the group that
  // were re-parented to it, so that none is left as a zombie.
  kill(-pid, SIGKILL);
  int wait_status = 0;
  while (waitpid(-pid, &wait_status, 0) > 0 || errno == EINTR) {
  }
  DrainAfterExit(streams, sink, wake_fd);

  if (terminating) {
    return CancelledError(fmt::format(
        "command '{}' stopped: {}{}", program, DescribeExit(info),
        killed ? fmt::format(" (SIGKILL after a grace of {} ms)", spec.kill_grace.count()) : ""));
  }
  if (info.si_code == CLD_EXITED && info.si_status == 0) {
    return Status::Ok();
  }
  std::string message = fmt::format("command '{}' {}", program, DescribeExit(info));
  std::string tail = sink.StderrTail();
  if (!tail.empty()) {
    message += "; stderr:\n" + tail;
  }
  return UnavailableError(std::move(message));
}

Status BecomeChildSubreaper() {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1UL, 0UL, 0UL, 0UL) != 0) {
    return UnavailableError(fmt::format("cannot become a child subreaper: {}", ErrnoText(errno)));
  }
  return Status::Ok();
}

Result<TaskFunction> MakeCommandTask(CommandSpec spec, std::shared_ptr<Logger> logger,
                                     Clock& clock) {
  if (spec.argv.empty() || spec.argv.front().empty()) {
    return InvalidArgumentError("command: argv must name a program");
  }
  if (logger == nullptr) {
    logger = NullLogger();
  }
  return TaskFunction(
      [spec = std::move(spec), logger = std::move(logger), &clock](const std::stop_token& stop) {
        return RunCommand(spec, *logger, clock, stop);
      });
}

}  // namespace stagehand
