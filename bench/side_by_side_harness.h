// The stagehand side of the side-by-side comparison with Backstage's scheduler
// (bench/side_by_side.sh runs `engine_bench --side_by_side`; bench/backstage-peer/peer.js runs the
// same scenarios on Backstage with the same JSON keys). The multi-process scenarios use worker
// processes of the same program (`engine_bench --worker=KIND`), each with its own PluginScheduler
// on the driver's database (PostgreSQL, or MySQL/MariaDB with --db=mysql) and the engine's
// default options: trigger and cancel from the driver to a worker, a 1 s interval, idle tasks in
// a fresh process, 4 processes x 500 tasks every 100 ms (every second on MySQL, which keeps whole
// seconds), the same 2,000 tasks due continuously (1 ms cadence: the engine's own limit, beside
// pgbench's), and a SIGKILLed owner. Both entry points run on the program's main thread.
#pragma once

#include <set>
#include <string>

namespace stagehand::bench {

// What a worker is asked to do (its command-line flags).
struct WorkerArgs {
  std::string kind;             // manual, blocking, idle, throughput, kill
  std::string db = "postgres";  // the server: postgres or mysql (see engine_bench --db)
  std::string database;
  int tasks = 0;
  int width = 0;
  int timeout_s = 0;
  int index = 0;
  int cadence_ms = 100;
};

// Runs a worker on the database `args.database` of `url`'s server: commands on stdin (one word a
// line), events on stdout (one JSON object a line). Returns the exit code.
int RunWorker(const std::string& url, const WorkerArgs& args);

// Runs the scenarios compared with Backstage, under peer.js's JSON keys; `only` (when not empty)
// selects some: trigger, across, cancel, cron, interval, idle, throughput, saturation, kill.
// `smoke` shrinks every count and duration to seconds. Prints the JSON document and writes it to
// `out_file` unless empty. Returns the exit code.
int RunSideBySide(const std::string& url, const std::set<std::string>& only, bool smoke,
                  const std::string& out_file);

}  // namespace stagehand::bench
