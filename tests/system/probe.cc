// The system suite's task program: a stand-in for real work that reports what it does to an
// append-only event sink, so the checker can rebuild every run, including runs whose host died.
//
//   stagehand_system_probe <sink-file> <task-id> <work-ms> [<behaviour> [<behaviour-ms>]]
//
// Each event is one line, written with a single write(2) to a file opened with O_APPEND (atomic for
// lines this short), so concurrent probes of every host share one file:
//
//   <CLOCK_MONOTONIC ns> <event> <host> <run-id> <task-id> <detail>
//
// events: `start`; `pid` (detail `main:<pid>`); `tick` every 50 ms while working; `end` with
// detail `done` (the work finished), `term` (SIGTERM: the run was stopped) or `orphan` (the daemon
// that started it is gone: its parent changed, so it stops instead of running on unsupervised).
// The host name comes from the environment variable STAGEHAND_SYSTEM_HOST. A work time of 0
// writes `start` and `end` only.
//
// Behaviours, the adversarial tasks of the suite (default `plain`, as above):
//   ignore-term   SIGTERM and SIGINT are ignored (each logged as `signal` `TERM-ignored`): the run
//                 goes on until its work is done or it is SIGKILLed, like `trap '' TERM`.
//   slow-term     on SIGTERM, logs `signal` `TERM-slow`, goes on ticking for <behaviour-ms>, then
//                 ends `term`, like a trap that cleans up slowly.
//   setsid        first forks a grandchild of the daemon that calls setsid(2) (so a signal to the
//                 command's process group misses it) and outlives its parent: it logs `gc-start`,
//                 `pid` (`grandchild:<pid>`), a `gc-tick` every 50 ms for <behaviour-ms>, then
//                 `gc-end` `done` (or `term` on SIGTERM). It does not stop when orphaned.
//   flood         writes 100-byte lines to stdout as fast as the pipe takes them (at most 16 MiB)
//                 while working, then logs `flooded` with the byte count.
//
// When STAGEHAND_SYSTEM_LOCKS names a directory, the probe holds an exclusive flock(2) on
// `<dir>/<run-id>.lock` (created under another name and renamed once locked) through an open file
// description that every process of the run shares, the setsid grandchild included. The lock is
// released when the run's last process is dead, which the harness observes (`gone`): the run's
// true lifetime, whatever its processes log. The file holds "<host> <run-id> <task-id>".
// Single-threaded.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "event_clock.h"

namespace {

volatile sig_atomic_t g_terminated = 0;

void OnTerm(int /*signal*/) { g_terminated = 1; }

using stagehand_system::MonoNs;

void SleepNs(std::int64_t ns) {
  timespec pause{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  nanosleep(&pause, nullptr);
}

void WriteAll(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR && g_terminated == 0) continue;
      return;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

class Sink {
 public:
  Sink(int fd, std::string host, std::string run_id, std::string task)
      : fd_(fd), host_(std::move(host)), run_id_(std::move(run_id)), task_(std::move(task)) {}

  void Write(const char* event, const std::string& detail) const {
    char line[512];
    const int n =
        std::snprintf(line, sizeof line, "%lld %s %s %s %s %s\n", static_cast<long long>(MonoNs()),
                      event, host_.c_str(), run_id_.c_str(), task_.c_str(), detail.c_str());
    if (n <= 0) return;
    const auto size =
        static_cast<std::size_t>(n) < sizeof line ? static_cast<std::size_t>(n) : sizeof line - 1;
    while (write(fd_, line, size) < 0 && errno == EINTR) {
    }
  }

  const std::string& host() const { return host_; }
  const std::string& run_id() const { return run_id_; }
  const std::string& task() const { return task_; }

 private:
  int fd_;
  std::string host_;
  std::string run_id_;
  std::string task_;
};

enum class Behaviour { kPlain, kIgnoreTerm, kSlowTerm, kSetsid, kFlood };

bool ParseBehaviour(const char* text, Behaviour& out) {
  const std::string name = text;
  if (name == "plain") {
    out = Behaviour::kPlain;
  } else if (name == "ignore-term") {
    out = Behaviour::kIgnoreTerm;
  } else if (name == "slow-term") {
    out = Behaviour::kSlowTerm;
  } else if (name == "setsid") {
    out = Behaviour::kSetsid;
  } else if (name == "flood") {
    out = Behaviour::kFlood;
  } else {
    return false;
  }
  return true;
}

// Takes the run's lock (see the file comment); returns false when STAGEHAND_SYSTEM_LOCKS is unset
// or the lock cannot be made. The descriptor stays open for the life of the process (and of every
// process forked from it).
bool HoldRunLock(const Sink& sink) {
  const char* dir = std::getenv("STAGEHAND_SYSTEM_LOCKS");
  if (dir == nullptr || *dir == '\0') return false;
  const std::string final_path = std::string(dir) + "/" + sink.run_id() + ".lock";
  const std::string temporary = final_path + ".new";
  const int fd = open(temporary.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  if (flock(fd, LOCK_EX) != 0) {
    close(fd);
    return false;
  }
  const std::string text = sink.host() + " " + sink.run_id() + " " + sink.task() + "\n";
  WriteAll(fd, text.data(), text.size());
  return rename(temporary.c_str(), final_path.c_str()) == 0;
}

// The setsid grandchild: its own session, so the command's process group is not its group.
[[noreturn]] void RunGrandchild(const Sink& sink, std::int64_t life_ms) {
  setsid();
  g_terminated = 0;
  sink.Write("gc-start", "-");
  sink.Write("pid", "grandchild:" + std::to_string(getpid()));
  const std::int64_t deadline = MonoNs() + life_ms * 1000000;
  while (g_terminated == 0 && MonoNs() < deadline) {
    SleepNs(50000000);
    if (g_terminated == 0) sink.Write("gc-tick", "-");
  }
  sink.Write("gc-end", g_terminated != 0 ? "term" : "done");
  _exit(0);
}

void Flood(std::int64_t deadline, std::int64_t& next_tick, const Sink& sink) {
  constexpr std::size_t kLine = 100;
  constexpr std::size_t kMaxBytes = std::size_t{16} << 20;
  static char buffer[64 * 1024];
  const std::size_t lines = sizeof buffer / kLine;
  for (std::size_t i = 0; i < lines; ++i) {
    std::memset(buffer + i * kLine, 'x', kLine - 1);
    std::memcpy(buffer + i * kLine, "flood ", 6);
    buffer[i * kLine + kLine - 1] = '\n';
  }
  std::size_t written = 0;
  while (g_terminated == 0 && written < kMaxBytes) {
    const std::int64_t now = MonoNs();
    if (now >= deadline) break;
    if (now >= next_tick) {
      sink.Write("tick", "-");
      next_tick += 50000000;
    }
    WriteAll(STDOUT_FILENO, buffer, lines * kLine);
    written += lines * kLine;
  }
  sink.Write("flooded", std::to_string(written));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 6) {
    std::fprintf(stderr,
                 "usage: %s <sink-file> <task-id> <work-ms> [plain|ignore-term|slow-term|setsid|"
                 "flood [<behaviour-ms>]]\n",
                 argv[0]);
    return 2;
  }
  Behaviour behaviour = Behaviour::kPlain;
  if (argc >= 5 && !ParseBehaviour(argv[4], behaviour)) {
    std::fprintf(stderr, "unknown behaviour %s\n", argv[4]);
    return 2;
  }
  const long long behaviour_ms = argc >= 6 ? std::atoll(argv[5]) : 0;
  const int fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "cannot open %s: %s\n", argv[1], std::strerror(errno));
    return 2;
  }
  const long long work_ms = std::atoll(argv[3]);
  const char* host_env = std::getenv("STAGEHAND_SYSTEM_HOST");
  const std::string host = host_env != nullptr && *host_env != '\0' ? host_env : "unknown";
  const pid_t parent = getppid();
  const std::int64_t started = MonoNs();
  // stagehand's own id of the run, which its history holds, when the daemon gives one.
  const char* run_env = std::getenv("STAGEHAND_RUN_ID");
  const std::string run_id =
      run_env != nullptr && *run_env != '\0'
          ? std::string(run_env)
          : host + "-" + std::to_string(getpid()) + "-" + std::to_string(started);

  struct sigaction action {};
  action.sa_handler = OnTerm;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  const Sink sink(fd, host, run_id, argv[2]);
  // The lock first: a run whose `start` is in the sink is then always watched, even when it is
  // SIGKILLed at once.
  HoldRunLock(sink);
  sink.Write("start", "-");
  sink.Write("pid", "main:" + std::to_string(getpid()));
  if (behaviour == Behaviour::kSetsid) {
    const pid_t child = fork();
    if (child == 0) RunGrandchild(sink, behaviour_ms);
  }

  const std::int64_t deadline = started + work_ms * 1000000;
  std::int64_t next_tick = started + 50000000;
  bool flooded = false;
  while (true) {
    if (g_terminated != 0) {
      if (behaviour == Behaviour::kIgnoreTerm) {
        g_terminated = 0;
        sink.Write("signal", "TERM-ignored");
        continue;
      }
      if (behaviour == Behaviour::kSlowTerm) {
        sink.Write("signal", "TERM-slow");
        const std::int64_t until = MonoNs() + behaviour_ms * 1000000;
        while (MonoNs() < until) {
          SleepNs(std::min<std::int64_t>(50000000, until - MonoNs()));
          sink.Write("tick", "-");
        }
      }
      sink.Write("end", "term");
      return 143;
    }
    if (getppid() != parent) {
      sink.Write("end", "orphan");
      return 3;
    }
    const std::int64_t now = MonoNs();
    if (now >= deadline) break;
    if (behaviour == Behaviour::kFlood && !flooded) {
      flooded = true;
      Flood(deadline, next_tick, sink);
      continue;
    }
    const std::int64_t step = deadline - now < 50000000 ? deadline - now : 50000000;
    SleepNs(step);
    if (g_terminated == 0 && getppid() == parent && MonoNs() < deadline) sink.Write("tick", "-");
  }
  sink.Write("end", "done");
  return 0;
}
