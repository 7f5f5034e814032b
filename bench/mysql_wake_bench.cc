// Wake-ups on MySQL and MariaDB (ADR 0019): how long after a writer's change a waiting host's
// wait ends (the change committed, the writer's Wake, the waiter's Wait returning with it), over
// a few hundred changes, and what an idle waiter costs the server (statements per second, from
// the server's Questions counter). With several waiting hosts, the latency is the last one's, and
// "stalled" counts the changes that took a waiter over a second (a KILL the server held, ADR 0019).
//
// Needs STAGEHAND_TEST_MARIADB_PORT (scripts/bench and scripts/test-mariadb start a throwaway
// MariaDB); without it, it prints a note and exits 0 so that scripts/bench can run every
// benchmark. Options: --wakes=N (default 500), --waiters=N (waiting hosts, default 1),
// --wait-seconds=N (the longest wait, as a host's safety-net
// interval; default 10), --idle-seconds=N (default 30), --benchmark_out=<file> (also writes the
// JSON there); other --benchmark_* flags are ignored.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store/mysql/my_wakeups.h"

namespace {

using namespace stagehand;
using namespace stagehand::store_internal;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

struct Options {
  int wakes = 500;
  int waiters = 1;
  int wait_seconds = 10;
  int idle_seconds = 30;
  std::string out;
};

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.starts_with("--wakes=")) options.wakes = std::max(1, std::atoi(arg.c_str() + 8));
    if (arg.starts_with("--waiters=")) options.waiters = std::max(1, std::atoi(arg.c_str() + 10));
    if (arg.starts_with("--wait-seconds=")) {
      options.wait_seconds = std::max(1, std::atoi(arg.c_str() + 15));
    }
    if (arg.starts_with("--idle-seconds=")) {
      options.idle_seconds = std::max(1, std::atoi(arg.c_str() + 15));
    }
    if (arg.starts_with("--benchmark_out=")) options.out = arg.substr(16);
  }
  return options;
}

std::unique_ptr<MyConnection> Open(int port, const std::string& database) {
  MyConnectParams params;
  params.port = port;
  params.user = "stagehand";
  params.password = "stagehand";
  params.database = database;
  Result<std::unique_ptr<MyConnection>> opened = MyConnection::Open(params);
  if (!opened.ok()) {
    std::cerr << "mysql_wake_bench: " << opened.status().ToString() << "\n";
    std::exit(1);
  }
  return std::move(*opened);
}

MyResult Must(MyConnection& db, const std::string& sql) {
  MyResult result = db.Execute(sql);
  if (!result.ok()) {
    std::cerr << "mysql_wake_bench: " << sql << ": " << result.error() << "\n";
    std::exit(1);
  }
  return result;
}

std::int64_t Questions(MyConnection& db) {
  return Must(db, "SHOW GLOBAL STATUS LIKE 'Questions'").GetInt(0, 1);
}

double Percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  const auto index = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(index, values.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = ParseOptions(argc, argv);
  const char* port_text = std::getenv("STAGEHAND_TEST_MARIADB_PORT");
  if (port_text == nullptr || *port_text == '\0') {
    std::cout << "mysql_wake_bench: STAGEHAND_TEST_MARIADB_PORT is not set (run it through "
                 "scripts/test-mariadb); skipped\n";
    return 0;
  }
  const int port = std::atoi(port_text);
  const std::string database = "stagehand_wake_bench_" + std::to_string(::getpid());
  std::unique_ptr<MyConnection> admin = Open(port, "");
  Must(*admin, "CREATE DATABASE " + database);
  std::unique_ptr<MyConnection> writer = Open(port, database);
  const Status migrated =
      MigrateMySqlStagehand(*writer, database, [](std::string_view step, const MyResult& result) {
        return InternalError(std::string(step) + ": " + result.error());
      });
  if (!migrated.ok()) {
    std::cerr << "mysql_wake_bench: " << migrated.ToString() << "\n";
    return 1;
  }

  // The waiting hosts: each waits, and reports each sequence number it wakes with.
  std::mutex mu;
  std::condition_variable changed;
  std::vector<std::int64_t> seen(static_cast<std::size_t>(options.waiters), 0);
  bool stopping = false;
  std::vector<std::unique_ptr<ChangeWaiter>> waiters;
  std::vector<std::thread> waiting;
  for (int w = 0; w < options.waiters; ++w) {
    waiters.push_back(std::make_unique<ChangeWaiter>(Open(port, database), Open(port, database),
                                                     "bench-waiter-" + std::to_string(w)));
    waiting.emplace_back([&, w = static_cast<std::size_t>(w)] {
      std::int64_t last = 0;
      for (;;) {
        Result<std::int64_t> woke =
            waiters[w]->Wait(last, std::chrono::seconds(options.wait_seconds));
        if (!woke.ok()) {
          std::cerr << "mysql_wake_bench: " << woke.status().ToString() << "\n";
          std::exit(1);
        }
        last = *woke;
        std::lock_guard lock(mu);
        seen[w] = last;
        changed.notify_all();
        if (stopping) return;
      }
    });
  }
  const auto all_seen = [&](std::int64_t change) {
    return std::all_of(seen.begin(), seen.end(), [&](std::int64_t s) { return s >= change; });
  };

  WaiterWaker waker("bench-writer");
  std::vector<double> latencies_ms;
  int wakes_sent = 0;
  int stalled = 0;
  for (int i = 0; i < options.wakes; ++i) {
    std::this_thread::sleep_for(milliseconds(20));  // the waiter is back in its wait by now
    const auto begin = steady_clock::now();
    Must(*writer, "INSERT INTO stagehand_changes (kind, task_id) VALUES ('trigger', 'bench')");
    const std::int64_t change = Must(*writer, "SELECT LAST_INSERT_ID()").GetInt(0, 0);
    Result<int> woken = waker.Wake(*writer, change, [](const std::string&) {});
    if (!woken.ok()) {
      std::cerr << "mysql_wake_bench: " << woken.status().ToString() << "\n";
      return 1;
    }
    wakes_sent += *woken;
    std::unique_lock lock(mu);
    if (!changed.wait_for(lock, std::chrono::seconds(60), [&] { return all_seen(change); })) {
      std::cerr << "mysql_wake_bench: the waiter never saw change " << change << "\n";
      return 1;
    }
    latencies_ms.push_back(
        std::chrono::duration<double, std::milli>(steady_clock::now() - begin).count());
    if (latencies_ms.back() > 1000) ++stalled;
  }

  // Idle: only the waiter's own statements reach the server (and the two readings of the
  // counter, which count themselves).
  const std::int64_t before = Questions(*writer);
  std::this_thread::sleep_for(std::chrono::seconds(options.idle_seconds));
  const std::int64_t after = Questions(*writer);
  const double idle_per_second =
      static_cast<double>(after - before - 1) / static_cast<double>(options.idle_seconds);

  {
    std::lock_guard lock(mu);
    stopping = true;
  }
  Must(*writer, "INSERT INTO stagehand_changes (kind) VALUES ('stop')");
  const std::int64_t last = Must(*writer, "SELECT LAST_INSERT_ID()").GetInt(0, 0);
  (void)waker.Wake(*writer, last, [](const std::string&) {});
  for (std::thread& thread : waiting) thread.join();
  Must(*admin, "DROP DATABASE " + database);

  char json[768];
  std::snprintf(json, sizeof json,
                "{\"wakes\": %d, \"waiters\": %d, \"woken_by_kill\": %d, "
                "\"stalled\": %d, \"change_to_wake_ms\": {\"p50\": %.3f, "
                "\"p99\": %.3f, \"max\": %.3f}, \"waiter_wait_seconds\": %d, "
                "\"idle_seconds\": %d, \"idle_waiter_statements_per_second\": %.3f, "
                "\"server\": \"%s\"}\n",
                options.wakes, options.waiters, wakes_sent, stalled, Percentile(latencies_ms, 0.5),
                Percentile(latencies_ms, 0.99), Percentile(latencies_ms, 1.0), options.wait_seconds,
                options.idle_seconds, idle_per_second,
                std::string(Must(*admin, "SELECT VERSION()").Get(0, 0)).c_str());
  std::cout << json;
  if (!options.out.empty()) std::ofstream(options.out) << json;
  return 0;
}
