#include "executors/process_shim.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <utility>

namespace stagehand::executors_internal {
namespace {

constexpr std::size_t kMaxTree = 16384;
// While processes are being killed, how long the shim waits for them before the next SIGKILL
// pass (which catches processes forked during the previous one): short at first, then slower for
// a process that cannot die at once (uninterruptible sleep).
constexpr int kFastKillPassMs = 10;
constexpr int kFastKillPasses = 20;
constexpr int kSlowKillPassMs = 100;
// Announces the death of the thread that forked the shim (PR_SET_PDEATHSIG); checked against
// getppid(), so that a SIGHUP from elsewhere is ignored.
constexpr int kParentDeathSignal = SIGHUP;

// A path under /proc built without allocating.
class ProcPath {
 public:
  ProcPath& Add(const char* text) {
    while (*text != '\0' && size_ + 1 < buffer_.size()) {
      buffer_[size_++] = *text++;
    }
    buffer_[size_] = '\0';
    return *this;
  }
  ProcPath& Add(long value) {
    std::array<char, 24> digits{};
    std::size_t n = 0;
    do {
      digits[n++] = static_cast<char>('0' + value % 10);
      value /= 10;
    } while (value > 0 && n < digits.size());
    while (n > 0 && size_ + 1 < buffer_.size()) {
      buffer_[size_++] = digits[--n];
    }
    buffer_[size_] = '\0';
    return *this;
  }
  const char* c_str() const { return buffer_.data(); }

 private:
  std::array<char, 96> buffer_{};
  std::size_t size_ = 0;
};

// Returns the number `text` spells, or -1 when it is not a positive decimal.
long ParsePid(const char* text) {
  long value = 0;
  if (*text == '\0') {
    return -1;
  }
  for (; *text != '\0'; ++text) {
    if (*text < '0' || *text > '9' || value > 1'000'000'000) {
      return -1;
    }
    value = value * 10 + (*text - '0');
  }
  return value;
}

// Calls `visit` with each pid of the space-separated list in file `path`.
template <typename Visit>
void ReadPidList(const char* path, Visit& visit) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return;
  }
  std::array<char, 512> buffer{};
  long value = -1;
  for (;;) {
    ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    for (ssize_t i = 0; i < n; ++i) {
      char c = buffer[static_cast<std::size_t>(i)];
      if (c >= '0' && c <= '9') {
        value = (value < 0 ? 0 : value * 10) + (c - '0');
      } else if (value >= 0) {
        visit(static_cast<pid_t>(value));
        value = -1;
      }
    }
  }
  if (value >= 0) {
    visit(static_cast<pid_t>(value));
  }
  close(fd);
}

// Returns the parent pid in /proc/<pid>/stat, or -1.
long ParentOf(long pid) {
  ProcPath path;
  path.Add("/proc/").Add(pid).Add("/stat");
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return -1;
  }
  // "pid (comm) state ppid ...": comm is at most 16 bytes, so the fields needed fit.
  std::array<char, 256> buffer{};
  ssize_t n = -1;
  do {
    n = read(fd, buffer.data(), buffer.size() - 1);
  } while (n < 0 && errno == EINTR);
  close(fd);
  if (n <= 0) {
    return -1;
  }
  const char* end = buffer.data() + n;
  const char* p = end;
  while (p > buffer.data() && *(p - 1) != ')') {
    --p;
  }
  // p is past the last ')': " S 1234 ..."
  if (p == buffer.data() || end - p < 4) {
    return -1;
  }
  p += 3;
  long parent = 0;
  for (; p < end && *p >= '0' && *p <= '9'; ++p) {
    parent = parent * 10 + (*p - '0');
  }
  return parent;
}

// Calls `visit` with each entry name of directory `path` that is a number.
template <typename Visit>
void ForEachNumberedEntry(const char* path, Visit& visit) {
  int dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    return;
  }
  alignas(dirent64) std::array<char, 4096> buffer{};
  for (;;) {
    ssize_t n = getdents64(dir, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    for (ssize_t offset = 0; offset < n;) {
      const auto* entry =
          reinterpret_cast<const dirent64*>(buffer.data() + offset);  // NOLINT: getdents64 layout
      offset += entry->d_reclen;
      long number = ParsePid(entry->d_name);
      if (number > 0) {
        visit(number);
      }
    }
  }
  close(dir);
}

template <typename Visit>
void ForEachChild(pid_t parent, ChildSource source, Visit& visit) {
  if (source == ChildSource::kChildrenFiles) {
    ProcPath tasks;
    tasks.Add("/proc/").Add(parent).Add("/task");
    auto read_children = [&](long tid) {
      ProcPath children;
      children.Add("/proc/").Add(parent).Add("/task/").Add(tid).Add("/children");
      ReadPidList(children.c_str(), visit);
    };
    ForEachNumberedEntry(tasks.c_str(), read_children);
    return;
  }
  auto check_parent = [&](long pid) {
    if (ParentOf(pid) == parent) {
      visit(static_cast<pid_t>(pid));
    }
  };
  ForEachNumberedEntry("/proc", check_parent);
}

void Send(int channel, const ShimReport& report) {
  if (channel < 0) {
    return;
  }
  while (send(channel, &report, sizeof(report), MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

[[noreturn]] void FailStart(int channel, ShimStep step, int error) {
  ShimReport report;
  report.event = ShimEvent::kStartFailed;
  report.step = step;
  report.error = error;
  Send(channel, report);
  _exit(1);
}

void ResetSignalDispositions() {
  struct sigaction defaults {};
  defaults.sa_handler = SIG_DFL;
  sigemptyset(&defaults.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) {
      sigaction(sig, &defaults, nullptr);  // glibc's own signals fail with EINVAL: fine.
    }
  }
}

// Returns `fd` if it is above 2, else a close-on-exec copy above 2 (so that /dev/null can take
// 0 to 2), or -1.
int AboveStdio(int fd) { return fd > 2 ? fd : fcntl(fd, F_DUPFD_CLOEXEC, 3); }

void CloseRange(unsigned first, unsigned last) {
  if (first > last) {
    return;
  }
  if (close_range(first, last, 0) == 0) {
    return;
  }
  struct rlimit limit {};
  unsigned end = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < (1U << 20)
                     ? static_cast<unsigned>(limit.rlim_cur)
                     : (1U << 20);
  for (unsigned fd = first; fd <= last && fd < end; ++fd) {
    close(static_cast<int>(fd));
  }
}

// Closes every descriptor but `keep` (three distinct descriptors above 2), including 0 to 2.
void CloseAllBut(std::array<int, 3> keep) {
  for (std::size_t i = 1; i < keep.size(); ++i) {
    for (std::size_t j = i; j > 0 && keep[j - 1] > keep[j]; --j) {
      std::swap(keep[j - 1], keep[j]);
    }
  }
  unsigned next = 0;
  for (int fd : keep) {
    if (static_cast<unsigned>(fd) > next) {
      CloseRange(next, static_cast<unsigned>(fd) - 1);
    }
    next = static_cast<unsigned>(fd) + 1;
  }
  CloseRange(next, ~0U);
}

// How the exec child reports a failure through its close-on-exec pipe.
struct ExecFailure {
  ShimStep step;
  int error;
};

[[noreturn]] void FailExec(int error_fd, ShimStep step, int error) {
  ExecFailure failure{step, error};
  while (write(error_fd, &failure, sizeof(failure)) < 0 && errno == EINTR) {
  }
  _exit(127);
}

// The vfork child: becomes the command. Its descriptor 0 is the shim's /dev/null; everything the
// shim holds above 2 is close-on-exec.
[[noreturn]] void ExecCommand(const ShimPlan& plan, int out, int err, int error_fd) {
  if (setpgid(0, 0) != 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0) {
    FailExec(error_fd, ShimStep::kSpawn, errno);
  }
  if (plan.working_directory != nullptr && chdir(plan.working_directory) != 0) {
    FailExec(error_fd, ShimStep::kChdir, errno);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);  // NOLINT(concurrency-mt-unsafe): one thread
  // The search rules of execvp: skip entries that do not hold the program, remember EACCES.
  int error = ENOENT;
  bool denied = false;
  for (const char* const* path = plan.exec_paths; *path != nullptr; ++path) {
    execve(*path, plan.argv, plan.envp);
    error = errno;
    if (error == EACCES) {
      denied = true;
    } else if (error != ENOENT && error != ENOTDIR && error != ESTALE && error != ENODEV &&
               error != ETIMEDOUT) {
      FailExec(error_fd, ShimStep::kExec, error);
    }
  }
  FailExec(error_fd, ShimStep::kExec, denied ? EACCES : error);
}

// Starts the command. The child borrows this process's memory until it execs or exits (vfork),
// so nothing is copied, and it must not return from here.
pid_t SpawnCommand(const ShimPlan& plan, int out, int err, int error_fd) {
  pid_t pid = vfork();
  if (pid == 0) {
    ExecCommand(plan, out, err, error_fd);
  }
  return pid;
}

// The supervision after the command started. Lives on the shim's stack.
class Supervisor {
 public:
  Supervisor(int channel, int sigfd, pid_t command, pid_t parent)
      : channel_(channel), sigfd_(sigfd), command_(command), parent_(parent) {}

  [[noreturn]] void Run() {
    for (;;) {
      Reap();
      if (no_children_) {
        ShimReport done;
        done.event = ShimEvent::kDone;
        done.leftovers = leftovers_;
        Send(channel_, done);
        _exit(0);
      }
      if (killing_) {
        SignalTree(SIGKILL);
        ++kill_passes_;
      }
      std::array<pollfd, 2> fds{};
      nfds_t count = 0;
      fds[count++] = pollfd{sigfd_, POLLIN, 0};
      if (channel_ >= 0) {
        fds[count++] = pollfd{channel_, POLLIN, 0};
      }
      int timeout_ms = -1;
      if (killing_) {
        timeout_ms = kill_passes_ < kFastKillPasses ? kFastKillPassMs : kSlowKillPassMs;
      }
      if (poll(fds.data(), count, timeout_ms) <= 0) {
        continue;
      }
      if (fds[0].revents != 0) {
        ReadSignals();
      }
      if (count > 1 && fds[1].revents != 0) {
        Reap();
        ReadOrders();
      }
    }
  }

 private:
  void Reap() {
    for (;;) {
      siginfo_t info{};
      if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG) != 0) {
        if (errno == EINTR) {
          continue;
        }
        no_children_ = errno == ECHILD;
        return;
      }
      if (info.si_pid == 0) {
        return;
      }
      if (info.si_pid == command_) {
        command_alive_ = false;
        ShimReport exited;
        exited.event = ShimEvent::kExited;
        exited.pid = command_;
        exited.code = info.si_code;
        exited.status = info.si_status;
        exited.signals = signals_;
        Send(channel_, exited);
        if (!term_sent_) {
          // It ended by itself: whatever it left running goes now.
          killing_ = true;
          counting_leftovers_ = true;
        }
      } else if (counting_leftovers_) {
        ++leftovers_;
      }
    }
  }

  void ReadSignals() {
    std::array<signalfd_siginfo, 8> infos{};
    for (;;) {
      ssize_t n = read(sigfd_, infos.data(), sizeof(infos));
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        break;
      }
      for (std::size_t i = 0; i < static_cast<std::size_t>(n) / sizeof(signalfd_siginfo); ++i) {
        if (static_cast<int>(infos[i].ssi_signo) == kParentDeathSignal && getppid() != parent_) {
          ParentGone();
        }
      }
    }
  }

  void ReadOrders() {
    for (;;) {
      char order = 0;
      ssize_t n = recv(channel_, &order, 1, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
      }
      if (n <= 0) {
        ParentGone();
        return;
      }
      if (order == kShimTerminate && !term_sent_ && !killing_) {
        term_sent_ = true;
        SignalTree(SIGTERM);
      } else if (order == kShimKill) {
        killing_ = true;
      }
    }
  }

  void ParentGone() {
    if (channel_ >= 0) {
      close(channel_);
      channel_ = -1;
    }
    killing_ = true;
  }

  void SignalTree(int sig) {
    if (command_alive_) {
      signals_ |= sig == SIGKILL ? kSentKill : kSentTerm;
      // Reaches the command's group even where /proc cannot be read.
      kill(-command_, sig);
    }
    SignalDescendants(getpid(), sig, source_);
  }

  int channel_;
  int sigfd_;
  pid_t command_;
  pid_t parent_;
  ChildSource source_ = DetectChildSource();
  bool command_alive_ = true;
  bool no_children_ = false;
  bool term_sent_ = false;
  bool killing_ = false;
  bool counting_leftovers_ = false;
  std::int32_t signals_ = 0;
  std::int32_t leftovers_ = 0;
  int kill_passes_ = 0;
};

}  // namespace

ChildSource DetectChildSource() {
  ProcPath path;
  pid_t self = getpid();
  path.Add("/proc/").Add(self).Add("/task/").Add(self).Add("/children");
  return access(path.c_str(), R_OK) == 0 ? ChildSource::kChildrenFiles : ChildSource::kParentScan;
}

std::size_t SignalDescendants(pid_t root, int sig, ChildSource source, pid_t* found,
                              std::size_t capacity) {
  static std::array<pid_t, kMaxTree> queue;
  std::size_t head = 0;
  std::size_t tail = 0;
  std::size_t total = 0;
  auto enqueue = [&](pid_t child) {
    if (found != nullptr && total < capacity) {
      found[total] = child;
    }
    ++total;
    if (tail < queue.size()) {
      queue[tail++] = child;
    }
  };
  ForEachChild(root, source, enqueue);
  while (head < tail) {
    pid_t pid = queue[head++];
    ForEachChild(pid, source, enqueue);
    if (sig != 0) {
      kill(pid, sig);
    }
  }
  return total;
}

void RunShim(const ShimPlan& plan) {
  prctl(PR_SET_NAME, "stagehand-shim", 0UL, 0UL, 0UL);
  ResetSignalDispositions();
  int channel = AboveStdio(plan.channel_fd);
  int out = AboveStdio(plan.stdout_fd);
  int err = AboveStdio(plan.stderr_fd);
  if (channel < 0) {
    _exit(1);
  }
  if (out < 0 || err < 0) {
    FailStart(channel, ShimStep::kSupervise, errno);
  }
  // Descriptors the stagehand process opened without O_CLOEXEC (or that other runs' shims hold
  // for a moment) go too; the command gets exactly 0 to 2.
  CloseAllBut({channel, out, err});
  int null_fd = open("/dev/null", O_RDWR);
  if (null_fd != STDIN_FILENO || dup2(null_fd, STDOUT_FILENO) < 0 ||
      dup2(null_fd, STDERR_FILENO) < 0) {
    FailStart(channel, ShimStep::kSupervise, null_fd < 0 ? errno : EBADF);
  }
  if (prctl(PR_SET_CHILD_SUBREAPER, 1UL, 0UL, 0UL, 0UL) != 0 ||
      prctl(PR_SET_PDEATHSIG, static_cast<unsigned long>(kParentDeathSignal), 0UL, 0UL, 0UL) != 0) {
    FailStart(channel, ShimStep::kSupervise, errno);
  }
  sigset_t watched;
  sigemptyset(&watched);
  sigaddset(&watched, SIGCHLD);
  sigaddset(&watched, kParentDeathSignal);
  int sigfd = signalfd(-1, &watched, SFD_CLOEXEC | SFD_NONBLOCK);
  std::array<int, 2> errors{};
  if (sigfd < 0 || pipe2(errors.data(), O_CLOEXEC) != 0) {
    FailStart(channel, ShimStep::kSupervise, errno);
  }
  pid_t command = SpawnCommand(plan, out, err, errors[1]);
  int spawn_error = errno;
  close(errors[1]);
  close(out);
  close(err);
  if (command < 0) {
    FailStart(channel, ShimStep::kSpawn, spawn_error);
  }
  ExecFailure failure{};
  ssize_t n = -1;
  do {
    n = read(errors[0], &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  close(errors[0]);
  if (n == static_cast<ssize_t>(sizeof(failure))) {
    while (waitpid(command, nullptr, 0) < 0 && errno == EINTR) {
    }
    FailStart(channel, failure.step, failure.error);
  }
  ShimReport started;
  started.event = ShimEvent::kStarted;
  started.pid = command;
  Send(channel, started);
  if (getppid() != plan.parent_pid) {
    // The parent died before PR_SET_PDEATHSIG was set: announce it as the kernel would have.
    kill(getpid(), kParentDeathSignal);
  }
  Supervisor supervisor(channel, sigfd, command, plan.parent_pid);
  supervisor.Run();
}

}  // namespace stagehand::executors_internal
