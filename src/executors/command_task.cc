#include "stagehand/executors/command_task.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string_view>
#include <utility>

#include "executors/process_shim.h"
#include "stagehand/base/check.h"
#include "stagehand/time/duration.h"

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace stagehand {
namespace {

using executors_internal::kSentKill;
using executors_internal::kSentTerm;
using executors_internal::kShimKill;
using executors_internal::kShimTerminate;
using executors_internal::RunShim;
using executors_internal::ShimEvent;
using executors_internal::ShimPlan;
using executors_internal::ShimReport;
using executors_internal::ShimStep;

constexpr std::size_t kTailLines = 10;
constexpr std::size_t kTailBytes = 1024;
// A longer stretch without a newline is logged as one line, so that memory stays bounded.
constexpr std::size_t kMaxLineBytes = 4096;
// The most bytes of the last output line the run's end record quotes.
constexpr std::size_t kLastLineBytes = 200;
constexpr std::size_t kReadChunk = std::size_t{16} * 1024;
// How often the grace deadline is compared with the clock while the tree is terminating, so a
// ManualClock drives it as well as the real one.
constexpr int kGraceSliceMs = 20;
// After the whole tree is gone, how long the pipes may stay silent before the rest of the output
// is given up (a process outside the tree may have been handed them over a socket).
constexpr int kDrainIdleMs = 100;

// Returns the first `max_bytes` bytes of `text`, without cutting a UTF-8 sequence.
std::string Utf8Prefix(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) {
    return std::string(text);
  }
  std::size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0U) == 0x80U) {
    --end;
  }
  return std::string(text.substr(0, end));
}

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

struct Stream {
  Fd fd;
  std::string_view name;
  LogLevel level = LogLevel::kInfo;
  std::string partial;
};

// Takes the bytes of both streams as they come: into the run's report when it has one, else into
// log records within the output cap. Keeps the tail of stderr for the failure message and the
// last line for the run's end record. Not thread-safe.
class OutputSink {
 public:
  OutputSink(const CommandSpec& spec, Logger& logger, RunReport* report)
      : spec_(spec), logger_(logger), report_(report) {}

  void Append(Stream& stream, std::string_view bytes) {
    output_bytes_ += bytes.size();
    if (report_ != nullptr) {
      report_->AppendOutput(bytes);
    }
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

  std::uint64_t output_bytes() const { return output_bytes_; }
  const std::string& last_line() const { return last_line_; }

 private:
  LogFields Fields(std::string_view stream) const {
    LogFields fields;
    if (!spec_.task_id.empty()) {
      fields.emplace_back("task", spec_.task_id);
    }
    fields.emplace_back("stream", std::string(stream));
    AddTraceFields(spec_.trace, fields);
    return fields;
  }

  void Emit(const Stream& stream, std::string_view line) {
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    if (stream.level == LogLevel::kWarn) {
      RememberStderr(line);
    }
    if (!line.empty()) {
      last_line_ = Utf8Prefix(line, kLastLineBytes);
    }
    if (report_ != nullptr || truncated_) {
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
  RunReport* const report_;
  std::uint64_t output_bytes_ = 0;
  std::string last_line_;
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

std::vector<std::string> ExecPaths(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    return {program};
  }
  std::vector<std::string> paths;
  if (program.empty()) {
    return paths;
  }
  // As execvp and posix_spawnp: the PATH of this process, not the command's.
  const char* path = getenv("PATH");  // NOLINT(concurrency-mt-unsafe): read-only, as execvp does
  std::string_view dirs = path != nullptr ? path : "/bin:/usr/bin";
  for (;;) {
    std::size_t colon = dirs.find(':');
    std::string_view dir = dirs.substr(0, colon);
    paths.push_back(dir.empty() ? program : fmt::format("{}/{}", dir, program));
    if (colon == std::string_view::npos) {
      break;
    }
    dirs.remove_prefix(colon + 1);
  }
  return paths;
}

std::vector<const char*> PointersTo(const std::vector<std::string>& strings) {
  std::vector<const char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (const std::string& s : strings) {
    pointers.push_back(s.c_str());
  }
  pointers.push_back(nullptr);
  return pointers;
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

std::string DescribeExit(const ShimReport& exit) {
  if (exit.code == CLD_EXITED) {
    return fmt::format("exited with code {}", exit.status);
  }
  return fmt::format("was killed by signal {} ({})", exit.status, SignalName(exit.status));
}

// One poll over the open output streams and up to two other descriptors (the shim's channel, the
// wake eventfd). Not thread-safe; built anew for each poll, as streams close between polls.
class StreamPoll {
 public:
  StreamPoll(std::array<Stream, 2>& streams, std::initializer_list<int> others) {
    STAGEHAND_CHECK(others.size() <= kMaxOthers);
    for (Stream& stream : streams) {
      if (stream.fd.valid()) {
        polled_[count_] = &stream;
        fds_[count_++] = pollfd{stream.fd.get(), POLLIN, 0};
      }
    }
    streams_polled_ = count_;
    for (int fd : others) {
      fds_[count_++] = pollfd{fd, POLLIN, 0};
    }
  }

  // Returns what poll(2) returns, waiting at most `timeout_ms` (-1: no limit).
  int Wait(int timeout_ms) { return poll(fds_.data(), count_, timeout_ms); }

  // Reads what is available on each stream with an event; a stream at its end is closed.
  void ReadStreams(OutputSink& sink) {
    for (nfds_t i = 0; i < streams_polled_; ++i) {
      if (fds_[i].revents != 0) {
        ReadAvailable(*polled_[i], sink);
      }
    }
  }

  // Returns the events of the `index`th of the other descriptors.
  short OtherEvents(std::size_t index) const { return fds_[streams_polled_ + index].revents; }

 private:
  static constexpr std::size_t kMaxOthers = 2;
  std::array<pollfd, 2 + kMaxOthers> fds_{};
  std::array<Stream*, 2> polled_{};
  nfds_t count_ = 0;
  nfds_t streams_polled_ = 0;
};

void DrainAfterExit(std::array<Stream, 2>& streams, OutputSink& sink, int wake_fd) {
  while (streams[0].fd.valid() || streams[1].fd.valid()) {
    StreamPoll poll_set(streams, {wake_fd});
    int ready = poll_set.Wait(kDrainIdleMs);
    if (ready < 0 && errno == EINTR) {
      continue;
    }
    if (ready <= 0) {
      break;
    }
    poll_set.ReadStreams(sink);
    if ((poll_set.OtherEvents(0) & POLLIN) != 0) {
      break;
    }
  }
  for (Stream& stream : streams) {
    sink.Flush(stream);
  }
}

// What RunCommand asked of the shim, and when (monotonic, on the run's clock).
struct Orders {
  bool term_sent = false;
  MonoTime term_at{};
  MonoTime kill_deadline{};
  bool kill_sent = false;
  bool kill_by_token = false;
  MonoTime kill_at{};
};

// What the shim reported.
struct Reports {
  std::optional<ShimReport> start;  // kStarted or kStartFailed.
  std::optional<ShimReport> exit;
  std::optional<ShimReport> done;
};

// The `task` and `program` fields of the run's own log records.
LogFields RunFields(const CommandSpec& spec) {
  LogFields fields;
  if (!spec.task_id.empty()) {
    fields.emplace_back("task", spec.task_id);
  }
  fields.emplace_back("program", spec.argv.front());
  AddTraceFields(spec.trace, fields);
  return fields;
}

// Forks the shim that runs `spec`, handing it the other ends of `channel` and of the output
// pipes. Returns its pid.
Result<pid_t> ForkShim(const CommandSpec& spec, int channel_fd, int stdout_fd, int stderr_fd) {
  std::vector<const char*> argv = PointersTo(spec.argv);
  std::vector<std::string> env = CommandEnvironment(spec, environ);
  std::vector<const char*> envp = PointersTo(env);
  std::vector<std::string> exec_paths = ExecPaths(spec.argv.front());
  std::vector<const char*> exec_path_pointers = PointersTo(exec_paths);
  ShimPlan plan;
  // execve takes char* const[] but does not write through it.
  plan.argv = const_cast<char* const*>(argv.data());  // NOLINT(*-const-cast)
  plan.envp = const_cast<char* const*>(envp.data());  // NOLINT(*-const-cast)
  plan.exec_paths = exec_path_pointers.data();
  plan.working_directory =
      spec.working_directory.empty() ? nullptr : spec.working_directory.c_str();
  plan.parent_pid = getpid();
  plan.channel_fd = channel_fd;
  plan.stdout_fd = stdout_fd;
  plan.stderr_fd = stderr_fd;

  // The shim starts with every signal blocked, so that no handler of this process runs in it.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pid_t shim = fork();
  if (shim == 0) {
    RunShim(plan);
  }
  int fork_error = errno;
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (shim < 0) {
    return UnavailableError(
        fmt::format("cannot start '{}': fork: {}", spec.argv.front(), ErrnoText(fork_error)));
  }
  return shim;
}

void SendOrder(int channel, char order) {
  while (send(channel, &order, 1, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

// Sends the orders that `control` and the grace deadline call for, each once: SIGTERM on stop,
// SIGKILL on kill or `kill_grace` after SIGTERM.
void GiveOrders(const CommandSpec& spec, const RunControl& control, Clock& clock, int channel,
                Orders& orders) {
  if (!orders.kill_sent && control.kill.stop_requested()) {
    SendOrder(channel, kShimKill);
    orders.kill_sent = true;
    orders.kill_by_token = true;
    orders.kill_at = clock.MonoNow();
  }
  if (!orders.term_sent && !orders.kill_sent && control.stop.stop_requested()) {
    SendOrder(channel, kShimTerminate);
    orders.term_sent = true;
    orders.term_at = clock.MonoNow();
    orders.kill_deadline = orders.term_at + spec.kill_grace;
  }
  if (orders.term_sent && !orders.kill_sent && clock.MonoNow() >= orders.kill_deadline) {
    SendOrder(channel, kShimKill);
    orders.kill_sent = true;
    orders.kill_at = clock.MonoNow();
  }
}

// Reads every report available on `channel`; returns false at end of file (the shim exited).
bool ReadReports(int channel, Reports& reports) {
  for (;;) {
    ShimReport report;
    ssize_t n = recv(channel, &report, sizeof(report), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;
    }
    if (n <= 0) {
      return false;
    }
    if (n != static_cast<ssize_t>(sizeof(report))) {
      continue;
    }
    switch (report.event) {
      case ShimEvent::kStarted:
      case ShimEvent::kStartFailed:
        reports.start = report;
        break;
      case ShimEvent::kExited:
        reports.exit = report;
        break;
      case ShimEvent::kDone:
        reports.done = report;
        break;
    }
  }
}

Status StartFailure(const CommandSpec& spec, const ShimReport& failure) {
  const std::string& program = spec.argv.front();
  switch (failure.step) {
    case ShimStep::kExec:
      return FailedPreconditionError(
          fmt::format("cannot start '{}': {}", program, ErrnoText(failure.error)));
    case ShimStep::kChdir:
      return FailedPreconditionError(fmt::format("cannot start '{}': working directory '{}': {}",
                                                 program, spec.working_directory,
                                                 ErrnoText(failure.error)));
    case ShimStep::kSpawn:
    case ShimStep::kSupervise:
      break;
  }
  return UnavailableError(fmt::format("cannot start '{}': {}", program, ErrnoText(failure.error)));
}

// The outcome of a command that the shim signalled: CANCELLED, saying how it ended.
Status SignalledOutcome(const CommandSpec& spec, const ShimReport& exit, const Orders& orders) {
  const std::string& program = spec.argv.front();
  bool sent_term = (exit.signals & kSentTerm) != 0;
  if ((exit.signals & kSentKill) != 0 && exit.code != CLD_EXITED && exit.status == SIGKILL) {
    if (!orders.kill_by_token) {
      return CancelledError(fmt::format("command '{}' was killed after ignoring SIGTERM for {}",
                                        program, FormatShortDuration(spec.kill_grace)));
    }
    if (sent_term) {
      auto after =
          std::chrono::duration_cast<std::chrono::milliseconds>(orders.kill_at - orders.term_at);
      return CancelledError(
          fmt::format("command '{}' was killed at once (SIGKILL) {} after SIGTERM", program,
                      FormatShortDuration(after)));
    }
    return CancelledError(fmt::format("command '{}' was killed at once (SIGKILL)", program));
  }
  std::string_view first = sent_term ? "SIGTERM" : "SIGKILL";
  if (exit.code == CLD_EXITED) {
    return CancelledError(
        fmt::format("command '{}' exited with code {} after {}", program, exit.status, first));
  }
  if (SignalName(exit.status) == first) {
    return CancelledError(fmt::format("command '{}' ended by {}", program, first));
  }
  return CancelledError(
      fmt::format("command '{}' ended by {} after {}", program, SignalName(exit.status), first));
}

// Reaps the shim; returns a description of its end when it was killed.
std::optional<std::string> ReapShim(pid_t shim) {
  int status = 0;
  while (waitpid(shim, &status, 0) < 0) {
    if (errno != EINTR) {
      return fmt::format("cannot reap it: {}", ErrnoText(errno));
    }
  }
  if (WIFSIGNALED(status)) {
    return fmt::format("killed by {}", SignalName(WTERMSIG(status)));
  }
  return std::nullopt;
}

// Tells the run's report how the command ended and logs the run's one end record, with the
// output's size and last line.
void RecordExit(const CommandSpec& spec, const ShimReport& exit, const OutputSink& sink,
                RunReport* report, Logger& logger) {
  const bool exited = exit.code == CLD_EXITED;
  if (report != nullptr) {
    if (exited) {
      report->SetExitCode(exit.status);
    } else {
      report->SetSignal(exit.status);
    }
  }
  LogFields fields = RunFields(spec);
  fields.emplace_back(exited ? "exit_code" : "signal", std::to_string(exit.status));
  fields.emplace_back("output_bytes", std::to_string(sink.output_bytes()));
  if (!sink.last_line().empty()) {
    fields.emplace_back("last_line", sink.last_line());
  }
  logger.Info(fmt::format("command {}", DescribeExit(exit)), fields);
}

// Maps what the shim reported to the run's Status.
Status Outcome(const CommandSpec& spec, const Reports& reports, const Orders& orders,
               const std::optional<std::string>& shim_end, const OutputSink& sink, Logger& logger) {
  const std::string& program = spec.argv.front();
  if (reports.start && reports.start->event == ShimEvent::kStartFailed) {
    return StartFailure(spec, *reports.start);
  }
  if (!reports.start || !reports.exit || !reports.done) {
    if (reports.start && !reports.exit) {
      // The tree went to the nearest subreaper (this process after BecomeChildSubreaper, or
      // init): end what can still be found, the command's group.
      pid_t pgid = reports.start->pid;
      kill(-pgid, SIGKILL);
      while (waitpid(-pgid, nullptr, 0) > 0 || errno == EINTR) {
      }
    }
    return UnavailableError(fmt::format("command '{}': its supervisor ended early ({})", program,
                                        shim_end.value_or("without a report")));
  }
  const ShimReport& exit = *reports.exit;
  if (exit.signals != 0) {
    return SignalledOutcome(spec, exit, orders);
  }
  if (reports.done->leftovers > 0) {
    LogFields fields = RunFields(spec);
    fields.emplace_back("count", std::to_string(reports.done->leftovers));
    logger.Debug("killed the processes the command left behind", fields);
  }
  if (exit.code == CLD_EXITED && exit.status == 0) {
    return Status::Ok();
  }
  std::string message = fmt::format("command '{}' {}", program, DescribeExit(exit));
  std::string tail = sink.StderrTail();
  if (!tail.empty()) {
    message += "; stderr:\n" + tail;
  }
  return UnavailableError(std::move(message));
}

}  // namespace

bool IsEnvironmentName(std::string_view name) {
  auto is_alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); };
  return !name.empty() && (is_alpha(name.front()) || name.front() == '_') &&
         std::all_of(name.begin(), name.end(),
                     [&](char c) { return is_alpha(c) || (c >= '0' && c <= '9') || c == '_'; });
}

std::vector<std::string> CommandEnvironment(const CommandSpec& spec, const char* const* parent) {
  auto wanted = [&spec](std::string_view name) {
    return name.starts_with(kCommandBaseEnvironmentPrefix) ||
           std::find(kCommandBaseEnvironment.begin(), kCommandBaseEnvironment.end(), name) !=
               kCommandBaseEnvironment.end() ||
           std::find(spec.inherit_env.begin(), spec.inherit_env.end(), name) !=
               spec.inherit_env.end();
  };
  std::map<std::string, std::string, std::less<>> variables;
  for (const char* const* entry = parent; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view kv(*entry);
    std::size_t equals = kv.find('=');
    if (equals == std::string_view::npos || !wanted(kv.substr(0, equals))) {
      continue;
    }
    variables.emplace(kv.substr(0, equals), kv.substr(equals + 1));
  }
  for (const auto& [name, value] : spec.env) {
    variables.insert_or_assign(name, value);
  }
  if (spec.trace.valid()) {
    variables.emplace("TRACEPARENT", FormatTraceparent(spec.trace));
    if (!spec.trace.trace_state.empty()) variables.emplace("TRACESTATE", spec.trace.trace_state);
  }
  variables.emplace("PATH", kDefaultCommandPath);
  if (!spec.task_id.empty()) variables.insert_or_assign("STAGEHAND_TASK_ID", spec.task_id);
  if (!spec.run_id.empty()) variables.insert_or_assign("STAGEHAND_RUN_ID", spec.run_id);
  std::vector<std::string> entries;
  entries.reserve(variables.size());
  for (const auto& [name, value] : variables) {
    entries.push_back(fmt::format("{}={}", name, value));
  }
  return entries;
}

Status RunCommand(const CommandSpec& spec, Logger& logger, Clock& clock,
                  const RunControl& control) {
  if ((control.trace.valid() && !(spec.trace == control.trace)) ||
      (!control.run_id.empty() && spec.run_id != control.run_id)) {
    CommandSpec run = spec;
    if (control.trace.valid()) run.trace = control.trace;
    if (!control.run_id.empty()) run.run_id = control.run_id;
    return RunCommand(run, logger, clock, control);
  }
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
  if (control.stop.stop_requested() || control.kill.stop_requested()) {
    return CancelledError(fmt::format("command '{}' not started", program));
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
  std::array<int, 2> pair{};
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair.data()) != 0) {
    return UnavailableError(fmt::format("cannot create a socket pair: {}", ErrnoText(errno)));
  }
  Fd channel(pair[0]);
  Fd shim_channel(pair[1]);
  Fd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    return UnavailableError(fmt::format("cannot create an eventfd: {}", ErrnoText(errno)));
  }
  STAGEHAND_ASSIGN_OR_RETURN(pid_t shim,
                             ForkShim(spec, shim_channel.get(), out_write.get(), err_write.get()));
  shim_channel.Reset();
  out_write.Reset();
  err_write.Reset();

  int wake_fd = wake.get();
  auto wake_up = [wake_fd] {
    std::uint64_t one = 1;
    if (write(wake_fd, &one, sizeof(one)) < 0) {
      // The counter is already non-zero; the poller will wake anyway.
    }
  };
  std::stop_callback on_stop(control.stop, wake_up);
  std::stop_callback on_kill(control.kill, wake_up);

  OutputSink sink(spec, logger, control.report.get());
  Orders orders;
  Reports reports;
  bool shim_running = true;
  while (shim_running) {
    GiveOrders(spec, control, clock, channel.get(), orders);
    StreamPoll poll_set(streams, {channel.get(), wake_fd});
    // During the grace the deadline is read from `clock` in slices, so that a ManualClock drives
    // it too.
    int timeout_ms = orders.term_sent && !orders.kill_sent ? kGraceSliceMs : -1;
    if (poll_set.Wait(timeout_ms) <= 0) {
      continue;
    }
    poll_set.ReadStreams(sink);
    if ((poll_set.OtherEvents(1) & POLLIN) != 0) {
      std::uint64_t counter = 0;
      if (read(wake_fd, &counter, sizeof(counter)) < 0) {
        // Another wake-up already reset it.
      }
    }
    if (poll_set.OtherEvents(0) != 0) {
      bool started = reports.start.has_value();
      shim_running = ReadReports(channel.get(), reports);
      if (!started && reports.start && reports.start->event == ShimEvent::kStarted) {
        LogFields fields = RunFields(spec);
        fields.emplace_back("pid", std::to_string(reports.start->pid));
        logger.Debug("command started", fields);
      }
    }
  }
  std::optional<std::string> shim_end = ReapShim(shim);
  DrainAfterExit(streams, sink, wake_fd);
  if (reports.exit) {
    RecordExit(spec, *reports.exit, sink, control.report.get(), logger);
  }
  return Outcome(spec, reports, orders, shim_end, sink, logger);
}

Status RunCommand(const CommandSpec& spec, Logger& logger, Clock& clock,
                  const std::stop_token& stop) {
  return RunCommand(spec, logger, clock, RunControl{stop, std::stop_token()});
}

Status BecomeChildSubreaper() {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1UL, 0UL, 0UL, 0UL) != 0) {
    return UnavailableError(fmt::format("cannot become a child subreaper: {}", ErrnoText(errno)));
  }
  return Status::Ok();
}

Status HideProcessFromCommands() {
  if (prctl(PR_SET_DUMPABLE, 0UL, 0UL, 0UL, 0UL) != 0) {
    return UnavailableError(
        fmt::format("cannot make the process non-dumpable: {}", ErrnoText(errno)));
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
      [spec = std::move(spec), logger = std::move(logger), &clock](const RunControl& control) {
        return RunCommand(spec, *logger, clock, control);
      });
}

}  // namespace stagehand
