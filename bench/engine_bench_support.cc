#include "engine_bench_support.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <thread>
#include <utility>

#include "stagehand/backend/database_config.h"
#include "store/mysql/my_connection.h"

namespace stagehand::bench {

ServerKind KindOfUrl(const std::string& url) {
  return url.rfind("mysql://", 0) == 0 ? ServerKind::kMySql : ServerKind::kPostgres;
}

namespace {

store_internal::MyConnectParams MyParamsOf(const MySqlStoreOptions& options) {
  store_internal::MyConnectParams params;
  params.host = options.host;
  params.port = options.port;
  params.user = options.user;
  params.password = options.password;
  return params;
}

}  // namespace

MySqlStoreOptions MySqlOptionsOfUrl(const std::string& url, const std::string& database) {
  DatabaseConnection connection;
  if (!ParseMySqlUrl(url, connection))
    Backend::Die("not a MySQL URL (mysql://user:password@host:port)");
  MySqlStoreOptions options;
  options.host = connection["host"];
  if (connection.count("port") != 0) options.port = std::stoi(connection["port"]);
  options.user = connection["user"];
  options.password = connection["password"];
  options.database = database;
  return options;
}

Admin::Admin(const std::string& url) : kind_(KindOfUrl(url)) {
  if (kind_ == ServerKind::kPostgres) {
    pg_ = PQconnectdb(url.c_str());
    if (PQstatus(pg_) != CONNECTION_OK) Backend::Die(PQerrorMessage(pg_));
    return;
  }
  Result<std::unique_ptr<store_internal::MyConnection>> opened =
      store_internal::MyConnection::Open(MyParamsOf(MySqlOptionsOfUrl(url, "")));
  if (!opened.ok()) Backend::Die(opened.status().ToString());
  my_ = std::move(*opened);
}

Admin::~Admin() {
  if (pg_ != nullptr) PQfinish(pg_);
}

std::string Admin::Scalar(const std::string& sql) {
  if (my_ != nullptr) {
    store_internal::MyResult result = my_->Execute(sql);
    if (!result.ok()) {
      std::cerr << "engine_bench: SQL failed: " << result.error() << "\n";
      return "";
    }
    if (result.rows() == 0 || result.IsNull(0, 0)) return "";
    return std::string(result.Get(0, 0));
  }
  PGresult* result = PQexec(pg_, sql.c_str());
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

double Admin::Statements(const std::string& database) {
  if (my_ != nullptr) {
    const std::string questions = Scalar(
        "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
        "WHERE VARIABLE_NAME = 'QUESTIONS'");
    own_reads_ += 1;
    return questions.empty() ? 0.0 : std::stod(questions) - own_reads_;
  }
  const std::string calls = Scalar(
      "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = "
      "s.dbid WHERE d.datname = '" +
      database + "'");
  return calls.empty() ? 0.0 : std::stod(calls);
}

void Admin::DropDatabase(const std::string& database) {
  if (my_ != nullptr) {
    Scalar("DROP DATABASE IF EXISTS `" + database + "`");
    return;
  }
  Scalar("DROP DATABASE IF EXISTS \"" + database + "\" WITH (FORCE)");
}

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

}  // namespace stagehand::bench
