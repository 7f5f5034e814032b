// Latency and idle-cost figures of the scheduling engine in real time, against the product's
// targets: in-process trigger to start (SQLite and PostgreSQL), trigger and cancel across two
// schedulers over PostgreSQL, cron every second, 10,000 idle global tasks, and the registration of
// 1,000 and 10,000 tasks (batch and one by one) on SQLite and PostgreSQL.
// With --side_by_side it runs instead the scenarios that scripts/bench compares with Backstage
// (side_by_side_harness.h), and with --worker=KIND it is one of that harness's worker processes.
// A plain program (not Google Benchmark: each figure is a distribution of event latencies, not a
// loop rate). Prints one JSON document; also writes it to --benchmark_out=FILE (scripts/bench).
// PostgreSQL scenarios use STAGEHAND_TEST_POSTGRES_URL and are skipped when it is unset. With
// STAGEHAND_BENCH_TRANSACTION_POOLER set to the URL of a PgBouncer in transaction mode in front of
// that server, the stores' statements go through it and their LISTEN straight to the server.
//
//   engine_bench [--scenarios=trigger,across,cancel,cron,idle,idle_sqlite,register,
//                             across_processes,cancel_processes,interval,idle_processes,
//                             throughput,saturation,kill]
//                [--cron_seconds=10]
//                [--idle_tasks=10000] [--idle_seconds=10] [--trace]
//                [--side_by_side] [--smoke] [--db=postgres|mysql]
// --side_by_side selects the scenarios that scripts/bench compares with Backstage, at the issue's
// sizes (cron for 30 s); --smoke shrinks every count and duration to seconds; --db=mysql runs them
// (and the workers) on the MySQL or MariaDB server of STAGEHAND_TEST_MARIADB_URL instead.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine_bench_support.h"
#include "side_by_side_harness.h"

namespace stagehand::bench {
namespace {

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
  if (url) admin.emplace(*url);
  auto calls = [&] { return admin ? admin->Statements(backend.database()) : 0.0; };
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
    } else if (auto db = value("--db")) {
      worker.db = *db;
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
  if (worker.db != "postgres" && worker.db != "mysql") {
    std::cerr << "engine_bench: --db must be postgres or mysql, not " << worker.db << "\n";
    return 2;
  }
  const char* url_variable =
      worker.db == "mysql" ? "STAGEHAND_TEST_MARIADB_URL" : "STAGEHAND_TEST_POSTGRES_URL";
  const char* url_env = std::getenv(url_variable);
  const std::optional<std::string> url =
      url_env != nullptr && *url_env != '\0' ? std::optional<std::string>(url_env) : std::nullopt;

  if (!worker.kind.empty()) {
    if (!url) Backend::Die(std::string("a worker needs ") + url_variable);
    return RunWorker(*url, worker);
  }
  if (side_by_side) {
    if (!url) Backend::Die(std::string("--side_by_side needs ") + url_variable);
    return RunSideBySide(*url, scenarios_given ? scenarios : std::set<std::string>{}, smoke,
                         out_file);
  }
  if (worker.db != "postgres") {
    std::cerr << "engine_bench: --db=mysql applies to --side_by_side only\n";
    return 2;
  }

  Json results;
  auto postgres = [&]() -> std::unique_ptr<Backend> {
    return url ? Backend::Server(*url) : nullptr;
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
            Registration([&] { return Backend::Server(*url); }, count);
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
}  // namespace stagehand::bench

int main(int argc, char** argv) { return stagehand::bench::Main(argc, argv); }
