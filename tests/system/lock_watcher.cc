// The system suite's run-lock watcher: dates the death of each run's last process for the checker.
//
//   stagehand_system_lock_watcher <locks-dir> <sink-file>
//
// The probes (probe.cc) each hold an exclusive flock(2) on `<locks-dir>/<run-id>.lock`, renamed
// into place once locked and shared by every process of the run. This program learns of each new
// lock through inotify, opens it and blocks in flock(2) on a thread of its own; when flock
// returns, the run's last process is dead, and the thread appends
// `<CLOCK_MONOTONIC ns> gone <host> <run-id> <task-id> dead` to the sink at once. Its threads run
// at realtime priority (SCHED_FIFO, when the user may) and never block on anything else, so a
// death is dated within microseconds even while the fleet keeps every CPU busy; the interpreter
// threads of the harness were found tens of milliseconds late there, which the checker counted as
// overlaps. A run already dead when its lock is opened is dated then (later than the truth, never
// earlier).
//
// It talks to the harness (harness.py, TreeWatcher) through lines:
//   stdout  `ready` once it watches the directory; `live <lock> <host> <run-id> <task-id>` once a
//           thread waits on a lock; `dead <lock>` once that lock is free and its `gone` line
//           written; in answer to `finish`, `survivor <lock> <run-id>` for each run whose lock is
//           still held, then `finished`.
//   stdin   `finish` (once the daemons have stopped): appends `gone ... survivor` for every run
//           whose lock is still held, at once and before answering, so the runs the harness then
//           kills are never recorded as ordinary deaths; it first looks at the directory again and
//           waits until every lock found is open, so no run is missed because its lock was renamed
//           into place an instant before or because the harness had not yet read its `live` line.
// It exits when stdin closes.

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "event_clock.h"

namespace {

using stagehand_system::MonoNs;

void WriteLine(int fd, const std::string& line) {
  const char* data = line.data();
  std::size_t size = line.size();
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

bool IsLockName(const std::string& name) {
  return name.size() > 5 && name.compare(name.size() - 5, 5, ".lock") == 0;
}

struct Run {
  std::string host;
  std::string run_id;
  std::string task;
};

class Watcher {
 public:
  Watcher(std::string directory, int sink) : directory_(std::move(directory)), sink_(sink) {}

  // Starts a waiting thread for `name` unless one was started before.
  void Found(const std::string& name) {
    {
      std::lock_guard lock(mu_);
      if (!IsLockName(name) || !seen_.insert(name).second) return;
      ++opening_;
    }
    std::thread([this, name] { Wait(name); }).detach();
  }

  // Calls Found for every entry of the directory: the locks already there, and any whose inotify
  // event is not read yet.
  void Scan() {
    DIR* dir = opendir(directory_.c_str());
    if (dir == nullptr) return;
    while (const dirent* entry = readdir(dir)) Found(entry->d_name);
    closedir(dir);
  }

  // Records `gone ... survivor` for every run whose lock is still held and names them, then says
  // `finished`. Every lock in the directory counts, however recently it was renamed into place:
  // the waiting threads of all of them have opened their lock first.
  void Finish() {
    Scan();
    std::unique_lock lock(mu_);
    opened_.wait(lock, [this] { return opening_ == 0; });
    const std::int64_t now = MonoNs();
    for (const auto& [name, run] : live_) {
      RecordLocked(now, run, "survivor");
      Say("survivor " + name + " " + run.run_id);
    }
    Say("finished");
  }

  // Queues `line` for stdout: a waiting thread never blocks on the harness reading its pipe.
  void Say(const std::string& line) {
    {
      std::lock_guard lock(out_mu_);
      out_.push_back(line + "\n");
    }
    out_cv_.notify_one();
  }

  // Writes the queued lines to stdout, forever; run on a thread of its own.
  void WriteOut() {
    std::unique_lock lock(out_mu_);
    for (;;) {
      out_cv_.wait(lock, [this] { return !out_.empty(); });
      std::string line = std::move(out_.front());
      out_.pop_front();
      lock.unlock();
      WriteLine(STDOUT_FILENO, line);
      lock.lock();
    }
  }

 private:
  void Wait(const std::string& name) {
    const std::string path = directory_ + "/" + name;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    Run run;
    bool valid = false;
    if (fd >= 0) {
      char text[512] = {};
      const ssize_t n = pread(fd, text, sizeof text - 1, 0);
      std::istringstream fields(std::string(text, n > 0 ? static_cast<std::size_t>(n) : 0));
      std::string extra;
      valid = (fields >> run.host >> run.run_id >> run.task) && !(fields >> extra);
    }
    {
      std::lock_guard lock(mu_);
      if (valid) live_[name] = run;
      --opening_;
    }
    opened_.notify_all();
    if (!valid) {
      if (fd >= 0) close(fd);
      return;
    }
    Say("live " + name + " " + run.host + " " + run.run_id + " " + run.task);
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
    const std::int64_t now = MonoNs();
    {
      std::lock_guard lock(mu_);
      RecordLocked(now, run, "dead");
      live_.erase(name);
    }
    close(fd);
    unlink(path.c_str());
    Say("dead " + name);
  }

  void RecordLocked(std::int64_t ns, const Run& run, const char* kind) {
    if (!recorded_.insert(run.run_id).second) return;
    WriteLine(sink_, std::to_string(ns) + " gone " + run.host + " " + run.run_id + " " + run.task +
                         " " + kind + "\n");
  }

  const std::string directory_;
  const int sink_;
  std::mutex mu_;
  std::condition_variable opened_;   // signalled as each thread has opened and read its lock
  std::set<std::string> seen_;       // lock names with a thread; guarded by mu_
  int opening_ = 0;                  // threads not yet past opening their lock; guarded by mu_
  std::map<std::string, Run> live_;  // lock name -> run whose lock is held; guarded by mu_
  std::set<std::string> recorded_;   // run ids with a `gone` line; guarded by mu_
  std::mutex out_mu_;
  std::condition_variable out_cv_;
  std::deque<std::string> out_;  // lines for stdout; guarded by out_mu_
};

void WatchDirectory(int inotify, Watcher& watcher) {
  alignas(inotify_event) char buffer[16384];
  for (;;) {
    const ssize_t n = read(inotify, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    for (ssize_t at = 0; at < n;) {
      const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);  // NOLINT
      if (event->len > 0) watcher.Found(event->name);
      at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <locks-dir> <sink-file>\n", argv[0]);
    return 2;
  }
  const std::string directory = argv[1];
  const int sink = open(argv[2], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  const int inotify = inotify_init1(IN_CLOEXEC);
  if (sink < 0 || inotify < 0 ||
      inotify_add_watch(inotify, directory.c_str(), IN_MOVED_TO | IN_CREATE) < 0) {
    std::perror("stagehand_system_lock_watcher");
    return 1;
  }
  // The instrument must not be late because the fleet under test keeps the CPUs busy: its threads
  // (which inherit the policy) preempt every ordinary process when the kernel wakes them, and
  // only ever run briefly.
  sched_param realtime{};
  realtime.sched_priority = 1;
  if (sched_setscheduler(0, SCHED_FIFO, &realtime) != 0) {
    std::perror(
        "stagehand_system_lock_watcher: warning: no realtime priority (sched_setscheduler), so a "
        "busy machine can make the dates of deaths late");
  }
  // Never destroyed: the detached threads use it until the process ends.
  auto* watcher = new Watcher(directory, sink);
  std::thread([watcher] { watcher->WriteOut(); }).detach();
  std::thread([inotify, watcher] { WatchDirectory(inotify, *watcher); }).detach();
  watcher->Scan();
  watcher->Say("ready");
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "finish") watcher->Finish();
  }
  return 0;
}
