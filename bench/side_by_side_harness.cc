#include "side_by_side_harness.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "engine_bench_support.h"

namespace stagehand::bench {

namespace {

// ---------------------------------------------------------------------------------------------
// Multi-process scenarios. A worker is this program with --worker=KIND: one PluginScheduler on the
// driver's database, commands on stdin (one word a line), events on stdout (one JSON object a
// line, instants as CLOCK_MONOTONIC nanoseconds, which every process on the host shares).

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Steady::now().time_since_epoch())
      .count();
}

double NsToMs(int64_t ns) { return static_cast<double>(ns) / 1e6; }

// Events of all workers of a scenario, keyed "<event>" or "<event>:<id>".
class EventBoard {
 public:
  void Add(const Json& event) {
    std::string key = event.value("event", "");
    if (event.contains("id")) key += ":" + event["id"].get<std::string>();
    std::lock_guard lock(mu_);
    seen_[key].push_back(event);
    cv_.notify_all();
  }
  size_t Count(const std::string& key) {
    std::lock_guard lock(mu_);
    return seen_[key].size();
  }
  // The n-th (1-based) event of `key`, or nullopt after `timeout`.
  std::optional<Json> Wait(const std::string& key, size_t n, milliseconds timeout) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return seen_[key].size() >= n; })) return std::nullopt;
    return seen_[key][n - 1];
  }
  Json MustWait(const std::string& key, size_t n, milliseconds timeout) {
    std::optional<Json> event = Wait(key, n, timeout);
    if (!event) Backend::Die("timed out waiting for " + key + " #" + std::to_string(n));
    return *event;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<Json>> seen_;
};

// A worker process; its stdout lines go to the board. Destroying it asks it to quit and reaps it.
class WorkerProcess {
 public:
  WorkerProcess(const WorkerArgs& worker, EventBoard& board) {
    std::vector<std::string> args = {"engine_bench",
                                     "--worker=" + worker.kind,
                                     "--db=" + worker.db,
                                     "--database=" + worker.database,
                                     "--tasks=" + std::to_string(worker.tasks),
                                     "--width=" + std::to_string(worker.width),
                                     "--timeout=" + std::to_string(worker.timeout_s),
                                     "--index=" + std::to_string(worker.index),
                                     "--cadence=" + std::to_string(worker.cadence_ms)};
    if (g_trace) args.emplace_back("--trace");
    int to_child[2];
    int from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) Backend::Die("pipe failed");
    pid_ = fork();
    if (pid_ < 0) Backend::Die("fork failed");
    if (pid_ == 0) {
      dup2(to_child[0], STDIN_FILENO);
      dup2(from_child[1], STDOUT_FILENO);
      close(to_child[0]);
      close(to_child[1]);
      close(from_child[0]);
      close(from_child[1]);
      std::vector<char*> argv;
      for (std::string& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execv("/proc/self/exe", argv.data());
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    to_ = fdopen(to_child[1], "w");
    reader_ = std::thread([fd = from_child[0], &board] {
      FILE* in = fdopen(fd, "r");
      char* line = nullptr;
      size_t capacity = 0;
      while (getline(&line, &capacity, in) > 0) {
        Json event = Json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (!event.is_discarded()) board.Add(event);
      }
      free(line);  // NOLINT(cppcoreguidelines-no-malloc): getline's buffer
      fclose(in);
    });
  }
  ~WorkerProcess() {
    if (!killed_) Send("quit");
    if (to_ != nullptr) fclose(to_);
    int status = 0;
    waitpid(pid_, &status, 0);
    reader_.join();
  }
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  void Send(const std::string& command) {
    std::fputs((command + "\n").c_str(), to_);
    std::fflush(to_);
  }
  void Kill() {
    ::kill(pid_, SIGKILL);
    killed_ = true;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  std::thread reader_;
  bool killed_ = false;
};

// Worker side: the events it prints.
class Emitter {
 public:
  void Emit(const Json& event) {
    const std::string line = event.dump() + "\n";
    std::lock_guard lock(mu_);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
  }

 private:
  std::mutex mu_;
};

// Blocks until `stop` is requested.
void WaitForStop(std::stop_token stop) {
  std::mutex mu;
  std::condition_variable_any cv;
  std::unique_lock lock(mu);
  cv.wait(lock, stop, [] { return false; });
}

}  // namespace

int RunWorker(const std::string& url, const WorkerArgs& args) {
  Emitter out;
  auto backend = Backend::ExistingServer(url, args.database);
  auto scheduler = backend->Scheduler(EngineOptions{});
  std::mutex runs_mu;
  std::vector<int64_t> runs;  // task index, start, end; flattened
  if (args.kind == "manual" || args.kind == "blocking") {
    const bool blocking = args.kind == "blocking";
    std::vector<TaskDefinition> tasks;
    for (int i = 0; i < args.width; ++i) {
      const std::string id = "manual-" + std::to_string(i);
      tasks.push_back(Global(id, ManualFrequency{}, [&out, id, blocking](std::stop_token stop) {
        out.Emit({{"event", "start"}, {"id", id}, {"ns", NowNs()}});
        if (!blocking) return;
        WaitForStop(stop);
        out.Emit({{"event", "stop"}, {"id", id}, {"ns", NowNs()}});
      }));
    }
    MustOk(scheduler->ScheduleTasks(std::move(tasks)), "register");
    out.Emit({{"event", "ready"}});
  } else if (args.kind == "idle") {
    const double ms = Register(*scheduler, YearlyTasks(args.tasks), /*batch=*/true);
    out.Emit({{"event", "ready"}, {"registration_ms", ms}});
  } else if (args.kind == "throughput") {
    std::vector<TaskDefinition> tasks;
    for (int i = 0; i < args.tasks; ++i) {
      tasks.push_back(Global("t-" + std::to_string(i), milliseconds(args.cadence_ms),
                             [&runs_mu, &runs, i](std::stop_token) {
                               const int64_t start = NowNs();
                               const int64_t end = NowNs();
                               std::lock_guard lock(runs_mu);
                               runs.insert(runs.end(), {i, start, end});
                             }));
    }
    MustOk(scheduler->ScheduleTasks(std::move(tasks)), "register");
    out.Emit({{"event", "ready"}});
  } else if (args.kind == "kill") {
    TaskDefinition task = Global("victim", milliseconds(1000), [&out, &args](std::stop_token stop) {
      out.Emit({{"event", "owner"}, {"index", args.index}, {"ns", NowNs()}});
      WaitForStop(stop);
    });
    task.timeout = milliseconds(seconds(args.timeout_s));
    MustOk(scheduler->ScheduleTask(std::move(task)), "register");
    out.Emit({{"event", "ready"}});
  } else {
    Backend::Die("unknown worker kind " + args.kind);
  }
  double cpu_begin = 0;
  for (std::string command; std::getline(std::cin, command) && command != "quit";) {
    if (command == "measure_begin") {
      cpu_begin = CpuMs();
      out.Emit({{"event", "measuring"}});
    } else if (command == "measure_end") {
      out.Emit({{"event", "measured"},
                {"cpu_ms", CpuMs() - cpu_begin},
                {"rss_mb", static_cast<double>(RssKb()) / 1024.0}});
    } else if (command == "report") {
      std::lock_guard lock(runs_mu);
      out.Emit({{"event", "runs"}, {"runs", runs}});
    }
  }
  scheduler->Shutdown();
  return 0;
}

namespace {

// Sizes of the side-by-side scenarios (bench/backstage-peer/peer.js uses the same).
struct SideBySide {
  int triggers = 50;
  int across = 50;
  int cancels = 20;
  int width = 1;
  int cron_seconds = 30;
  int interval_seconds = 30;
  std::vector<int> idle_tasks = {1000, 10000};
  int idle_seconds = 60;
  int processes = 4;
  int tasks = 500;
  int throughput_seconds = 30;
  int saturation_cadence_ms = 1;
  int kill_timeout_s = 30;
  int kill_limit_s = 300;
};

int64_t NsOf(const Json& event) { return event["ns"].get<int64_t>(); }

// A worker of `kind` on `backend`'s database.
WorkerArgs WorkerOn(const Backend& backend, std::string kind) {
  WorkerArgs args;
  args.kind = std::move(kind);
  args.database = backend.database();
  args.db = KindOfUrl(backend.url()) == ServerKind::kMySql ? "mysql" : "postgres";
  return args;
}

// Trigger (or trigger then cancel) on this process's scheduler of tasks registered only in a
// worker process.
Json AcrossProcesses(const std::string& url, const SideBySide& sizes, bool cancel) {
  auto backend = Backend::Server(url);
  auto a = backend->Scheduler(EngineOptions{});
  EventBoard board;
  std::vector<double> latencies;
  {
    WorkerArgs args = WorkerOn(*backend, cancel ? "blocking" : "manual");
    args.width = 1;
    WorkerProcess b(args, board);
    board.MustWait("ready", 1, seconds(60));
    const int samples = cancel ? sizes.cancels : sizes.across;
    for (int i = 1; i <= samples; ++i) {
      const size_t n = static_cast<size_t>(i);
      const int64_t triggered = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    TriggerWhenIdle(*a, "manual-0").time_since_epoch())
                                    .count();
      const Json started = board.MustWait("start:manual-0", n, seconds(60));
      if (!cancel) {
        latencies.push_back(NsToMs(NsOf(started) - triggered));
        continue;
      }
      const int64_t cancelled = NowNs();
      MustOk(a->CancelTask("manual-0"), "cancel");
      const Json stopped = board.MustWait("stop:manual-0", n, seconds(60));
      latencies.push_back(NsToMs(NsOf(stopped) - cancelled));
    }
  }
  a->Shutdown();
  return PercentilesWithSlowest(latencies);
}

// A global task every second for `duration`: runs and the spacing of their starts.
Json IntervalOneSecond(const std::string& url, seconds duration) {
  auto backend = Backend::Server(url);
  std::mutex mu;
  std::vector<int64_t> starts;
  auto scheduler = backend->Scheduler(EngineOptions{});
  MustOk(scheduler->ScheduleTask(Global("interval", milliseconds(1000),
                                        [&](std::stop_token) {
                                          std::lock_guard lock(mu);
                                          starts.push_back(NowNs());
                                        })),
         "register");
  std::this_thread::sleep_for(duration);
  scheduler->Shutdown();
  std::vector<double> spacing;
  for (size_t i = 1; i < starts.size(); ++i) spacing.push_back(NsToMs(starts[i] - starts[i - 1]));
  Json out;
  out["seconds"] = duration.count();
  out["runs"] = starts.size();
  out["spacing"] = Percentiles(spacing);
  return out;
}

// `tasks` idle tasks registered in a fresh worker process; statements, CPU and RSS of that
// process over `idle` seconds.
Json IdleProcess(const std::string& url, int tasks, seconds idle) {
  auto backend = Backend::Server(url);
  backend->Open();
  Admin admin(url);
  EventBoard board;
  WorkerArgs args = WorkerOn(*backend, "idle");
  args.tasks = tasks;
  WorkerProcess worker(args, board);
  const Json ready = board.MustWait("ready", 1, seconds(120));
  std::this_thread::sleep_for(seconds(2));
  const double calls_before = admin.Statements(backend->database());
  worker.Send("measure_begin");
  board.MustWait("measuring", 1, seconds(60));
  const auto begin = Steady::now();
  std::this_thread::sleep_for(idle);
  worker.Send("measure_end");
  const Json measured = board.MustWait("measured", 1, seconds(60));
  const double idle_s = std::chrono::duration<double>(Steady::now() - begin).count();
  const double calls_after = admin.Statements(backend->database());
  Json out;
  out["tasks"] = tasks;
  out["registration_ms"] = ready["registration_ms"];
  out["idle_seconds"] = idle_s;
  out["statements_per_s"] = (calls_after - calls_before) / idle_s;
  out["cpu_ms_per_s"] = measured["cpu_ms"].get<double>() / idle_s;
  out["rss_mb"] = measured["rss_mb"];
  return out;
}

// CPU seconds (user + system) used so far by the process `pid`, from /proc; 0 when it is gone.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t after_name = text.rfind(')');
  if (after_name == std::string::npos) return 0;
  std::istringstream fields(text.substr(after_name + 2));
  std::string field;
  double ticks = 0;
  // Fields 3.. after the name: state is the first; utime and stime are the 12th and 13th.
  for (int index = 0; index < 13 && fields >> field; ++index) {
    if (index >= 11) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The pids of every running process named `name` (its /proc/<pid>/comm).
std::vector<pid_t> ProcessesNamed(const std::string& name) {
  std::vector<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string file = entry.path().filename().string();
    if (file.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream comm(entry.path() / "comm");
    std::string comm_name;
    if (std::getline(comm, comm_name) && comm_name == name) pids.push_back(std::stoi(file));
  }
  return pids;
}

// Busy and total CPU ticks of the whole machine so far (/proc/stat's first line).
std::pair<double, double> MachineTicks() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  stat >> cpu;
  double busy = 0;
  double total = 0;
  for (int index = 0; index < 8; ++index) {
    double value = 0;
    stat >> value;
    total += value;
    if (index != 3 && index != 4) busy += value;  // idle and iowait are not busy
  }
  return {busy, total};
}

// Where the CPU goes during a window: the engine processes', the database server's (all its
// processes: `server` names them, postgres or mariadbd) and the whole machine's share, each in %
// of one core. The server's share is reported as postgres_pct or mariadbd_pct.
class CpuShares {
 public:
  CpuShares(std::vector<pid_t> engines, std::string server)
      : engines_(std::move(engines)),
        server_(std::move(server)),
        server_pids_(ProcessesNamed(server_)) {
    engines_before_ = Sum(engines_);
    server_before_ = Sum(server_pids_);
    machine_before_ = MachineTicks();
    begin_ = Steady::now();
  }
  Json End() const {
    const double seconds = std::chrono::duration<double>(Steady::now() - begin_).count();
    const auto machine = MachineTicks();
    const double cores = static_cast<double>(std::thread::hardware_concurrency());
    const double total = machine.second - machine_before_.second;
    Json out;
    out["engines_pct"] = 100 * (Sum(engines_) - engines_before_) / seconds;
    out[server_ + "_pct"] = 100 * (Sum(server_pids_) - server_before_) / seconds;
    out["machine_busy_pct"] =
        total > 0 ? 100 * cores * (machine.first - machine_before_.first) / total : 0.0;
    out["cores"] = static_cast<int>(cores);
    return out;
  }

 private:
  static double Sum(const std::vector<pid_t>& pids) {
    double sum = 0;
    for (const pid_t pid : pids) sum += ProcessCpuSeconds(pid);
    return sum;
  }
  std::vector<pid_t> engines_;
  std::string server_;
  std::vector<pid_t> server_pids_;
  double engines_before_ = 0;
  double server_before_ = 0;
  std::pair<double, double> machine_before_;
  Steady::time_point begin_;
};

// Calls of the store's batched claims (claim_many) or releases (release_many) in `database`
// and the rows they returned, from pg_stat_statements. Each call returns one row per claimed or
// released task plus one that carries the clock.
struct BatchCount {
  double calls = 0;
  double rows = 0;
};
BatchCount CountBatches(Admin& admin, const std::string& database, std::string_view marker) {
  const std::string where =
      " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
      "WHERE d.datname = '" +
      database + "' AND s.query LIKE '%" + std::string(marker) + "%'";
  const std::string calls = admin.Scalar("SELECT coalesce(sum(calls), 0)" + where);
  const std::string rows = admin.Scalar("SELECT coalesce(sum(rows), 0)" + where);
  return BatchCount{calls.empty() ? 0 : std::stod(calls), rows.empty() ? 0 : std::stod(rows)};
}

// The batch statements' calls between two counts and the tasks per call.
Json BatchFigures(const BatchCount& before, const BatchCount& after) {
  const double calls = after.calls - before.calls;
  Json out;
  out["calls"] = calls;
  out["tasks_per_call"] = calls > 0 ? (after.rows - before.rows) / calls - 1 : 0.0;
  return out;
}

// `processes` workers, each registering the same `tasks` global tasks every `cadence`: completed
// runs per second over `duration` once all are registered, overlapping runs of one task, and the
// sizes of the batched claims and releases the engines sent meanwhile.
Json Throughput(const std::string& url, int processes, int tasks, milliseconds cadence,
                seconds duration) {
  auto backend = Backend::Server(url);
  backend->Open();
  Admin admin(url);
  // Texts only the batched statements have (src/store/postgres/statements.cc).
  constexpr std::string_view kClaimMany = "FOR UPDATE OF t SKIP LOCKED";
  constexpr std::string_view kReleaseMany = "released AS (";
  EventBoard board;
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int i = 0; i < processes; ++i) {
    WorkerArgs args = WorkerOn(*backend, "throughput");
    args.tasks = tasks;
    args.cadence_ms = static_cast<int>(cadence.count());
    workers.push_back(std::make_unique<WorkerProcess>(args, board));
  }
  board.MustWait("ready", static_cast<size_t>(processes), seconds(120));
  // The batch sizes come from pg_stat_statements: PostgreSQL only.
  const bool postgres = KindOfUrl(url) == ServerKind::kPostgres;
  const auto batches = [&](std::string_view marker) {
    return postgres ? CountBatches(admin, backend->database(), marker) : BatchCount{};
  };
  const BatchCount claims_before = batches(kClaimMany);
  const BatchCount releases_before = batches(kReleaseMany);
  std::vector<pid_t> engine_pids;
  for (const auto& worker : workers) engine_pids.push_back(worker->pid());
  const CpuShares cpu(engine_pids, postgres ? "postgres" : "mariadbd");
  const int64_t begin = NowNs();
  std::this_thread::sleep_for(duration);
  const int64_t end = NowNs();
  const Json cpu_shares = cpu.End();
  const BatchCount claims_after = batches(kClaimMany);
  const BatchCount releases_after = batches(kReleaseMany);
  for (auto& worker : workers) worker->Send("report");
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> by_task;
  int64_t completed = 0;
  Json per_process = Json::array();
  for (int p = 1; p <= processes; ++p) {
    const Json report = board.MustWait("runs", static_cast<size_t>(p), seconds(60));
    const auto runs = report["runs"].get<std::vector<int64_t>>();
    int64_t mine = 0;
    for (size_t i = 0; i + 2 < runs.size(); i += 3) {
      by_task[runs[i]].emplace_back(runs[i + 1], runs[i + 2]);
      if (runs[i + 2] >= begin && runs[i + 2] <= end) ++mine;
    }
    completed += mine;
    per_process.push_back(mine);
  }
  workers.clear();
  int overlaps = 0;
  for (auto& [task, intervals] : by_task) {
    std::sort(intervals.begin(), intervals.end());
    for (size_t i = 1; i < intervals.size(); ++i) {
      if (intervals[i].first < intervals[i - 1].second) ++overlaps;
    }
  }
  const double seconds_measured = NsToMs(end - begin) / 1000.0;
  Json out;
  out["processes"] = processes;
  out["tasks"] = tasks;
  out["cadence_ms"] = cadence.count();
  out["seconds"] = seconds_measured;
  out["completed_runs"] = completed;
  out["runs_per_s"] = static_cast<double>(completed) / seconds_measured;
  out["runs_per_process"] = per_process;
  out["overlaps"] = overlaps;
  if (postgres) {
    out["claim_many"] = BatchFigures(claims_before, claims_after);
    out["release_many"] = BatchFigures(releases_before, releases_after);
  }
  out["cpu"] = cpu_shares;
  return out;
}

// Two workers register one global task (every second, `timeout_s` timeout, runs until stopped);
// the one running it is SIGKILLed; seconds until the other starts it.
Json SigkillTakeover(const std::string& url, int timeout_s, int limit_s) {
  auto backend = Backend::Server(url);
  backend->Open();
  EventBoard board;
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int i = 0; i < 2; ++i) {
    WorkerArgs args = WorkerOn(*backend, "kill");
    args.timeout_s = timeout_s;
    args.index = i;
    workers.push_back(std::make_unique<WorkerProcess>(args, board));
  }
  board.MustWait("ready", 2, seconds(60));
  const Json first = board.MustWait("owner", 1, seconds(60));
  std::this_thread::sleep_for(seconds(1));
  const int victim = first["index"].get<int>();
  const int64_t killed = NowNs();
  workers[static_cast<size_t>(victim)]->Kill();
  Json out;
  out["timeout_s"] = timeout_s;
  if (std::optional<Json> next = board.Wait("owner", 2, seconds(limit_s))) {
    out["takeover_s"] = NsToMs(NsOf(*next) - killed) / 1000.0;
    out["taken_over_by_other"] = (*next)["index"].get<int>() != victim;
  } else {
    out["takeover_s"] = nullptr;
    out["limit_s"] = limit_s;
  }
  workers.clear();
  return out;
}

}  // namespace

// The scenarios compared with Backstage (bench/backstage-peer/peer.js), under the same JSON keys;
// `only` (when not empty) selects some: trigger, across, cancel, cron, interval, idle,
// throughput, saturation, kill.
int RunSideBySide(const std::string& url, const std::set<std::string>& only, bool smoke,
                  const std::string& out_file) {
  SideBySide sizes;
  if (smoke) {
    sizes.triggers = 1;
    sizes.across = 1;
    sizes.cancels = 1;
    sizes.cron_seconds = 2;
    sizes.interval_seconds = 2;
    sizes.idle_tasks = {50};
    sizes.idle_seconds = 1;
    sizes.processes = 2;
    sizes.tasks = 20;
    sizes.throughput_seconds = 2;
    sizes.kill_timeout_s = 2;
    sizes.kill_limit_s = 60;
  }
  Json results;
  results["system"] = "stagehand";
  results["smoke"] = smoke;
  auto run = [&](const std::string& name, const std::string& key, const std::function<Json()>& fn) {
    if (!only.empty() && only.count(name) == 0) return;
    const auto begin = Steady::now();
    std::cerr << "engine_bench: " << key << "...\n";
    results[key] = fn();
    std::cerr << "engine_bench: " << key << " done in "
              << std::chrono::duration<double>(Steady::now() - begin).count() << " s\n";
  };
  run("trigger", "in_process_trigger",
      [&] { return InProcessTrigger(*Backend::Server(url), sizes.triggers); });
  run("across", "trigger_across_processes",
      [&] { return AcrossProcesses(url, sizes, /*cancel=*/false); });
  run("cancel", "cancel_across_processes",
      [&] { return AcrossProcesses(url, sizes, /*cancel=*/true); });
  run("cron", "cron_every_second",
      [&] { return CronEverySecond(*Backend::Server(url), seconds(sizes.cron_seconds)); });
  run("interval", "interval_one_second",
      [&] { return IntervalOneSecond(url, seconds(sizes.interval_seconds)); });
  for (const int tasks : sizes.idle_tasks) {
    run("idle", "idle_tasks_" + std::to_string(tasks),
        [&] { return IdleProcess(url, tasks, seconds(sizes.idle_seconds)); });
  }
  // MySQL keeps whole seconds, so the finest cadence a task there can keep is a second.
  const milliseconds cadence(KindOfUrl(url) == ServerKind::kMySql ? 1000 : 100);
  run("throughput", "throughput", [&] {
    return Throughput(url, sizes.processes, sizes.tasks, cadence,
                      seconds(sizes.throughput_seconds));
  });
  run("saturation", "throughput_saturated", [&] {
    return Throughput(url, sizes.processes, sizes.tasks, milliseconds(sizes.saturation_cadence_ms),
                      seconds(sizes.throughput_seconds));
  });
  run("kill", "sigkill_takeover",
      [&] { return SigkillTakeover(url, sizes.kill_timeout_s, sizes.kill_limit_s); });
  const std::string text = results.dump(2);
  std::cout << text << "\n";
  if (!out_file.empty()) std::ofstream(out_file) << text << "\n";
  return 0;
}

}  // namespace stagehand::bench
