// Claim+release pairs per second through PostgresTaskStore, against pgbench running the store's
// same two statements (bench/pgbench/claim_release.sql) on the same server in the same run, and,
// with --batch=N, pgbench running the store's batched claim and release of N rows per statement
// (bench/pgbench/claim_release_many.sql): the limit of a batching engine.
// Eight threads (eight pooled connections) each claim and release their own due rows; a release
// with a zero duration cadence makes the row due again at once.
//
// Needs STAGEHAND_TEST_POSTGRES_URL (run it through scripts/test-postgres, or
// bench/store_claim.sh); without it, it prints a note and exits 0 so that scripts/bench can run
// every benchmark. Options: --seconds=N (default 10, or STAGEHAND_BENCH_SECONDS), --batch=N,
// --benchmark_out=<file> (also writes the JSON there); other --benchmark_* flags are ignored.

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "stagehand/store/postgres_task_store.h"

namespace {

using namespace stagehand;
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

constexpr int kConnections = 8;
constexpr int kRowsPerConnection = 16;
// pgbench's client threads: 2 as the issue specifies, and one per connection as our run has.
constexpr int kPgbenchThreads[] = {2, kConnections};
constexpr milliseconds kWarmUp{1000};
// The measurement is split into this many interleaved rounds (at most one per 2 s).
constexpr int kRounds = 5;

// Returns the CPU time (user + system) used so far by this process or, with `who` =
// RUSAGE_CHILDREN, by its waited-for children.
double CpuSeconds(int who) {
  rusage usage{};
  ::getrusage(who, &usage);
  const auto seconds_of = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds_of(usage.ru_utime) + seconds_of(usage.ru_stime);
}

std::string ShellQuote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

// Returns `conninfo` (URL or key=value string) pointing at `database` instead.
std::string WithDatabase(const std::string& conninfo, const std::string& database) {
  for (const std::string scheme : {"postgresql://", "postgres://"}) {
    if (conninfo.rfind(scheme, 0) != 0) continue;
    const size_t path = conninfo.find('/', scheme.size());
    const size_t query = conninfo.find('?', scheme.size());
    std::string result = conninfo.substr(0, std::min(path, query)) + "/" + database;
    if (query != std::string::npos) result += conninfo.substr(query);
    return result;
  }
  return conninfo + " dbname=" + database;
}

std::string Tool(const std::string& name) {
  if (const char* bin = std::getenv("STAGEHAND_TEST_PG_BIN")) {
    const std::filesystem::path path = std::filesystem::path(bin) / name;
    if (std::filesystem::exists(path)) return path.string();
  }
  return name;
}

// Runs `command` and returns its standard output; a failure (start or exit status) is appended as
// a line, so that a caller looking for a result does not find one and shows why.
std::string Capture(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "cannot start: " + command;
  char buffer[4096];
  size_t read = 0;
  while ((read = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, read);
  if (const int status = ::pclose(pipe); status != 0) {
    output += "\nexit status " + std::to_string(status) + " of: " + command + "\n";
    const size_t at = output.find("tps = ");
    if (at != std::string::npos) output.replace(at, 6, "tps (failed run) = ");
  }
  return output;
}

struct StoreRun {
  long long pairs = 0;
  long long failures = 0;
  double seconds = 0;
};

// Runs kConnections threads claiming and releasing their own rows for `duration`.
StoreRun RunStore(TaskStore& store, steady_clock::duration duration) {
  TaskSchedule schedule;
  schedule.settings.cadence = Cadence::Every(std::chrono::milliseconds(0));
  schedule.settings.timeout_after_duration = "PT1M";
  std::atomic<bool> stop{false};
  std::atomic<long long> pairs{0};
  std::atomic<long long> failures{0};
  const auto start = steady_clock::now();
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kConnections; ++t) {
      threads.emplace_back([&, t] {
        long long done = 0;
        long long failed = 0;
        for (long long k = 0; !stop.load(std::memory_order_relaxed); ++k) {
          const std::string id = std::to_string(t * kRowsPerConnection + k % kRowsPerConnection);
          const std::string ticket = std::to_string(t) + "-" + std::to_string(k);
          Result<ClaimResult> claim = store.Claim(id, ticket, seconds(60), seconds(60));
          if (!claim.ok() || !claim->claimed) {
            ++failed;
            continue;
          }
          Result<bool> released = store.Release(id, ticket, schedule, std::nullopt);
          if (released.ok() && *released) {
            ++done;
          } else {
            ++failed;
          }
        }
        pairs += done;
        failures += failed;
      });
    }
    std::this_thread::sleep_for(duration);
    stop = true;
  }
  const double elapsed = std::chrono::duration<double>(steady_clock::now() - start).count();
  return StoreRun{pairs.load(), failures.load(), elapsed};
}

// Runs pgbench with bench/pgbench/<script_name> and the `defines` (-D name=value ...) on
// `threads` client threads; returns its tps (0 on failure).
double RunPgbench(const std::string& url, int threads, int duration_seconds,
                  const std::string& script_name, const std::string& defines) {
  const std::string script =
      (std::filesystem::path(STAGEHAND_BENCH_DIR) / "pgbench" / script_name).string();
  const std::string command = ShellQuote(Tool("pgbench")) + " -n -M prepared -c " +
                              std::to_string(kConnections) + " -j " + std::to_string(threads) +
                              " -T " + std::to_string(duration_seconds) + " " + defines + " -f " +
                              ShellQuote(script) + " " + ShellQuote(url) + " 2>&1";
  const std::string output = Capture(command);
  const size_t at = output.find("tps = ");
  if (at == std::string::npos) {
    std::cerr << "store_claim_bench: pgbench failed:\n" << output << "\n";
    return 0;
  }
  return std::strtod(output.c_str() + at + 6, nullptr);
}

// One claim+release pair per transaction (bench/pgbench/claim_release.sql).
double RunPgbenchPairs(const std::string& url, int threads, int duration_seconds) {
  return RunPgbench(url, threads, duration_seconds, "claim_release.sql",
                    "-D rows_per_client=" + std::to_string(kRowsPerConnection) +
                        " -D timeout_ms=60000 -D lease_ms=60000 -D plan_kind=scheduled_plus"
                        " -D seconds=0 -D channel=stagehand_tasks -D event=release -D marked=none"
                        " -D cancelled=none");
}

// A batched claim and release of `batch` rows per transaction (bench/pgbench/
// claim_release_many.sql); returns runs (claimed and released rows) per second.
double RunPgbenchBatched(const std::string& url, int threads, int duration_seconds, int batch) {
  return batch * RunPgbench(url, threads, duration_seconds, "claim_release_many.sql",
                            "-D batch=" + std::to_string(batch) +
                                " -D ready=0 -D timeout_ms=60000 -D lease_ms=60000"
                                " -D channel=stagehand_tasks -D cancelled=none");
}

}  // namespace

int main(int argc, char** argv) {
  int duration_seconds = 10;
  if (const char* env = std::getenv("STAGEHAND_BENCH_SECONDS")) duration_seconds = std::atoi(env);
  std::string out_path;
  int batch = 0;  // --batch=N: also pgbench's batched claim+release of N rows per statement
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--seconds=", 0) == 0) duration_seconds = std::atoi(arg.c_str() + 10);
    if (arg.rfind("--benchmark_out=", 0) == 0) out_path = arg.substr(16);
    if (arg.rfind("--batch=", 0) == 0) batch = std::max(0, std::atoi(arg.c_str() + 8));
  }
  if (duration_seconds < 1) duration_seconds = 1;

  const char* url_env = std::getenv("STAGEHAND_TEST_POSTGRES_URL");
  if (url_env == nullptr || *url_env == '\0') {
    std::cout << "store_claim_bench: STAGEHAND_TEST_POSTGRES_URL is not set; skipped "
                 "(run bench/store_claim.sh through scripts/test-postgres)\n";
    return 0;
  }
  const std::string url = url_env;
  const std::string database = "stagehand_claim_bench_" + std::to_string(::getpid());

  PostgresStoreOptions options;
  options.connection = url;
  options.database = database;
  options.pool_size = kConnections;
  Result<std::unique_ptr<TaskStore>> opened =
      OpenPostgresTaskStore("bench", options, SystemClock::Instance());
  if (!opened.ok()) {
    std::cerr << "store_claim_bench: " << opened.status().ToString() << "\n";
    return 1;
  }
  TaskStore& store = **opened;
  if (Status migrated = store.Migrate(); !migrated.ok()) {
    std::cerr << "store_claim_bench: " << migrated.ToString() << "\n";
    return 1;
  }
  TaskSchedule schedule;
  schedule.settings.cadence = Cadence::Every(std::chrono::milliseconds(0));
  schedule.settings.timeout_after_duration = "PT1M";
  for (int row = 0; row < kConnections * std::max(kRowsPerConnection, batch); ++row) {
    if (Result<UpsertResult> r = store.Upsert(std::to_string(row), schedule); !r.ok()) {
      std::cerr << "store_claim_bench: " << r.status().ToString() << "\n";
      return 1;
    }
  }

  // The measurements run interleaved in rounds, in a rotating order, so that a change in the
  // machine's load during the run affects all of them alike.
  RunStore(store, kWarmUp);
  const std::string bench_url = WithDatabase(url, database);
  const int rounds = std::max(1, std::min(kRounds, duration_seconds / 2));
  const int round_seconds = std::max(1, duration_seconds / rounds);
  long long our_pairs = 0;
  long long our_failures = 0;
  double our_seconds = 0;
  double pgbench_sum = 0;
  double pgbench_per_connection_sum = 0;
  bool pgbench_failed = false;
  double our_cpu = 0;      // client CPU seconds of our runs
  double pgbench_cpu = 0;  // pgbench's CPU seconds (-j 2 runs)
  double pgbench_pairs = 0;
  double batched_sum = 0;
  const int steps = batch > 0 ? 4 : 3;
  for (int round = 0; round < rounds; ++round) {
    for (int step = 0; step < steps; ++step) {
      switch ((round + step) % steps) {
        case 0: {
          const double cpu_before = CpuSeconds(RUSAGE_SELF);
          const StoreRun run = RunStore(store, seconds(round_seconds));
          our_cpu += CpuSeconds(RUSAGE_SELF) - cpu_before;
          our_pairs += run.pairs;
          our_failures += run.failures;
          our_seconds += run.seconds;
          break;
        }
        case 1: {
          const double cpu_before = CpuSeconds(RUSAGE_CHILDREN);
          const double tps = RunPgbenchPairs(bench_url, kPgbenchThreads[0], round_seconds);
          pgbench_failed = pgbench_failed || tps <= 0;
          pgbench_sum += tps;
          pgbench_cpu += CpuSeconds(RUSAGE_CHILDREN) - cpu_before;
          pgbench_pairs += tps * round_seconds;
          break;
        }
        case 2: {
          const double tps = RunPgbenchPairs(bench_url, kPgbenchThreads[1], round_seconds);
          pgbench_failed = pgbench_failed || tps <= 0;
          pgbench_per_connection_sum += tps;
          break;
        }
        case 3: {
          const double runs =
              RunPgbenchBatched(bench_url, kPgbenchThreads[0], round_seconds, batch);
          pgbench_failed = pgbench_failed || runs <= 0;
          batched_sum += runs;
          break;
        }
      }
    }
  }
  const double ours = our_seconds > 0 ? static_cast<double>(our_pairs) / our_seconds : 0;
  const double pgbench = pgbench_sum / rounds;
  const double pgbench_per_connection = pgbench_per_connection_sum / rounds;
  opened->reset();
  const std::string drop = ShellQuote(Tool("psql")) + " -q -X " + ShellQuote(url) +
                           " -c 'DROP DATABASE IF EXISTS " + database +
                           " WITH (FORCE)' > /dev/null";
  if (std::system(drop.c_str()) != 0) {
    std::cerr << "store_claim_bench: could not drop " << database << "\n";
  }

  char json[1024];
  int length = std::snprintf(
      json, sizeof json,
      "{\"benchmark\":\"store_claim_release\",\"connections\":%d,\"rows\":%d,\"seconds\":%d,"
      "\"rounds\":%d,\"store_pairs_per_second\":%.1f,\"store_pairs\":%lld,\"store_failures\":%lld,"
      "\"pgbench_mode\":\"prepared\",\"pgbench_pairs_per_second\":%.1f,\"pgbench_threads\":%d,"
      "\"ratio\":%.3f,\"pgbench_per_connection_pairs_per_second\":%.1f,"
      "\"pgbench_per_connection_threads\":%d,\"ratio_per_connection\":%.3f,"
      "\"store_client_cpu_us_per_pair\":%.1f,\"pgbench_client_cpu_us_per_pair\":%.1f",
      kConnections, kConnections * kRowsPerConnection, rounds * round_seconds, rounds, ours,
      our_pairs, our_failures, pgbench, kPgbenchThreads[0], pgbench > 0 ? ours / pgbench : 0.0,
      pgbench_per_connection, kPgbenchThreads[1],
      pgbench_per_connection > 0 ? ours / pgbench_per_connection : 0.0,
      our_pairs > 0 ? our_cpu * 1e6 / static_cast<double>(our_pairs) : 0.0,
      pgbench_pairs > 0 ? pgbench_cpu * 1e6 / pgbench_pairs : 0.0);
  if (batch > 0) {
    length += std::snprintf(json + length, sizeof json - static_cast<size_t>(length),
                            ",\"batch\":%d,\"pgbench_batched_runs_per_second\":%.1f", batch,
                            batched_sum / rounds);
  }
  std::snprintf(json + length, sizeof json - static_cast<size_t>(length), "}");
  std::cout << json << "\n";
  if (!out_path.empty()) std::ofstream(out_path) << json << "\n";
  return !pgbench_failed && our_failures == 0 ? 0 : 1;
}
