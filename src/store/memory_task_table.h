// The in-memory table behind MemoryTaskStore: the rows, runs, registrations and idempotency keys
// of one plugin, shared by every store opened on it. Private to src/store/memory_*.cc.
#pragma once

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "stagehand/base/check.h"
#include "stagehand/base/mutex.h"
#include "stagehand/base/recursive_mutex.h"
#include "stagehand/model/task_state.h"
#include "stagehand/store/memory_task_store.h"
#include "store/next_run.h"
#include "store/prune_rule.h"
#include "store/row_rules.h"
#include "store/run_history_support.h"
#include "store/task_pause.h"

namespace stagehand::testing {

// A run as the table holds it: with its seq, the order in which its task's starts were recorded
// (1, 2, ...), by which the count-based trim goes, as the SQL stores' does.
struct StoredRun {
  TaskRun run;
  std::int64_t seq = 0;
};

// The run history of a table, by run id.
using RunMap = std::map<std::string, StoredRun>;

// A task's registration: the host that registered or refreshed it last, and when.
struct Registration {
  std::string host;
  WallTime last_seen_at;
};

// The registrations of a table, by task id.
using RegistrationMap = std::map<std::string, Registration>;

// Whether `a` is newer than `b` in a task's pages (start, then run id, descending).
inline bool Newer(const TaskRun& a, const TaskRun& b) {
  return a.started_at != b.started_at ? a.started_at > b.started_at : a.run_id > b.run_id;
}

// Records a run as running unless its run id is recorded, with the next seq of its task.
inline void StartRun(RunMap& runs, const std::string& run_id, const std::string& task_id,
                     const RunOrigin& origin, WallTime started_at) {
  if (runs.contains(run_id)) return;
  std::int64_t seq = 0;
  for (const auto& [id, stored] : runs) {
    if (stored.run.task_id == task_id) seq = std::max(seq, stored.seq);
  }
  StoredRun stored;
  stored.run.run_id = run_id;
  stored.run.task_id = task_id;
  stored.run.origin = origin;
  stored.run.started_at = started_at;
  stored.run.finish.outcome = RunOutcome::kRunning;
  stored.seq = seq + 1;
  runs.emplace(run_id, std::move(stored));
}

// Closes the run `run_id` with `finish` at `at` if it is running or was closed as lost. Returns
// its task when it did.
inline std::optional<std::string> CloseRun(RunMap& runs, const std::string& run_id,
                                           const RunFinish& finish, WallTime at,
                                           std::size_t max_output_bytes) {
  auto it = runs.find(run_id);
  if (it == runs.end()) return std::nullopt;
  TaskRun& run = it->second.run;
  if (run.ended_at && run.finish.outcome != RunOutcome::kLost) return std::nullopt;
  run.ended_at = at;
  run.finish = finish;
  run.finish.output_tail =
      std::string(store_internal::OutputTail(finish.output_tail, max_output_bytes));
  return run.task_id;
}

// Removes the ended runs of `task_id` beyond its `keep` newest by seq, within kRunTrimWindow below
// that bound, but those in `closed` (the runs the caller just closed, kept until a later end as
// the SQL stores keep them).
inline void TrimTask(RunMap& runs, const std::string& task_id, int keep,
                     const std::vector<std::string>& closed) {
  std::int64_t latest = 0;
  for (const auto& [id, stored] : runs) {
    if (stored.run.task_id == task_id) latest = std::max(latest, stored.seq);
  }
  std::erase_if(runs, [&](const auto& entry) {
    const StoredRun& stored = entry.second;
    const std::int64_t bound = latest - keep;
    return stored.run.task_id == task_id && stored.seq <= bound &&
           stored.seq > bound - kRunTrimWindow && stored.run.ended_at &&
           std::find(closed.begin(), closed.end(), stored.run.run_id) == closed.end();
  });
}

// Closes the running run `run_id` as lost. Returns whether it did.
inline bool LoseRun(RunMap& runs, std::string_view run_id, WallTime now,
                    const std::string& error_json) {
  auto it = runs.find(std::string(run_id));
  if (it == runs.end() || it->second.run.ended_at) return false;
  it->second.run.ended_at = now;
  it->second.run.finish = RunFinish{RunOutcome::kLost, error_json};
  return true;
}

// An idempotency key as the table keeps it.
struct KeptKey {
  std::string fingerprint;
  KeptAnswer answer;
  WallTime expires_at;
};
using KeyMap = std::map<std::string, KeptKey, std::less<>>;

struct MemoryTaskStore::Snapshot {
  std::map<std::string, TaskRow> rows;
  RunMap runs;
  RegistrationMap registrations;
  KeyMap keys;
};

// The rows of one plugin's table and the listeners of every store opened on it. Thread-safe: the
// rows and the listener list are guarded by `mu`; each listener's handler runs under that
// listener's own `call_mu`, never under `mu`.
class MemoryTaskTable {
 public:
  struct Listener {
    std::function<void(const StoreEvent&)> handler;
    // Held while the handler runs; recursive so that a handler whose own write notifies it again
    // does not deadlock on itself.
    RecursiveMutex call_mu;
    bool active STAGEHAND_GUARDED_BY(call_mu) = true;
  };

  // Runs `fn(rows)` under the table lock and returns its result.
  template <typename Fn>
  auto WithRows(Fn&& fn) {
    MutexLock lock(mu_);
    return std::forward<Fn>(fn)(rows_);
  }

  // Runs `fn(rows, runs)` under the table lock and returns its result.
  template <typename Fn>
  auto WithRowsAndRuns(Fn&& fn) {
    MutexLock lock(mu_);
    return std::forward<Fn>(fn)(rows_, runs_);
  }

  // Runs `fn(rows, runs, registrations)` under the table lock and returns its result.
  template <typename Fn>
  auto WithEverything(Fn&& fn) {
    MutexLock lock(mu_);
    return std::forward<Fn>(fn)(rows_, runs_, registrations_);
  }

  std::shared_ptr<const MemoryTaskStore::Snapshot> TakeSnapshot() {
    MutexLock keys_lock(keys_mu_);
    MutexLock lock(mu_);
    auto snapshot = std::make_shared<MemoryTaskStore::Snapshot>();
    snapshot->rows = rows_;
    snapshot->runs = runs_;
    snapshot->registrations = registrations_;
    snapshot->keys = keys_;
    return snapshot;
  }

  void RollBackTo(const MemoryTaskStore::Snapshot& snapshot) {
    MutexLock keys_lock(keys_mu_);
    MutexLock lock(mu_);
    rows_ = snapshot.rows;
    for (const auto& [run_id, run] : runs_) {
      if (!snapshot.runs.contains(run_id)) vanished_starts_.insert(run_id);
    }
    runs_ = snapshot.runs;
    registrations_ = snapshot.registrations;
    ++server_changes_;
    keys_ = snapshot.keys;
  }

  // Runs `fn(keys)` holding the keys' lock, which serialises the keyed requests of every store on
  // the table (a keyed request's `apply` runs under it, as under a row lock of its key).
  template <typename Fn>
  auto WithKeys(Fn&& fn) {
    MutexLock lock(keys_mu_);
    return std::forward<Fn>(fn)(keys_);
  }

  // Which of `run_ids` had their record taken by a roll-back (a failover to a server that lacked
  // it), forgetting them: their releases write the record whole and say so.
  std::set<std::string, std::less<>> TakeVanishedStarts(std::span<const std::string> run_ids) {
    MutexLock lock(mu_);
    std::set<std::string, std::less<>> taken;
    for (const std::string& run_id : run_ids) {
      if (vanished_starts_.erase(run_id) > 0) taken.insert(run_id);
    }
    return taken;
  }

  std::int64_t server_changes() {
    MutexLock lock(mu_);
    return server_changes_;
  }

  void AddListener(std::shared_ptr<Listener> listener) {
    MutexLock lock(mu_);
    listeners_.push_back(std::move(listener));
  }

  void RemoveListener(const std::shared_ptr<Listener>& listener) {
    MutexLock lock(mu_);
    std::erase(listeners_, listener);
  }

  // Delivers `events` to every active listener, synchronously on the calling thread. Must not be
  // called with the table lock held.
  void Publish(const std::vector<StoreEvent>& events) {
    if (events.empty()) return;
    std::vector<std::shared_ptr<Listener>> targets;
    {
      MutexLock lock(mu_);
      targets = listeners_;
    }
    for (const std::shared_ptr<Listener>& listener : targets) {
      RecursiveMutexLock call_lock(listener->call_mu);
      if (!listener->active) continue;
      for (const StoreEvent& event : events) listener->handler(event);
    }
  }

 private:
  Mutex mu_;
  // By id, so States() is ordered.
  std::map<std::string, TaskRow> rows_ STAGEHAND_GUARDED_BY(mu_);
  RunMap runs_ STAGEHAND_GUARDED_BY(mu_);
  // See TakeVanishedStarts.
  std::set<std::string, std::less<>> vanished_starts_ STAGEHAND_GUARDED_BY(mu_);
  RegistrationMap registrations_ STAGEHAND_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Listener>> listeners_ STAGEHAND_GUARDED_BY(mu_);
  std::int64_t server_changes_ STAGEHAND_GUARDED_BY(mu_) = 0;
  // Taken before mu_ where both are held (a keyed request's `apply` writes rows under it).
  Mutex keys_mu_;
  KeyMap keys_ STAGEHAND_GUARDED_BY(keys_mu_);
};

// One event of `kind` per id, in order.
inline std::vector<StoreEvent> EventsFor(StoreEvent::Kind kind,
                                         const std::vector<std::string>& ids) {
  std::vector<StoreEvent> events;
  events.reserve(ids.size());
  for (const std::string& id : ids) events.push_back(StoreEvent{kind, id});
  return events;
}

}  // namespace stagehand::testing
