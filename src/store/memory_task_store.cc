#include "stagehand/store/memory_task_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "stagehand/base/check.h"
#include "stagehand/model/task_state.h"
#include "store/next_run.h"
#include "store/prune_rule.h"
#include "store/row_rules.h"
#include "store/run_history_support.h"
#include "store/task_pause.h"

namespace stagehand::testing {

namespace {

using store_internal::NextRunPlan;

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
bool Newer(const TaskRun& a, const TaskRun& b) {
  return a.started_at != b.started_at ? a.started_at > b.started_at : a.run_id > b.run_id;
}

// Records a run as running unless its run id is recorded, with the next seq of its task.
void StartRun(RunMap& runs, const std::string& run_id, const std::string& task_id,
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
std::optional<std::string> CloseRun(RunMap& runs, const std::string& run_id,
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
void TrimTask(RunMap& runs, const std::string& task_id, int keep,
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
bool LoseRun(RunMap& runs, std::string_view run_id, WallTime now, const std::string& error_json) {
  auto it = runs.find(std::string(run_id));
  if (it == runs.end() || it->second.run.ended_at) return false;
  it->second.run.ended_at = now;
  it->second.run.finish = RunFinish{RunOutcome::kLost, error_json};
  return true;
}

}  // namespace

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
    std::recursive_mutex call_mu;
    bool active = true;  // guarded by call_mu
  };

  // Runs `fn(rows)` under the table lock and returns its result.
  template <typename Fn>
  auto WithRows(Fn&& fn) {
    std::lock_guard lock(mu_);
    return std::forward<Fn>(fn)(rows_);
  }

  // Runs `fn(rows, runs)` under the table lock and returns its result.
  template <typename Fn>
  auto WithRowsAndRuns(Fn&& fn) {
    std::lock_guard lock(mu_);
    return std::forward<Fn>(fn)(rows_, runs_);
  }

  // Runs `fn(rows, runs, registrations)` under the table lock and returns its result.
  template <typename Fn>
  auto WithEverything(Fn&& fn) {
    std::lock_guard lock(mu_);
    return std::forward<Fn>(fn)(rows_, runs_, registrations_);
  }

  std::shared_ptr<const MemoryTaskStore::Snapshot> TakeSnapshot() {
    std::lock_guard keys_lock(keys_mu_);
    std::lock_guard lock(mu_);
    auto snapshot = std::make_shared<MemoryTaskStore::Snapshot>();
    snapshot->rows = rows_;
    snapshot->runs = runs_;
    snapshot->registrations = registrations_;
    snapshot->keys = keys_;
    return snapshot;
  }

  void RollBackTo(const MemoryTaskStore::Snapshot& snapshot) {
    std::lock_guard keys_lock(keys_mu_);
    std::lock_guard lock(mu_);
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
    std::lock_guard lock(keys_mu_);
    return std::forward<Fn>(fn)(keys_);
  }

  // Which of `run_ids` had their record taken by a roll-back (a failover to a server that lacked
  // it), forgetting them: their releases write the record whole and say so.
  std::set<std::string, std::less<>> TakeVanishedStarts(std::span<const std::string> run_ids) {
    std::lock_guard lock(mu_);
    std::set<std::string, std::less<>> taken;
    for (const std::string& run_id : run_ids) {
      if (vanished_starts_.erase(run_id) > 0) taken.insert(run_id);
    }
    return taken;
  }

  std::int64_t server_changes() {
    std::lock_guard lock(mu_);
    return server_changes_;
  }

  void AddListener(std::shared_ptr<Listener> listener) {
    std::lock_guard lock(mu_);
    listeners_.push_back(std::move(listener));
  }

  void RemoveListener(const std::shared_ptr<Listener>& listener) {
    std::lock_guard lock(mu_);
    std::erase(listeners_, listener);
  }

  // Delivers `events` to every active listener, synchronously on the calling thread. Must not be
  // called with the table lock held.
  void Publish(const std::vector<StoreEvent>& events) {
    if (events.empty()) return;
    std::vector<std::shared_ptr<Listener>> targets;
    {
      std::lock_guard lock(mu_);
      targets = listeners_;
    }
    for (const std::shared_ptr<Listener>& listener : targets) {
      std::lock_guard call_lock(listener->call_mu);
      if (!listener->active) continue;
      for (const StoreEvent& event : events) listener->handler(event);
    }
  }

 private:
  std::mutex mu_;
  std::map<std::string, TaskRow> rows_;  // by id, so States() is ordered
  RunMap runs_;
  std::set<std::string, std::less<>> vanished_starts_;  // see TakeVanishedStarts
  RegistrationMap registrations_;
  std::vector<std::shared_ptr<Listener>> listeners_;
  std::int64_t server_changes_ = 0;
  // Taken before mu_ where both are held (a keyed request's `apply` writes rows under it).
  std::mutex keys_mu_;
  KeyMap keys_;  // guarded by keys_mu_
};

namespace {

// A subscription on a MemoryTaskTable. Destruction unregisters the listener, then waits for a
// delivery in progress on another thread to finish, so no call starts or runs after it returns.
class MemoryNotifications final : public Notifications {
 public:
  MemoryNotifications(std::shared_ptr<MemoryTaskTable> table,
                      std::shared_ptr<MemoryTaskTable::Listener> listener)
      : table_(std::move(table)), listener_(std::move(listener)) {}

  ~MemoryNotifications() override {
    table_->RemoveListener(listener_);
    std::lock_guard call_lock(listener_->call_mu);
    listener_->active = false;
  }

  MemoryNotifications(const MemoryNotifications&) = delete;
  MemoryNotifications& operator=(const MemoryNotifications&) = delete;

 private:
  std::shared_ptr<MemoryTaskTable> table_;
  std::shared_ptr<MemoryTaskTable::Listener> listener_;
};

// Resets every run whose expiry has passed, closing its history as lost, and returns the reset
// ids (the janitor, §7). Expired pauses are cleared without a record, their ids appended to
// `resumed`.
std::vector<std::string> SweepRows(std::map<std::string, TaskRow>& rows, RunMap& runs, WallTime now,
                                   std::vector<std::string>& resumed) {
  std::vector<std::string> swept;
  const std::string timed_out = ErrorJson("Task timed out");
  for (auto& [id, row] : rows) {
    const std::string ticket = row.current_run_ticket.value_or("");
    switch (store_internal::SweepRow(row, now)) {
      case store_internal::SweepOutcome::kUntouched:
        break;
      case store_internal::SweepOutcome::kResumed:
        resumed.push_back(id);
        break;
      case store_internal::SweepOutcome::kSwept:
        if (!ticket.empty()) {
          LoseRun(runs, store_internal::RunIdOfTicket(ticket), now, timed_out);
        }
        swept.push_back(id);
        break;
    }
  }
  return swept;
}

std::vector<StoreEvent> EventsFor(StoreEvent::Kind kind, const std::vector<std::string>& ids) {
  std::vector<StoreEvent> events;
  events.reserve(ids.size());
  for (const std::string& id : ids) events.push_back(StoreEvent{kind, id});
  return events;
}

}  // namespace

MemoryTaskStore::MemoryTaskStore(std::string plugin_id, const Clock& clock)
    : MemoryTaskStore(std::move(plugin_id), clock, std::make_shared<MemoryTaskTable>()) {}

MemoryTaskStore::MemoryTaskStore(std::string plugin_id, const Clock& clock,
                                 std::shared_ptr<MemoryTaskTable> table)
    : plugin_id_(std::move(plugin_id)),
      clock_(clock),
      table_(std::move(table)),
      limits_(std::make_unique<store_internal::LimitsHolder>()) {
  STAGEHAND_CHECK(table_ != nullptr);
}

MemoryTaskStore::~MemoryTaskStore() = default;

void MemoryTaskStore::SetUnavailable(bool unavailable) {
  std::lock_guard lock(health_mu_);
  if (unavailable && !unavailable_) unavailable_since_ = clock_.MonoNow();
  if (!unavailable && unavailable_) ++reconnects_;
  unavailable_ = unavailable;
}

DatabaseHealth MemoryTaskStore::Health() const {
  std::lock_guard lock(health_mu_);
  DatabaseHealth health;
  health.reachable = !unavailable_;
  health.reconnects = reconnects_;
  health.server_changes = table_->server_changes();
  if (unavailable_) {
    health.unreachable_since = unavailable_since_;
    health.reason = "database unavailable (simulated)";
  }
  return health;
}

std::shared_ptr<const MemoryTaskStore::Snapshot> MemoryTaskStore::TakeSnapshot() const {
  return table_->TakeSnapshot();
}

void MemoryTaskStore::SimulateFailover(const Snapshot& snapshot) {
  table_->RollBackTo(snapshot);
  table_->Publish({StoreEvent{StoreEvent::Kind::kServerChanged, ""}});
}

std::uint64_t MemoryTaskStore::statement_count() const { return statement_count_; }

void MemoryTaskStore::PutRow(const TaskRow& row) {
  table_->WithRows([&](std::map<std::string, TaskRow>& rows) { rows[row.id] = row; });
}

Status MemoryTaskStore::BeginStatement() {
  if (unavailable_) {
    return UnavailableError(fmt::format("plugin {}: database unavailable (simulated)", plugin_id_));
  }
  ++statement_count_;
  return Status::Ok();
}

WallTime MemoryTaskStore::DatabaseTime() const {
  return std::chrono::floor<std::chrono::milliseconds>(clock_.Now());
}

Result<KeyedOutcome> MemoryTaskStore::ApplyOnce(const KeyedRequest& request,
                                                const std::function<Result<KeptAnswer>()>& apply) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  return table_->WithKeys([&](KeyMap& keys) -> Result<KeyedOutcome> {
    const WallTime now = DatabaseTime();
    std::erase_if(keys, [&](const auto& entry) { return entry.second.expires_at <= now; });
    if (const auto found = keys.find(request.key); found != keys.end()) {
      if (found->second.fingerprint != request.fingerprint) {
        return ConflictError(
            fmt::format("the idempotency key {} was first sent with another request", request.key));
      }
      return KeyedOutcome{found->second.answer, /*replayed=*/true};
    }
    STAGEHAND_ASSIGN_OR_RETURN(KeptAnswer answer, apply());
    STAGEHAND_RETURN_IF_ERROR(BeginStatement());
    keys[request.key] = KeptKey{request.fingerprint, answer, now + request.retention};
    return KeyedOutcome{std::move(answer), /*replayed=*/false};
  });
}

Status MemoryTaskStore::Migrate() { return BeginStatement(); }

Result<UpsertResult> MemoryTaskStore::Upsert(const std::string& id, const TaskSchedule& schedule) {
  STAGEHAND_RETURN_IF_ERROR(ValidateTaskSchedule(schedule));
  const WallTime now = DatabaseTime();
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan insert_plan,
                             store_internal::PlanInsertStart(schedule, now));
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan reregister_plan,
                             store_internal::PlanReregisterStart(schedule, now));
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());

  const store_internal::PlannedUpsert plan{insert_plan, reregister_plan,
                                           schedule.settings.ToJson()};
  UpsertResult result{std::nullopt, now};
  table_->WithRows([&](std::map<std::string, TaskRow>& rows) {
    auto [it, inserted] = rows.try_emplace(id);
    TaskRow& row = it->second;
    row.id = id;
    store_internal::RegisterRow(row, inserted, plan, now);
    result.next_run_start_at = row.next_run_start_at;
    result.version = store_internal::RowVersion(row);
  });
  table_->Publish({StoreEvent{StoreEvent::Kind::kUpsert, id}});
  return result;
}

Result<std::vector<UpsertResult>> MemoryTaskStore::UpsertMany(std::span<const TaskUpsert> tasks) {
  const WallTime now = DatabaseTime();
  STAGEHAND_ASSIGN_OR_RETURN(std::vector<store_internal::PlannedUpsert> planned,
                             store_internal::PlanUpserts(tasks, now));
  const std::vector<store_internal::PlannedUpsert>& plans = planned;
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  std::vector<UpsertResult> results(tasks.size(), UpsertResult{std::nullopt, now});
  table_->WithEverything(
      [&](std::map<std::string, TaskRow>& rows, RunMap&, RegistrationMap& registrations) {
        for (std::size_t i = 0; i < tasks.size(); ++i) {
          if (tasks[i].registered_by) {
            registrations[tasks[i].id] = Registration{*tasks[i].registered_by, now};
          }
          auto [it, inserted] = rows.try_emplace(tasks[i].id);
          TaskRow& row = it->second;
          row.id = tasks[i].id;
          store_internal::RegisterRow(row, inserted, plans[i], now);
          results[i].next_run_start_at = row.next_run_start_at;
          results[i].version = store_internal::RowVersion(row);
        }
      });
  std::vector<StoreEvent> events;
  events.reserve(tasks.size());
  for (const TaskUpsert& task : tasks) events.push_back({StoreEvent::Kind::kUpsert, task.id});
  table_->Publish(events);
  return results;
}

Result<PollResult> MemoryTaskStore::Poll(std::span<const std::string> ids, bool sweep_expired) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  PollResult result;
  result.db_now = now;
  std::vector<std::string> resumed;
  std::vector<std::optional<TaskRow>> found(ids.size());
  table_->WithRowsAndRuns([&](std::map<std::string, TaskRow>& rows, RunMap& runs) {
    if (sweep_expired) result.swept_ids = SweepRows(rows, runs, now, resumed);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (auto it = rows.find(ids[i]); it != rows.end()) found[i] = it->second;
    }
  });
  table_->Publish(EventsFor(StoreEvent::Kind::kSweep, result.swept_ids));
  table_->Publish(EventsFor(StoreEvent::Kind::kRelease, resumed));

  result.entries.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    PollEntry& entry = result.entries.emplace_back();
    entry.id = ids[i];
    if (!found[i]) {
      entry.readiness = Readiness::kMissing;
      continue;
    }
    const TaskRow& row = *found[i];
    entry.next_run_start_at = row.next_run_start_at;
    entry.version = store_internal::RowVersion(row);
    entry.running = row.current_run_ticket.has_value();
    entry.current_run_expires_at = row.current_run_expires_at;
    if (!entry.running && row.next_run_start_at &&
        (!result.earliest_next || *row.next_run_start_at < *result.earliest_next)) {
      result.earliest_next = row.next_run_start_at;
    }
    Result<TaskSettingsV2> settings = TaskSettingsV2::FromJson(row.settings_json);
    if (!settings.ok()) {
      entry.readiness = Readiness::kInvalidSettings;
      entry.settings_error = settings.status().message();
      continue;
    }
    entry.settings = std::move(*settings);
    const bool due = row.next_run_start_at && *row.next_run_start_at <= now;
    entry.readiness = due && !entry.running ? Readiness::kReady : Readiness::kNotReady;
  }
  return result;
}

Result<ClaimResult> MemoryTaskStore::Claim(const std::string& id, const std::string& ticket,
                                           std::chrono::milliseconds timeout,
                                           std::chrono::milliseconds lease) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  ClaimResult result;
  result.db_now = now;
  table_->WithRows([&](std::map<std::string, TaskRow>& rows) {
    auto it = rows.find(id);
    if (it == rows.end() ||
        !store_internal::ClaimRow(it->second, ticket, timeout, lease, std::nullopt, now)) {
      return;
    }
    result.claimed = true;
    result.expires_at = it->second.current_run_expires_at;
  });
  return result;
}

Result<std::vector<ClaimResult>> MemoryTaskStore::ClaimMany(std::span<const ClaimRequest> claims,
                                                            std::chrono::milliseconds lease) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  std::vector<ClaimResult> results(claims.size(), ClaimResult{false, now, std::nullopt});
  std::vector<StoreEvent> events;
  table_->WithRowsAndRuns([&](std::map<std::string, TaskRow>& rows, RunMap& runs) {
    for (std::size_t i = 0; i < claims.size(); ++i) {
      const ClaimRequest& claim = claims[i];
      auto it = rows.find(claim.id);
      if (it == rows.end() || !store_internal::ClaimRow(it->second, claim.ticket, claim.timeout,
                                                        lease, claim.expected_version, now)) {
        continue;
      }
      results[i].claimed = true;
      results[i].expires_at = it->second.current_run_expires_at;
      if (claim.history) StartRun(runs, claim.ticket, claim.id, *claim.history, now);
      events.push_back(StoreEvent{StoreEvent::Kind::kClaim, claim.id, claim.ticket});
    }
  });
  table_->Publish(events);
  if (lose_next_claim_answer_.exchange(false)) {
    return UnavailableError(fmt::format(
        "plugin {}: the connection was lost before the claim's answer (simulated)", plugin_id_));
  }
  return results;
}

void MemoryTaskStore::LoseNextClaimAnswer() { lose_next_claim_answer_ = true; }

Result<LeaseStatus> MemoryTaskStore::RenewLease(const std::string& id, const std::string& ticket,
                                                std::chrono::milliseconds timeout,
                                                std::chrono::milliseconds lease) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  return table_->WithRows([&](std::map<std::string, TaskRow>& rows) {
    auto it = rows.find(id);
    if (it == rows.end()) return LeaseStatus::kLost;
    return store_internal::RenewRow(it->second, ticket, timeout, lease, now);
  });
}

Result<bool> MemoryTaskStore::Reclaim(const std::string& id, const std::string& ticket,
                                      std::int64_t claimed_version,
                                      std::chrono::milliseconds timeout,
                                      std::chrono::milliseconds lease) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  const bool reclaimed = table_->WithRows([&](std::map<std::string, TaskRow>& rows) {
    auto it = rows.find(id);
    return it != rows.end() &&
           store_internal::ReclaimRow(it->second, ticket, claimed_version, timeout, lease, now);
  });
  if (reclaimed) table_->Publish({StoreEvent{StoreEvent::Kind::kClaim, id, ticket}});
  return reclaimed;
}

Result<bool> MemoryTaskStore::Release(const std::string& id, const std::string& ticket,
                                      const TaskSchedule& schedule,
                                      const std::optional<std::string>& error_json) {
  const WallTime now = DatabaseTime();
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan plan, store_internal::PlanReleaseNext(schedule, now));
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const bool released = table_->WithRows([&](std::map<std::string, TaskRow>& rows) {
    auto it = rows.find(id);
    return it != rows.end() &&
           store_internal::ReleaseRow(it->second, ticket, plan, error_json, now);
  });
  if (released) table_->Publish({StoreEvent{StoreEvent::Kind::kRelease, id}});
  return released;
}

Result<std::vector<ReleaseResult>> MemoryTaskStore::ReleaseMany(
    std::span<const ReleaseRequest> releases) {
  const WallTime now = DatabaseTime();
  std::vector<NextRunPlan> plans;
  plans.reserve(releases.size());
  std::set<std::string_view> ids;
  for (const ReleaseRequest& release : releases) {
    if (!ids.insert(release.id).second) {
      return InvalidArgumentError("a batch of releases names task \"" + release.id + "\" twice");
    }
    STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan plan, store_internal::PlanRelease(release, now));
    plans.push_back(plan);
  }
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const RunHistoryLimits limits = limits_->Get();
  std::vector<ReleaseResult> results(releases.size());
  std::vector<std::string> released_ids;
  std::vector<std::string> tickets;
  for (const ReleaseRequest& release : releases) tickets.push_back(release.ticket);
  const std::set<std::string, std::less<>> vanished = table_->TakeVanishedStarts(tickets);
  table_->WithRowsAndRuns([&](std::map<std::string, TaskRow>& rows, RunMap& runs) {
    for (std::size_t i = 0; i < releases.size(); ++i) {
      const ReleaseRequest& release = releases[i];
      ReleaseResult& result = results[i];
      result.db_now = now;
      auto it = rows.find(release.id);
      if (release.history) {
        result.recorded = (release.retried || vanished.contains(release.ticket)) &&
                          !runs.contains(release.ticket);
        StartRun(runs, release.ticket, release.id, release.history->origin,
                 store_internal::ToMillis(release.history->started_at));
        if (std::optional<std::string> task = CloseRun(
                runs, release.ticket, release.history->finish, now, limits.max_output_bytes)) {
          TrimTask(runs, *task, limits.max_runs_per_task, {release.ticket});
        }
      }
      if (it == rows.end() ||
          !store_internal::ReleaseRow(it->second, release.ticket, plans[i], release.error_json, now,
                                      release.retried ? release.claimed_version : std::nullopt)) {
        continue;
      }
      result.released = true;
      result.next_run_start_at = it->second.next_run_start_at;
      result.version = store_internal::RowVersion(it->second);
      released_ids.push_back(release.id);
    }
  });
  table_->Publish(EventsFor(StoreEvent::Kind::kRelease, released_ids));
  return results;
}

Result<SkipResult> MemoryTaskStore::SkipSlot(const std::string& id, std::int64_t expected_version,
                                             WallTime slot, const TaskSchedule& schedule) {
  const WallTime now = DatabaseTime();
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan plan, store_internal::PlanSkipNext(schedule, slot, now));
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  SkipResult result;
  result.db_now = now;
  table_->WithRows([&](std::map<std::string, TaskRow>& rows) {
    auto it = rows.find(id);
    if (it == rows.end() || !store_internal::SkipRow(it->second, expected_version, plan, now)) {
      return;
    }
    result.skipped = true;
    result.next_run_start_at = it->second.next_run_start_at;
    result.version = store_internal::RowVersion(it->second);
  });
  if (result.skipped) table_->Publish({StoreEvent{StoreEvent::Kind::kRelease, id}});
  return result;
}

Status MemoryTaskStore::Trigger(const std::string& id) { return Trigger(id, TraceContext{}); }

Status MemoryTaskStore::Trigger(const std::string& id, const TraceContext& caller) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  Status status = table_->WithRows([&](std::map<std::string, TaskRow>& rows) {
    auto it = rows.find(id);
    if (it == rows.end()) return NotFoundError(fmt::format("Task {} does not exist", id));
    return store_internal::TriggerRow(it->second, now);
  });
  if (status.ok()) {
    StoreEvent event(StoreEvent::Kind::kTrigger, id);
    event.caller = caller;
    table_->Publish({std::move(event)});
  }
  return status;
}

Status MemoryTaskStore::Cancel(const std::string& id, std::chrono::milliseconds hold) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  std::optional<TaskRow> read =
      table_->WithRows([&](std::map<std::string, TaskRow>& rows) -> std::optional<TaskRow> {
        auto it = rows.find(id);
        if (it == rows.end()) return std::nullopt;
        return it->second;
      });
  if (!read) return NotFoundError(fmt::format("Task {} does not exist", id));
  if (!read->current_run_ticket || read->current_run_ticket->empty() ||
      store_internal::IsPausedTicket(*read->current_run_ticket)) {
    return ConflictError(fmt::format("Task {} is not running", id));
  }
  Result<TaskSettingsV2> settings = TaskSettingsV2::FromJson(read->settings_json);
  if (!settings.ok()) {
    return InvalidArgumentError(fmt::format("plugin {}: task {} has invalid settings_json: {}",
                                            plugin_id_, id, settings.status().message()));
  }
  const std::string& ticket = *read->current_run_ticket;
  if (ticket.starts_with(kCancelRequestedPrefix)) return Status::Ok();

  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  const bool marked = table_->WithRows([&](std::map<std::string, TaskRow>& rows) {
    auto it = rows.find(id);
    if (it == rows.end() || it->second.current_run_ticket != ticket) return false;
    return store_internal::CancelRow(it->second, hold, now).ok();
  });
  if (!marked) return ConflictError(fmt::format("Task {} is not running", id));
  table_->Publish({StoreEvent{StoreEvent::Kind::kCancel, id}});
  return Status::Ok();
}

Status MemoryTaskStore::Pause(const std::string& id, const PauseRequest& request,
                              std::chrono::milliseconds hold) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidatePause(request, now));
  Status status = table_->WithRows([&](std::map<std::string, TaskRow>& rows) {
    auto it = rows.find(id);
    if (it == rows.end()) return NotFoundError(fmt::format("Task {} does not exist", id));
    store_internal::PauseRow(it->second, request, hold, now);
    return Status::Ok();
  });
  if (status.ok()) table_->Publish({StoreEvent{StoreEvent::Kind::kUpsert, id}});
  return status;
}

Status MemoryTaskStore::Resume(const std::string& id) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  Status status = table_->WithRows([&](std::map<std::string, TaskRow>& rows) {
    auto it = rows.find(id);
    if (it == rows.end()) return NotFoundError(fmt::format("Task {} does not exist", id));
    return store_internal::ResumeRow(it->second);
  });
  if (status.ok()) table_->Publish({StoreEvent{StoreEvent::Kind::kRelease, id}});
  return status;
}

Result<std::vector<std::string>> MemoryTaskStore::SweepExpired() {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  std::vector<std::string> resumed;
  std::vector<std::string> swept =
      table_->WithRowsAndRuns([&](std::map<std::string, TaskRow>& rows, RunMap& runs) {
        return SweepRows(rows, runs, now, resumed);
      });
  table_->Publish(EventsFor(StoreEvent::Kind::kSweep, swept));
  table_->Publish(EventsFor(StoreEvent::Kind::kRelease, resumed));
  return swept;
}

Result<std::vector<TaskRow>> MemoryTaskStore::States() {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  return table_->WithRows([](std::map<std::string, TaskRow>& rows) {
    std::vector<TaskRow> out;
    out.reserve(rows.size());
    for (const auto& entry : rows) out.push_back(entry.second);
    return out;
  });
}

Status MemoryTaskStore::Delete(const std::string& id) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const bool erased =
      table_->WithRows([&](std::map<std::string, TaskRow>& rows) { return rows.erase(id) > 0; });
  if (erased) table_->Publish({StoreEvent{StoreEvent::Kind::kDelete, id}});
  return Status::Ok();
}

Result<WallTime> MemoryTaskStore::DatabaseNow() {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  return DatabaseTime();
}

void MemoryTaskStore::SetLimits(const RunHistoryLimits& limits) { limits_->Set(limits); }

RunHistoryLimits MemoryTaskStore::limits() const { return limits_->Get(); }

Status MemoryTaskStore::RecordStarts(std::span<const RunStart> starts) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidateStarts(starts));
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  table_->WithRowsAndRuns([&](std::map<std::string, TaskRow>&, RunMap& runs) {
    for (const RunStart& start : starts) {
      StartRun(runs, start.run_id, start.task_id, start.origin,
               start.started_at ? store_internal::ToMillis(*start.started_at) : now);
    }
  });
  return Status::Ok();
}

Result<std::size_t> MemoryTaskStore::RecordEnds(std::span<const RunEnd> ends) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidateEnds(ends));
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  const RunHistoryLimits limits = limits_->Get();
  return table_->WithRowsAndRuns([&](std::map<std::string, TaskRow>&, RunMap& runs) {
    std::vector<std::string> closed;
    std::vector<std::string> tasks;
    for (const RunEnd& end : ends) {
      const WallTime at = end.ended_at ? store_internal::ToMillis(*end.ended_at) : now;
      if (std::optional<std::string> task =
              CloseRun(runs, end.run_id, end.finish, at, limits.max_output_bytes)) {
        closed.push_back(end.run_id);
        tasks.push_back(std::move(*task));
      }
    }
    std::sort(tasks.begin(), tasks.end());
    tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
    for (const std::string& task : tasks) TrimTask(runs, task, limits.max_runs_per_task, closed);
    return closed.size();
  });
}

Result<RunPage> MemoryTaskStore::ListRuns(const std::string& task_id, int limit,
                                          const std::optional<std::string>& before) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidatePageSize(limit));
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  return table_->WithRowsAndRuns(
      [&](std::map<std::string, TaskRow>&, RunMap& runs) -> Result<RunPage> {
        std::optional<TaskRun> after;
        if (before) {
          if (std::optional<store_internal::RunCursor> cursor =
                  store_internal::DecodeRunCursor(*before)) {
            after.emplace();
            after->started_at = cursor->started_at;
            after->run_id = cursor->run_id;
          } else if (auto it = runs.find(*before); it != runs.end()) {
            after = it->second.run;
          } else {
            return InvalidArgumentError(
                fmt::format("before: '{}' is neither a page cursor nor a run id", *before));
          }
        }
        std::vector<const TaskRun*> of_task;
        for (const auto& [id, stored] : runs) {
          const TaskRun& run = stored.run;
          if (run.task_id == task_id && (!after || Newer(*after, run))) of_task.push_back(&run);
        }
        std::sort(of_task.begin(), of_task.end(),
                  [](const TaskRun* a, const TaskRun* b) { return Newer(*a, *b); });
        RunPage page;
        const std::size_t count = std::min(of_task.size(), static_cast<std::size_t>(limit));
        for (std::size_t i = 0; i < count; ++i) {
          TaskRun& run = page.runs.emplace_back(*of_task[i]);
          run.finish.output_tail.clear();
        }
        if (of_task.size() > count) {
          page.next_cursor =
              store_internal::EncodeRunCursor(page.runs.back().started_at, page.runs.back().run_id);
        }
        return page;
      });
}

Result<TaskRun> MemoryTaskStore::GetRun(const std::string& run_id) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  return table_->WithRowsAndRuns(
      [&](std::map<std::string, TaskRow>&, RunMap& runs) -> Result<TaskRun> {
        auto it = runs.find(run_id);
        if (it == runs.end()) return NotFoundError(fmt::format("Run {} does not exist", run_id));
        return it->second.run;
      });
}

Result<std::size_t> MemoryTaskStore::MarkLost(std::span<const std::string> run_ids,
                                              const std::string& error_json) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  return table_->WithRowsAndRuns([&](std::map<std::string, TaskRow>&, RunMap& runs) {
    std::size_t closed = 0;
    for (const std::string& run_id : run_ids) closed += LoseRun(runs, run_id, now, error_json);
    return closed;
  });
}

Result<std::size_t> MemoryTaskStore::PruneExpired(std::size_t max_rows) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime cutoff = DatabaseTime() - limits_->Get().max_age;
  return table_->WithRowsAndRuns([&](std::map<std::string, TaskRow>&, RunMap& runs) {
    std::vector<RunMap::iterator> expired;
    for (auto it = runs.begin(); it != runs.end(); ++it) {
      if (it->second.run.started_at < cutoff) expired.push_back(it);
    }
    std::sort(expired.begin(), expired.end(), [](RunMap::iterator a, RunMap::iterator b) {
      return a->second.run.started_at < b->second.run.started_at;
    });
    const std::size_t removed = std::min(expired.size(), max_rows);
    for (std::size_t i = 0; i < removed; ++i) runs.erase(expired[i]);
    return removed;
  });
}

Result<std::size_t> MemoryTaskStore::RefreshRegistrations(std::span<const std::string> task_ids,
                                                          const std::string& host) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  return table_->WithEverything(
      [&](std::map<std::string, TaskRow>& rows, RunMap&, RegistrationMap& registrations) {
        std::size_t recorded = 0;
        for (const std::string& id : task_ids) {
          if (!rows.contains(id)) continue;
          registrations[id] = Registration{host, now};
          ++recorded;
        }
        return recorded;
      });
}

Result<std::vector<PruneCandidate>> MemoryTaskStore::ListPruneCandidates(WallTime cutoff) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  return table_->WithEverything(
      [&](std::map<std::string, TaskRow>& rows, RunMap&, RegistrationMap& registrations) {
        std::vector<PruneCandidate> candidates;
        for (const auto& [id, row] : rows) {
          const auto registration = registrations.find(id);
          const bool registered = registration != registrations.end();
          const std::optional<WallTime> last_seen =
              registered ? std::optional(registration->second.last_seen_at) : std::nullopt;
          if (!store_internal::IsPruneCandidate(row, last_seen, cutoff, now)) continue;
          candidates.push_back(PruneCandidate{
              id, registered ? std::optional(registration->second.host) : std::nullopt, last_seen,
              row.last_run_ended_at, row.next_run_start_at});
        }
        return candidates;
      });
}

Result<std::vector<std::string>> MemoryTaskStore::PruneTasks(std::span<const std::string> task_ids,
                                                             WallTime cutoff, PruneScope scope) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  std::vector<std::string> deleted = table_->WithEverything(
      [&](std::map<std::string, TaskRow>& rows, RunMap& runs, RegistrationMap& registrations) {
        std::vector<std::string> ids;
        for (const std::string& id : task_ids) {
          const auto row = rows.find(id);
          if (row == rows.end()) continue;
          const auto registration = registrations.find(id);
          const bool registered = registration != registrations.end();
          if (!registered && scope != PruneScope::kIncludeUnregistered) continue;
          const std::optional<WallTime> last_seen =
              registered ? std::optional(registration->second.last_seen_at) : std::nullopt;
          if (!store_internal::IsPruneCandidate(row->second, last_seen, cutoff, now)) continue;
          rows.erase(row);
          if (registered) registrations.erase(registration);
          std::erase_if(runs, [&](const auto& entry) { return entry.second.run.task_id == id; });
          ids.push_back(id);
        }
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        return ids;
      });
  table_->Publish(EventsFor(StoreEvent::Kind::kDelete, deleted));
  return deleted;
}

std::unique_ptr<Notifications> MemoryTaskStore::Listen(
    std::function<void(const StoreEvent&)> handler) {
  auto listener = std::make_shared<MemoryTaskTable::Listener>();
  listener->handler = std::move(handler);
  table_->AddListener(listener);
  return std::make_unique<MemoryNotifications>(table_, std::move(listener));
}

}  // namespace stagehand::testing
