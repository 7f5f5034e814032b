// Helpers shared by engine_bench's own scenarios (engine_bench.cc) and the side-by-side harness
// (side_by_side_harness.cc), two translation units of the engine_bench program: where a plugin's
// store lives (a temp SQLite file, or a fresh database on a PostgreSQL or MySQL/MariaDB server),
// task probes, latency
// percentiles, process CPU and memory, and the single-process scenarios both of them run. The
// driver calls them from its main thread.
#pragma once

#include <postgresql/libpq-fe.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "stagehand/backend/run_spans.h"
#include "stagehand/base/logger.h"
#include "stagehand/base/uuid.h"
#include "stagehand/http/otlp_http_exporter.h"
#include "stagehand/service/plugin_scheduler.h"
#include "stagehand/store/mysql_task_store.h"
#include "stagehand/store/postgres_task_store.h"
#include "stagehand/store/sqlite_task_store.h"
#include "stagehand/time/clock.h"
#include "stagehand/trace/span_processor.h"

namespace stagehand::store_internal {
class MyConnection;
}  // namespace stagehand::store_internal

namespace stagehand::bench {

using Steady = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;
using std::chrono::milliseconds;
using std::chrono::seconds;

inline constexpr char kPluginId[] = "enginebench";

// With --trace, the schedulers log at debug level to stderr, each line prefixed with the
// microseconds since the program started (to see where a slow sample spent its time).
inline bool g_trace = false;
inline const Steady::time_point g_program_start = Steady::now();

// The logger of --trace. Thread-safe.
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

// Logs `message` at debug level when --trace is on.
void Trace(std::string_view message);

double Ms(std::chrono::nanoseconds d);

// p50, p99 and max of latencies in milliseconds.
Json Percentiles(std::vector<double> values);

// Percentiles plus the indexes of the three slowest samples (cold-start effects show as 0, 1...).
Json PercentilesWithSlowest(const std::vector<double>& values);

// Counts task starts and stop-token firings; lets the driver wait for the n-th of each.
// Thread-safe: task functions report from the engine's threads.
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

// The servers the multi-host scenarios run on, told apart by their URL's scheme: mysql:// is
// MySQL or MariaDB, anything else PostgreSQL.
enum class ServerKind { kPostgres, kMySql };
ServerKind KindOfUrl(const std::string& url);

// The MySQL store's options for `database` on the server of a mysql://user:password@host:port URL.
MySqlStoreOptions MySqlOptionsOfUrl(const std::string& url, const std::string& database);

// A raw session for administration: databases and statement counts. Driver thread only.
class Admin {
 public:
  explicit Admin(const std::string& url);
  ~Admin();
  Admin(const Admin&) = delete;
  Admin& operator=(const Admin&) = delete;

  // The first value `sql` returns ("" when none, or when it fails, which is printed).
  std::string Scalar(const std::string& sql);
  // Statements run so far: PostgreSQL, in `database` (pg_stat_statements); MySQL, by the whole
  // server (its Questions counter, less this session's own reads of it): the bench's throwaway
  // server runs nothing but the scenario.
  double Statements(const std::string& database);
  void DropDatabase(const std::string& database);

 private:
  ServerKind kind_;
  PGconn* pg_ = nullptr;
  std::unique_ptr<store_internal::MyConnection> my_;
  double own_reads_ = 0;
};

// Where the plugin's stores live: a temp SQLite file or a fresh database on the server of a
// PostgreSQL or MySQL URL, removed at the end.
class Backend {
 public:
  static std::unique_ptr<Backend> Sqlite() {
    auto backend = std::unique_ptr<Backend>(new Backend());
    backend->dir_ =
        std::filesystem::temp_directory_path() / ("stagehand-engine-bench-" + NewUuidV4());
    std::filesystem::create_directories(backend->dir_);
    return backend;
  }
  static std::unique_ptr<Backend> Server(const std::string& url) {
    auto backend = std::unique_ptr<Backend>(new Backend());
    backend->url_ = url;
    backend->database_ =
        "stagehand_engine_bench_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++);
    return backend;
  }
  // The worker's view of the driver's database: not dropped at the end.
  static std::unique_ptr<Backend> ExistingServer(const std::string& url,
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
    if (!database_.empty() && owned_) Admin(url_).DropDatabase(database_);
  }
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  const std::string& database() const { return database_; }
  const std::string& url() const { return url_; }

  std::shared_ptr<TaskStore> Open() {
    Result<std::unique_ptr<TaskStore>> store = [&]() -> Result<std::unique_ptr<TaskStore>> {
      if (!dir_.empty()) {
        SqliteStoreOptions options;
        options.path = SqlitePluginDatabasePath(dir_.string(), kPluginId);
        return OpenSqliteTaskStore(kPluginId, options, SystemClock::Instance());
      }
      if (KindOfUrl(url_) == ServerKind::kMySql) {
        return OpenMySqlTaskStore(kPluginId, MySqlOptionsOfUrl(url_, database_),
                                  SystemClock::Instance());
      }
      PostgresStoreOptions options;
      options.connection = url_;
      options.database = database_;
      // STAGEHAND_BENCH_TRANSACTION_POOLER=<URL of a PgBouncer in transaction mode in front of
      // the server> sends the stores' statements through it, their LISTEN straight to the server
      // (issue 38); workers inherit it.
      if (const char* pooler = std::getenv("STAGEHAND_BENCH_TRANSACTION_POOLER");
          pooler != nullptr && *pooler != '\0') {
        options.connection = pooler;
        options.transaction_pooler = true;
        options.notify_connection = url_;
      }
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
    // STAGEHAND_BENCH_HISTORY=off measures the engine without the run history (the cost of
    // recording it, issue 16); workers inherit it.
    const char* history = std::getenv("STAGEHAND_BENCH_HISTORY");
    options.engine.record_history = history == nullptr || std::string_view(history) != "off";
    // STAGEHAND_BENCH_TRACE=down traces every run and exports the spans to a collector that is
    // not there (issue 18: what tracing costs a run when the collector is down).
    if (const char* trace = std::getenv("STAGEHAND_BENCH_TRACE");
        trace != nullptr && std::string_view(trace) == "down") {
      options.engine.trace_runs = SamplerConfig{SamplerKind::kAlwaysOn};
      options.observer = DownCollectorSpans();
    }
    options.default_zone = TimeZone::Utc();
    return std::make_unique<PluginScheduler>(std::move(options));
  }

  // A span observer whose exports go to 127.0.0.1:9 (discard; nothing listens), shared by every
  // scheduler of the process and kept until it exits.
  static std::shared_ptr<SchedulerObserver> DownCollectorSpans() {
    static std::unique_ptr<OtlpHttpExporter> exporter = [] {
      OtlpHttpOptions options;
      options.endpoint = "http://127.0.0.1:9/v1/traces";
      options.timeout = std::chrono::milliseconds(500);
      options.scope_name = std::string(kSchedulerTracerName);
      Result<std::unique_ptr<OtlpHttpExporter>> created = OtlpHttpExporter::Create(options);
      if (!created.ok()) Die(created.status().ToString());
      return std::move(*created);
    }();
    // Made after the exporter, so destroyed (and its thread joined) before it.
    static auto processor = std::make_unique<BatchSpanProcessor>(
        SystemClock::Instance(),
        [](const std::vector<SpanData>& spans) { return exporter->Export(spans); });
    static std::shared_ptr<SchedulerObserver> observer =
        std::make_shared<RunSpanObserver>(*processor, SystemClock::Instance(), "bench", 1);
    return observer;
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

TaskDefinition Global(std::string id, Frequency frequency, TaskFunction fn);

void MustOk(const Status& status, const std::string& what);

// Triggers `id` on `scheduler` as soon as the previous run has released it (a trigger during the
// previous run's release is refused with kConflict). Returns the instant of the accepted call.
Steady::time_point TriggerWhenIdle(PluginScheduler& scheduler, const std::string& id);

EngineOptions NotifyOnly();

// In-process trigger to start of the task function, on one scheduler.
Json InProcessTrigger(Backend& backend, int triggers);

// A global `* * * * * *` task for `duration`: the share of whole seconds that had a run, and how
// long after its second each run started.
Json CronEverySecond(Backend& backend, seconds duration);

// This process's resident memory in KiB (-1 when unknown) and CPU time (user + system) in ms.
long RssKb();
double CpuMs();

// `count` idle global definitions (cron once a year).
std::vector<TaskDefinition> YearlyTasks(int count);

// Registers `tasks` with one ScheduleTasks call (`batch`) or one ScheduleTask call each. Returns
// the milliseconds taken.
double Register(PluginScheduler& scheduler, std::vector<TaskDefinition> tasks, bool batch);

}  // namespace stagehand::bench
