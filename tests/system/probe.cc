// The system suite's task program: a stand-in for real work that reports what it does to an
// append-only event sink, so the checker can rebuild every run, including runs whose host died.
//
//   stagehand_system_probe <sink-file> <task-id> <work-ms>
//
// Each event is one line, written with a single write(2) to a file opened with O_APPEND (atomic for
// lines this short), so concurrent probes of every host share one file:
//
//   <CLOCK_MONOTONIC ns> <event> <host> <run-id> <task-id> <detail>
//
// events: `start`; `tick` every 50 ms while working; `end` with detail `done` (the work finished),
// `term` (SIGTERM: the run was stopped) or `orphan` (the daemon that started it is gone: its parent
// changed, so it stops instead of running on unsupervised). The host name comes from the
// environment variable STAGEHAND_SYSTEM_HOST. A work time of 0 writes `start` and `end` only.
// Single-threaded.
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

volatile sig_atomic_t g_terminated = 0;

void OnTerm(int /*signal*/) { g_terminated = 1; }

std::int64_t MonoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

class Sink {
 public:
  Sink(int fd, std::string host, std::string run_id, std::string task)
      : fd_(fd), host_(std::move(host)), run_id_(std::move(run_id)), task_(std::move(task)) {}

  void Write(const char* event, const char* detail) const {
    char line[512];
    const int n = std::snprintf(line, sizeof line, "%lld %s %s %s %s %s\n",
                                static_cast<long long>(MonoNs()), event, host_.c_str(),
                                run_id_.c_str(), task_.c_str(), detail);
    if (n <= 0) return;
    const auto size = static_cast<std::size_t>(n) < sizeof line ? static_cast<std::size_t>(n)
                                                                : sizeof line - 1;
    while (write(fd_, line, size) < 0 && errno == EINTR) {
    }
  }

 private:
  int fd_;
  std::string host_;
  std::string run_id_;
  std::string task_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <sink-file> <task-id> <work-ms>\n", argv[0]);
    return 2;
  }
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
  const std::string run_id =
      host + "-" + std::to_string(getpid()) + "-" + std::to_string(started);

  struct sigaction action {};
  action.sa_handler = OnTerm;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  const Sink sink(fd, host, run_id, argv[2]);
  sink.Write("start", "-");
  const std::int64_t deadline = started + work_ms * 1000000;
  while (true) {
    if (g_terminated != 0) {
      sink.Write("end", "term");
      return 143;
    }
    if (getppid() != parent) {
      sink.Write("end", "orphan");
      return 3;
    }
    const std::int64_t now = MonoNs();
    if (now >= deadline) break;
    const std::int64_t step = deadline - now < 50000000 ? deadline - now : 50000000;
    timespec pause{static_cast<time_t>(step / 1000000000), static_cast<long>(step % 1000000000)};
    nanosleep(&pause, nullptr);
    if (g_terminated == 0 && getppid() == parent && MonoNs() < deadline) sink.Write("tick", "-");
  }
  sink.Write("end", "done");
  return 0;
}
