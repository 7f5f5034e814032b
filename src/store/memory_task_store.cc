#include "stagehand/store/memory_task_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "stagehand/base/check.h"
#include "stagehand/model/task_state.h"
#include "store/memory_task_table.h"
#include "store/next_run.h"
#include "store/prune_rule.h"
#include "store/row_rules.h"
#include "store/run_history_support.h"
#include "store/task_pause.h"

namespace stagehand::testing {

namespace {

using store_internal::NextRunPlan;

// A subscription on a MemoryTaskTable. Destruction unregisters the listener, then waits for a
// delivery in progress on another thread to finish, so no call starts or runs after it returns.
class MemoryNotifications final : public Notifications {
 public:
  MemoryNotifications(std::shared_ptr<MemoryTaskTable> table,
                      std::shared_ptr<MemoryTaskTable::Listener> listener)
      : table_(std::move(table)), listener_(std::move(listener)) {}

  ~MemoryNotifications() override {
    table_->RemoveListener(listener_);
    RecursiveMutexLock call_lock(listener_->call_mu);
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
  MutexLock lock(health_mu_);
  if (unavailable && !unavailable_) unavailable_since_ = clock_.MonoNow();
  if (!unavailable && unavailable_) ++reconnects_;
  unavailable_ = unavailable;
}

DatabaseHealth MemoryTaskStore::Health() const {
  MutexLock lock(health_mu_);
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

Status MemoryTaskStore::Migrate() { return BeginStatement(); }

Result<UpsertResult> MemoryTaskStore::Upsert(const std::string& id, const TaskSchedule& schedule) {
  STAGEHAND_RETURN_IF_ERROR(schedule.settings.Validate());
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
      RowTicket::Decode(*read->current_run_ticket).paused()) {
    return ConflictError(fmt::format("Task {} is not running", id));
  }
  Result<TaskSettingsV2> settings = TaskSettingsV2::FromJson(read->settings_json);
  if (!settings.ok()) {
    return InvalidArgumentError(fmt::format("plugin {}: task {} has invalid settings_json: {}",
                                            plugin_id_, id, settings.status().message()));
  }
  const std::string& ticket = *read->current_run_ticket;
  if (RowTicket::Decode(ticket).cancel_requested) return Status::Ok();

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

std::unique_ptr<Notifications> MemoryTaskStore::Listen(
    std::function<void(const StoreEvent&)> handler) {
  auto listener = std::make_shared<MemoryTaskTable::Listener>();
  listener->handler = std::move(handler);
  table_->AddListener(listener);
  return std::make_unique<MemoryNotifications>(table_, std::move(listener));
}

}  // namespace stagehand::testing
