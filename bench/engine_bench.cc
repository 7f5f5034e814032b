// Latency and idle-cost figures of the scheduling engine in real time, against the product's
// targets: in-process trigger to start (SQLite and PostgreSQL), trigger and cancel across two
// schedulers over PostgreSQL, cron every second, 10,000 idle global tasks, and the registration of
// 1,000 and 10,000 tasks (batch and one by one) on SQLite and PostgreSQL.
// The side-by-side scenarios of scripts/bench (the same as bench/backstage-peer/peer.js runs on
// Backstage's scheduler, with the same JSON keys) use worker processes of this program
// (--worker=KIND), each with its own PluginScheduler on the same PostgreSQL database and the
// engine's default options: trigger and cancel from this process to a worker, a 1 s interval,
// idle tasks in a fresh process, 4 processes x 500 tasks every 100 ms, the same 2,000 tasks due
// continuously (1 ms cadence: the engine's own limit, beside pgbench's), and a SIGKILLed owner.
// A plain program (not Google Benchmark: each figure is a distribution of event latencies, not a
// loop rate). Prints one JSON document; also writes it to --benchmark_out=FILE (scripts/bench).
// PostgreSQL scenarios use STAGEHAND_TEST_POSTGRES_URL and are skipped when it is unset.
//
//   engine_bench [--scenarios=trigger,across,cancel,cron,idle,idle_sqlite,register,
//                             across_processes,cancel_processes,interval,idle_processes,
//                             throughput,saturation,kill]
//                [--cron_seconds=10]
//                [--idle_tasks=10000] [--idle_seconds=10] [--trace]
//                [--side_by_side] [--smoke]
// --side_by_side selects the scenarios that scripts/bench compares with Backstage, at the issue's
// sizes (cron for 30 s); --smoke shrinks every count and duration to seconds.
#include <postgresql/libpq-fe.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "stagehand/base/logger.h"
#include "stagehand/base/uuid.h"
#include "stagehand/service/plugin_scheduler.h"
#include "stagehand/store/postgres_task_store.h"
#include "stagehand/store/sqlite_task_store.h"
#include "stagehand/time/clock.h"

namespace stagehand {
namespace {

using Steady = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kPluginId[] = "enginebench";

// With --trace, the schedulers log at debug level to stderr, each line prefixed with the
// microseconds since the program started (to see where a slow sample spent its time).
bool g_trace = false;
const Steady::time_point g_program_start = Steady::now();

class TraceLogger final : public Logger {
 public:
  void Log(LogLevel level, std::string_view message, const LogFields& fields) override {
    std::string line = std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(
                                          Steady::now() - g_program_start)
                                          .count()) +
                       " " + std::string(LogLevelName(level)) + " " + std::string(message);
    for (const auto& [key, value] : fields) line += " " + key + "=" + value;
    std::lock_guard lock(mu_);
    std::cerr << line << "\n";
  }
  bool Enabled(LogLevel) const override { return true; }

 private:
  std::mutex mu_;
};

void Trace(std::string_view message) {
  static const auto logger = std::make_shared<TraceLogger>();
  if (g_trace) logger->Debug(message);
}

double Ms(std::chrono::nanoseconds d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// p50, p99 and max of latencies in milliseconds.
Json Percentiles(std::vector<double> values) {
  Json out;
  out["n"] = values.size();
  if (values.empty()) return out;
  const std::vector<double> samples = values;
  std::sort(values.begin(), values.end());
  auto at = [&](double q) {
    const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
    return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)];
  };
  out["p50_ms"] = at(0.50);
  out["p99_ms"] = at(0.99);
  out["max_ms"] = values.back();
  out["samples_ms"] = samples;
  return out;
}

// Percentiles plus the indexes of the three slowest samples (cold-start effects show as 0, 1...).
Json PercentilesWithSlowest(const std::vector<double>& values) {
  Json out = Percentiles(values);
  std::vector<size_t> order(values.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return values[x] > values[y]; });
  Json slowest = Json::array();
  for (size_t i = 0; i < std::min<size_t>(3, order.size()); ++i) {
    slowest.push_back({{"sample", order[i]}, {"ms", values[order[i]]}});
  }
  out["slowest"] = slowest;
  return out;
}

// Counts task starts and stop-token firings; lets the driver wait for the n-th of each.
class Probe {
 public:
  TaskFunction Returning() {
    return [this](std::stop_token) { Started(); };
  }
  TaskFunction Blocking() {
    return [this](std::stop_token stop) {
      Started();
      std::unique_lock lock(mu_);
      cv_.wait(lock, stop, [] { return false; });
      stop_times_.push_back(Steady::now());
      cv_.notify_all();
    };
  }
  TaskFunction RecordingWall() {
    return [this](std::stop_token) {
      const auto now = std::chrono::system_clock::now();
      Started();
      std::lock_guard lock(mu_);
      wall_starts_.push_back(now);
    };
  }

  std::optional<Steady::time_point> WaitStart(size_t n, milliseconds timeout = seconds(10)) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return start_times_.size() >= n; })) return std::nullopt;
    return start_times_[n - 1];
  }
  std::optional<Steady::time_point> WaitStop(size_t n, milliseconds timeout = seconds(10)) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return stop_times_.size() >= n; })) return std::nullopt;
    return stop_times_[n - 1];
  }
  std::vector<std::chrono::system_clock::time_point> WallStarts() {
    std::lock_guard lock(mu_);
    return wall_starts_;
  }

 private:
  void Started() {
    const auto now = Steady::now();
    std::lock_guard lock(mu_);
    start_times_.push_back(now);
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable_any cv_;
  std::vector<Steady::time_point> start_times_;
  std::vector<Steady::time_point> stop_times_;
  std::vector<std::chrono::system_clock::time_point> wall_starts_;
};

// A raw libpq session for administration (databases, pg_stat_statements).
class Admin {
 public:
  explicit Admin(const std::string& url) : conn_(PQconnectdb(url.c_str())) {}
  ~Admin() { PQfinish(conn_); }
  Admin(const Admin&) = delete;
  Admin& operator=(const Admin&) = delete;

  bool ok() const { return PQstatus(conn_) == CONNECTION_OK; }
  std::string Scalar(const std::string& sql) {
    PGresult* result = PQexec(conn_, sql.c_str());
    std::string value;
    const ExecStatusType status = PQresultStatus(result);
    if (status == PGRES_TUPLES_OK && PQntuples(result) > 0 && !PQgetisnull(result, 0, 0)) {
      value = PQgetvalue(result, 0, 0);
    } else if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
      std::cerr << "engine_bench: SQL failed: " << PQresultErrorMessage(result);
    }
    PQclear(result);
    return value;
  }

 private:
  PGconn* conn_;
};

// Where the plugin's stores live: a temp SQLite file or a fresh PostgreSQL database, removed at
// the end.
class Backend {
 public:
  static std::unique_ptr<Backend> Sqlite() {
    auto backend = std::unique_ptr<Backend>(new Backend());
    backend->dir_ =
        std::filesystem::temp_directory_path() / ("stagehand-engine-bench-" + NewUuidV4());
    std::filesystem::create_directories(backend->dir_);
    return backend;
  }
  static std::unique_ptr<Backend> Postgres(const std::string& url) {
    auto backend = std::unique_ptr<Backend>(new Backend());
    backend->url_ = url;
    backend->database_ =
        "stagehand_engine_bench_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++);
    return backend;
  }
  // The worker's view of the driver's database: not dropped at the end.
  static std::unique_ptr<Backend> ExistingPostgres(const std::string& url,
                                                   const std::string& database) {
    auto backend = std::unique_ptr<Backend>(new Backend());
    backend->url_ = url;
    backend->database_ = database;
    backend->owned_ = false;
    return backend;
  }
  ~Backend() {
    if (!dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
    if (!database_.empty() && owned_) {
      Admin admin(url_);
      admin.Scalar("DROP DATABASE IF EXISTS \"" + database_ + "\" WITH (FORCE)");
    }
  }
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  const std::string& database() const { return database_; }

  std::shared_ptr<TaskStore> Open() {
    Result<std::unique_ptr<TaskStore>> store = [&] {
      if (!dir_.empty()) {
        SqliteStoreOptions options;
        options.path = SqlitePluginDatabasePath(dir_.string(), kPluginId);
        return OpenSqliteTaskStore(kPluginId, options, SystemClock::Instance());
      }
      PostgresStoreOptions options;
      options.connection = url_;
      options.database = database_;
      return OpenPostgresTaskStore(kPluginId, options, SystemClock::Instance());
    }();
    if (!store.ok()) Die("cannot open the store: " + store.status().ToString());
    if (Status migrated = (*store)->Migrate(); !migrated.ok()) Die(migrated.ToString());
    return std::shared_ptr<TaskStore>(std::move(*store));
  }

  std::unique_ptr<PluginScheduler> Scheduler(EngineOptions engine) {
    PluginSchedulerOptions options;
    options.plugin_id = kPluginId;
    options.store = Open();
    options.logger = g_trace ? std::make_shared<TraceLogger>() : NullLogger();
    options.engine = engine;
    options.default_zone = TimeZone::Utc();
    return std::make_unique<PluginScheduler>(std::move(options));
  }

  [[noreturn]] static void Die(const std::string& message) {
    std::cerr << "engine_bench: " << message << "\n";
    std::exit(1);
  }

 private:
  Backend() = default;
  static inline int counter_ = 0;
  std::filesystem::path dir_;
  std::string url_;
  std::string database_;
  bool owned_ = true;
};

TaskDefinition Global(std::string id, Frequency frequency, TaskFunction fn) {
  TaskDefinition task;
  task.id = std::move(id);
  task.frequency = std::move(frequency);
  task.timeout = milliseconds(seconds(60));
  task.fn = std::move(fn);
  return task;
}

void MustOk(const Status& status, const std::string& what) {
  if (!status.ok()) Backend::Die(what + ": " + status.ToString());
}

// Triggers `id` on `scheduler` as soon as the previous run has released it (a trigger during the
// previous run's release is refused with kConflict). Returns the instant of the accepted call.
Steady::time_point TriggerWhenIdle(PluginScheduler& scheduler, const std::string& id) {
  const auto give_up = Steady::now() + seconds(10);
  for (;;) {
    const auto before = Steady::now();
    Status status = scheduler.TriggerTask(id);
    if (status.ok()) return before;
    if (status.code() != StatusCode::kConflict || Steady::now() > give_up) {
      Backend::Die("trigger failed: " + status.ToString());
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
}

EngineOptions NotifyOnly() {
  EngineOptions options;
  options.poll_interval = seconds(30);
  return options;
}

// In-process trigger to start of the task function, on one scheduler.
Json InProcessTrigger(Backend& backend, int triggers) {
  Probe probe;
  auto scheduler = backend.Scheduler(NotifyOnly());
  MustOk(scheduler->ScheduleTask(Global("manual", ManualFrequency{}, probe.Returning())),
         "register");
  std::vector<double> latencies;
  for (int i = 1; i <= triggers; ++i) {
    Trace("trigger " + std::to_string(i));
    const auto triggered = TriggerWhenIdle(*scheduler, "manual");
    std::optional<Steady::time_point> started = probe.WaitStart(static_cast<size_t>(i));
    if (!started) Backend::Die("a triggered run did not start");
    latencies.push_back(Ms(*started - triggered));
    Trace("started " + std::to_string(i) + " after " + std::to_string(latencies.back()) + " ms");
  }
  return PercentilesWithSlowest(latencies);
}

// Trigger on scheduler A of a task registered only on scheduler B.
Json TriggerAcross(Backend& backend, int triggers) {
  Probe probe;
  auto a = backend.Scheduler(NotifyOnly());
  auto b = backend.Scheduler(NotifyOnly());
  MustOk(b->ScheduleTask(Global("manual", ManualFrequency{}, probe.Returning())), "register");
  std::vector<double> latencies;
  for (int i = 1; i <= triggers; ++i) {
    const auto triggered = TriggerWhenIdle(*a, "manual");
    std::optional<Steady::time_point> started = probe.WaitStart(static_cast<size_t>(i));
    if (!started) Backend::Die("a run triggered on A did not start on B");
    latencies.push_back(Ms(*started - triggered));
  }
  return PercentilesWithSlowest(latencies);
}

// Cancel on scheduler A of a run on scheduler B, to B's stop token firing.
Json CancelAcross(Backend& backend, int runs) {
  Probe probe;
  auto a = backend.Scheduler(NotifyOnly());
  auto b = backend.Scheduler(NotifyOnly());
  MustOk(b->ScheduleTask(Global("blocking", ManualFrequency{}, probe.Blocking())), "register");
  std::vector<double> latencies;
  for (int i = 1; i <= runs; ++i) {
    TriggerWhenIdle(*b, "blocking");
    if (!probe.WaitStart(static_cast<size_t>(i))) Backend::Die("a run did not start on B");
    const auto cancelled = Steady::now();
    MustOk(a->CancelTask("blocking"), "cancel");
    std::optional<Steady::time_point> stopped = probe.WaitStop(static_cast<size_t>(i));
    if (!stopped) Backend::Die("B's stop token did not fire");
    latencies.push_back(Ms(*stopped - cancelled));
  }
  return PercentilesWithSlowest(latencies);
}

// A global `* * * * * *` task for `duration`: the share of whole seconds that had a run, and how
// long after its second each run started.
Json CronEverySecond(Backend& backend, seconds duration) {
  Probe probe;
  auto scheduler = backend.Scheduler(NotifyOnly());
  CronFrequency every_second;
  every_second.expression = "* * * * * *";
  every_second.time_zone = "UTC";
  const auto registered = std::chrono::system_clock::now();
  MustOk(scheduler->ScheduleTask(Global("cron", every_second, probe.RecordingWall())), "register");
  // Slots: `duration` whole seconds, from the second after the first whole second following
  // registration (the first run, at registration, is not a slot).
  const auto first_slot = std::chrono::ceil<seconds>(registered) + seconds(1);
  const auto last_slot = first_slot + duration - seconds(1);
  std::this_thread::sleep_until(last_slot + milliseconds(500));  // the measured window itself
  scheduler->Shutdown();
  std::set<std::chrono::system_clock::time_point> hit;
  std::vector<double> lags;
  for (const auto& start : probe.WallStarts()) {
    // A run belongs to the second at or before its start (a run is never early for its slot).
    const auto slot = std::chrono::floor<seconds>(start);
    if (slot < first_slot || slot > last_slot) continue;
    hit.insert(slot);
    lags.push_back(Ms(start - slot));
  }
  Json starts = Json::array();
  for (const auto& start : probe.WallStarts()) starts.push_back(Ms(start - first_slot));
  Json out;
  out["seconds"] = duration.count();
  out["slots"] = duration.count();
  out["slots_run"] = hit.size();
  out["runs_in_window"] = lags.size();
  out["start_lag"] = Percentiles(lags);
  out["starts_ms_after_first_slot"] = starts;
  return out;
}

long RssKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

double CpuMs() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto ms = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) * 1000.0 + static_cast<double>(tv.tv_usec) / 1000.0;
  };
  return ms(usage.ru_utime) + ms(usage.ru_stime);
}

// `count` idle global definitions (cron once a year).
std::vector<TaskDefinition> YearlyTasks(int count) {
  CronFrequency yearly;
  yearly.expression = "0 0 1 1 *";
  yearly.time_zone = "UTC";
  std::vector<TaskDefinition> tasks;
  tasks.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    tasks.push_back(Global("idle-" + std::to_string(i), yearly, [](std::stop_token) {}));
  }
  return tasks;
}

// Registers `tasks` with one ScheduleTasks call (`batch`) or one ScheduleTask call each. Returns
// the milliseconds taken.
double Register(PluginScheduler& scheduler, std::vector<TaskDefinition> tasks, bool batch) {
  const auto begin = Steady::now();
  if (batch) {
    MustOk(scheduler.ScheduleTasks(std::move(tasks)), "register");
  } else {
    for (TaskDefinition& task : tasks) MustOk(scheduler.ScheduleTask(std::move(task)), "register");
  }
  return Ms(Steady::now() - begin);
}

// Registration of `count` tasks on a fresh scheduler, through the batch API and through single
// calls (each on its own database).
Json Registration(const std::function<std::unique_ptr<Backend>()>& make_backend, int count) {
  Json out;
  out["tasks"] = count;
  for (const bool batch : {true, false}) {
    std::unique_ptr<Backend> backend = make_backend();
    auto scheduler = backend->Scheduler(EngineOptions{});
    out[batch ? "schedule_tasks_ms" : "schedule_task_each_ms"] =
        Register(*scheduler, YearlyTasks(count), batch);
    scheduler->Shutdown();
  }
  return out;
}

// `tasks` idle global tasks (cron once a year), registered with ScheduleTasks: registration time,
// then statements (PostgreSQL only: `url` set), CPU and memory over `idle` seconds of doing
// nothing.
Json IdleTasks(Backend& backend, const std::optional<std::string>& url, int tasks, seconds idle) {
  auto scheduler = backend.Scheduler(EngineOptions{});
  std::optional<Admin> admin;
  std::string calls_sql;
  if (url) {
    admin.emplace(*url);
    calls_sql =
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = "
        "s.dbid WHERE d.datname = '" +
        backend.database() + "'";
  }
  auto calls = [&] { return admin ? std::stod(admin->Scalar(calls_sql)) : 0.0; };
  const double calls_at_start = calls();
  const double registration_ms = Register(*scheduler, YearlyTasks(tasks), /*batch=*/true);
  const double registration_statements = calls() - calls_at_start;
  std::this_thread::sleep_for(seconds(2));  // let registration's wake-ups settle
  const double calls_before = calls();
  const double cpu_before = CpuMs();
  const auto idle_begin = Steady::now();
  std::this_thread::sleep_for(idle);  // the idle window measured
  const double idle_s = std::chrono::duration<double>(Steady::now() - idle_begin).count();
  const double cpu_after = CpuMs();
  const double calls_after = calls();

  Json out;
  out["tasks"] = tasks;
  out["registration_ms"] = registration_ms;
  if (admin) out["registration_statements"] = registration_statements;
  out["idle_seconds"] = idle_s;
  if (admin) out["statements_per_s"] = (calls_after - calls_before) / idle_s;
  out["cpu_ms_per_s"] = (cpu_after - cpu_before) / idle_s;
  out["rss_mb"] = static_cast<double>(RssKb()) / 1024.0;
  scheduler->Shutdown();
  return out;
}

// ---------------------------------------------------------------------------------------------
// Multi-process scenarios. A worker is this program with --worker=KIND: one PluginScheduler on the
// driver's database, commands on stdin (one word a line), events on stdout (one JSON object a
// line, instants as CLOCK_MONOTONIC nanoseconds, which every process on the host shares).

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Steady::now().time_since_epoch())
      .count();
}

double NsToMs(int64_t ns) { return static_cast<double>(ns) / 1e6; }

// What a worker is asked to do.
struct WorkerArgs {
  std::string kind;  // manual, blocking, idle, throughput, kill
  std::string database;
  int tasks = 0;
  int width = 0;
  int timeout_s = 0;
  int index = 0;
  int cadence_ms = 100;
};

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

int RunWorker(const std::string& url, const WorkerArgs& args) {
  Emitter out;
  auto backend = Backend::ExistingPostgres(url, args.database);
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

// Trigger (or trigger then cancel) on this process's scheduler of tasks registered only in a
// worker process.
Json AcrossProcesses(const std::string& url, const SideBySide& sizes, bool cancel) {
  auto backend = Backend::Postgres(url);
  auto a = backend->Scheduler(EngineOptions{});
  EventBoard board;
  std::vector<double> latencies;
  {
    WorkerArgs args;
    args.kind = cancel ? "blocking" : "manual";
    args.database = backend->database();
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
  auto backend = Backend::Postgres(url);
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
  auto backend = Backend::Postgres(url);
  backend->Open();
  Admin admin(url);
  const std::string calls_sql =
      "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = "
      "s.dbid WHERE d.datname = '" +
      backend->database() + "'";
  EventBoard board;
  WorkerArgs args;
  args.kind = "idle";
  args.database = backend->database();
  args.tasks = tasks;
  WorkerProcess worker(args, board);
  const Json ready = board.MustWait("ready", 1, seconds(120));
  std::this_thread::sleep_for(seconds(2));
  const double calls_before = std::stod(admin.Scalar(calls_sql));
  worker.Send("measure_begin");
  board.MustWait("measuring", 1, seconds(60));
  const auto begin = Steady::now();
  std::this_thread::sleep_for(idle);
  worker.Send("measure_end");
  const Json measured = board.MustWait("measured", 1, seconds(60));
  const double idle_s = std::chrono::duration<double>(Steady::now() - begin).count();
  const double calls_after = std::stod(admin.Scalar(calls_sql));
  Json out;
  out["tasks"] = tasks;
  out["registration_ms"] = ready["registration_ms"];
  out["idle_seconds"] = idle_s;
  out["statements_per_s"] = (calls_after - calls_before) / idle_s;
  out["cpu_ms_per_s"] = measured["cpu_ms"].get<double>() / idle_s;
  out["rss_mb"] = measured["rss_mb"];
  return out;
}

// `processes` workers, each registering the same `tasks` global tasks every `cadence`: completed
// runs per second over `duration` once all are registered, and overlapping runs of one task.
Json Throughput(const std::string& url, int processes, int tasks, milliseconds cadence,
                seconds duration) {
  auto backend = Backend::Postgres(url);
  backend->Open();
  EventBoard board;
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int i = 0; i < processes; ++i) {
    WorkerArgs args;
    args.kind = "throughput";
    args.database = backend->database();
    args.tasks = tasks;
    args.cadence_ms = static_cast<int>(cadence.count());
    workers.push_back(std::make_unique<WorkerProcess>(args, board));
  }
  board.MustWait("ready", static_cast<size_t>(processes), seconds(120));
  const int64_t begin = NowNs();
  std::this_thread::sleep_for(duration);
  const int64_t end = NowNs();
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
  return out;
}

// Two workers register one global task (every second, `timeout_s` timeout, runs until stopped);
// the one running it is SIGKILLed; seconds until the other starts it.
Json SigkillTakeover(const std::string& url, int timeout_s, int limit_s) {
  auto backend = Backend::Postgres(url);
  backend->Open();
  EventBoard board;
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int i = 0; i < 2; ++i) {
    WorkerArgs args;
    args.kind = "kill";
    args.database = backend->database();
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

// The scenarios compared with Backstage (bench/backstage-peer/peer.js), under the same JSON keys;
// `only` (when not empty) selects some: trigger, across, cancel, cron, interval, idle,
// throughput, saturation, kill.
int RunSideBySide(const std::string& url, const std::set<std::string>& only, bool smoke,
                  const std::string& out_file) {
  SideBySide sizes;
  if (smoke) {
    sizes.triggers = 3;
    sizes.across = 2;
    sizes.cancels = 2;
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
      [&] { return InProcessTrigger(*Backend::Postgres(url), sizes.triggers); });
  run("across", "trigger_across_processes",
      [&] { return AcrossProcesses(url, sizes, /*cancel=*/false); });
  run("cancel", "cancel_across_processes",
      [&] { return AcrossProcesses(url, sizes, /*cancel=*/true); });
  run("cron", "cron_every_second",
      [&] { return CronEverySecond(*Backend::Postgres(url), seconds(sizes.cron_seconds)); });
  run("interval", "interval_one_second",
      [&] { return IntervalOneSecond(url, seconds(sizes.interval_seconds)); });
  for (const int tasks : sizes.idle_tasks) {
    run("idle", "idle_tasks_" + std::to_string(tasks),
        [&] { return IdleProcess(url, tasks, seconds(sizes.idle_seconds)); });
  }
  run("throughput", "throughput", [&] {
    return Throughput(url, sizes.processes, sizes.tasks, milliseconds(100),
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

int Main(int argc, char** argv) {
  std::set<std::string> scenarios = {"trigger", "across",      "cancel",  "cron",
                                     "idle",    "idle_sqlite", "register"};
  bool scenarios_given = false;
  int cron_seconds = 10;
  int idle_tasks = 10000;
  int idle_seconds = 10;
  bool side_by_side = false;
  bool smoke = false;
  WorkerArgs worker;
  std::string out_file;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const std::string& flag) -> std::optional<std::string> {
      if (arg.rfind(flag + "=", 0) == 0) return arg.substr(flag.size() + 1);
      return std::nullopt;
    };
    if (auto v = value("--scenarios")) {
      scenarios_given = true;
      scenarios.clear();
      std::stringstream list(*v);
      for (std::string name; std::getline(list, name, ',');) scenarios.insert(name);
    } else if (auto c = value("--cron_seconds")) {
      cron_seconds = std::stoi(*c);
    } else if (auto t = value("--idle_tasks")) {
      idle_tasks = std::stoi(*t);
    } else if (auto s = value("--idle_seconds")) {
      idle_seconds = std::stoi(*s);
    } else if (arg == "--trace") {
      g_trace = true;
    } else if (arg == "--side_by_side") {
      side_by_side = true;
    } else if (arg == "--smoke") {
      smoke = true;
    } else if (auto w = value("--worker")) {
      worker.kind = *w;
    } else if (auto d = value("--database")) {
      worker.database = *d;
    } else if (auto n = value("--tasks")) {
      worker.tasks = std::stoi(*n);
    } else if (auto width = value("--width")) {
      worker.width = std::stoi(*width);
    } else if (auto timeout = value("--timeout")) {
      worker.timeout_s = std::stoi(*timeout);
    } else if (auto index = value("--index")) {
      worker.index = std::stoi(*index);
    } else if (auto cadence = value("--cadence")) {
      worker.cadence_ms = std::stoi(*cadence);
    } else if (auto o = value("--benchmark_out")) {
      out_file = *o;
    } else if (arg.rfind("--benchmark_", 0) != 0) {
      std::cerr << "engine_bench: unknown argument " << arg << "\n";
      return 2;
    }
  }
  const char* url_env = std::getenv("STAGEHAND_TEST_POSTGRES_URL");
  const std::optional<std::string> url =
      url_env != nullptr && *url_env != '\0' ? std::optional<std::string>(url_env) : std::nullopt;

  if (!worker.kind.empty()) {
    if (!url) Backend::Die("a worker needs STAGEHAND_TEST_POSTGRES_URL");
    return RunWorker(*url, worker);
  }
  if (side_by_side) {
    if (!url) Backend::Die("--side_by_side needs STAGEHAND_TEST_POSTGRES_URL");
    return RunSideBySide(*url, scenarios_given ? scenarios : std::set<std::string>{}, smoke,
                         out_file);
  }

  Json results;
  auto postgres = [&]() -> std::unique_ptr<Backend> {
    return url ? Backend::Postgres(*url) : nullptr;
  };
  auto note_skip = [&](const std::string& name) {
    results[name] = "skipped: STAGEHAND_TEST_POSTGRES_URL is not set";
  };
  if (scenarios.count("trigger") != 0) {
    results["in_process_trigger_sqlite"] = InProcessTrigger(*Backend::Sqlite(), 50);
    if (auto backend = postgres()) {
      results["in_process_trigger_postgres"] = InProcessTrigger(*backend, 50);
    } else {
      note_skip("in_process_trigger_postgres");
    }
  }
  if (scenarios.count("across") != 0) {
    if (auto backend = postgres()) {
      results["trigger_across_postgres"] = TriggerAcross(*backend, 50);
    } else {
      note_skip("trigger_across_postgres");
    }
  }
  if (scenarios.count("cancel") != 0) {
    if (auto backend = postgres()) {
      results["cancel_across_postgres"] = CancelAcross(*backend, 20);
    } else {
      note_skip("cancel_across_postgres");
    }
  }
  if (scenarios.count("cron") != 0) {
    results["cron_every_second_sqlite"] =
        CronEverySecond(*Backend::Sqlite(), seconds(cron_seconds));
    if (auto backend = postgres()) {
      results["cron_every_second_postgres"] = CronEverySecond(*backend, seconds(cron_seconds));
    } else {
      note_skip("cron_every_second_postgres");
    }
  }
  if (scenarios.count("idle") != 0) {
    if (auto backend = postgres()) {
      results["idle_tasks_postgres"] = IdleTasks(*backend, url, idle_tasks, seconds(idle_seconds));
    } else {
      note_skip("idle_tasks_postgres");
    }
  }
  if (scenarios.count("idle_sqlite") != 0) {
    results["idle_tasks_sqlite"] =
        IdleTasks(*Backend::Sqlite(), std::nullopt, idle_tasks, seconds(idle_seconds));
  }
  // Last: it leaves tens of thousands of freed allocations behind, which would inflate the RSS
  // figures of the idle scenario.
  if (scenarios.count("register") != 0) {
    for (const int count : {1000, 10000}) {
      const std::string suffix = "_" + std::to_string(count);
      results["registration_sqlite" + suffix] = Registration(&Backend::Sqlite, count);
      if (url) {
        results["registration_postgres" + suffix] =
            Registration([&] { return Backend::Postgres(*url); }, count);
      } else {
        note_skip("registration_postgres" + suffix);
      }
    }
  }
  const std::string text = results.dump(2);
  std::cout << text << "\n";
  if (!out_file.empty()) std::ofstream(out_file) << text << "\n";
  return 0;
}

}  // namespace
}  // namespace stagehand

int main(int argc, char** argv) { return stagehand::Main(argc, argv); }
