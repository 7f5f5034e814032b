// An in-memory TaskStore for engine unit tests and for users' tests. It follows the same contract
// as the SQL stores (the contract suite in tests/contract keeps them honest with each other), but
// its "database clock" is the injected Clock, so tests drive readiness and expiry with a
// testing::ManualClock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "stagehand/base/mutex.h"
#include "stagehand/store/request_keys.h"
#include "stagehand/store/run_history.h"
#include "stagehand/store/task_registrations.h"
#include "stagehand/store/task_store.h"

namespace stagehand::store_internal {
class LimitsHolder;
}  // namespace stagehand::store_internal

namespace stagehand::testing {

// The shared table (and run history) behind one or more MemoryTaskStores, standing in for one
// plugin database.
// Several stores on one table behave like several hosts on one database, and receive each
// other's events like PostgreSQL LISTEN/NOTIFY. Thread-safe.
class MemoryTaskTable;

// One "host" on a MemoryTaskTable, and its run history and task registrations (the table's). Times
// are the injected clock's, truncated to milliseconds like the SQL stores'. Listen() handlers run
// synchronously on the writing thread (of whichever store on the table wrote), after the table
// lock is released, so a handler may call the store. Thread-safe.
class MemoryTaskStore final : public TaskStore,
                              public RunHistory,
                              public TaskRegistrations,
                              public RequestKeys {
 public:
  // A store with a table of its own.
  MemoryTaskStore(std::string plugin_id, const Clock& clock);
  // A store on `table`, shared with other stores.
  MemoryTaskStore(std::string plugin_id, const Clock& clock,
                  std::shared_ptr<MemoryTaskTable> table);
  ~MemoryTaskStore() override;

  // Returns the table, to open another store on it.
  std::shared_ptr<MemoryTaskTable> table() const { return table_; }

  // Makes every later operation of this store fail with kUnavailable (true) or work again (false),
  // to test how callers survive a lost database. Other stores on the table are unaffected.
  void SetUnavailable(bool unavailable);
  // Makes the next ClaimMany take the rows it claims and then fail with kUnavailable, as a
  // connection lost after the database committed the claim and before its answer came.
  void LoseNextClaimAnswer();

  // A copy of the table's rows, run history and registrations (TakeSnapshot).
  struct Snapshot;
  // Returns the table as it is now.
  std::shared_ptr<const Snapshot> TakeSnapshot() const;
  // Puts the table back to `snapshot` and tells every store on it that the database's server
  // changed (StoreEvent::kServerChanged, delivered on this thread), as a failover to an
  // asynchronous standby that had replayed the writes up to the snapshot, and none after, would.
  void SimulateFailover(const Snapshot& snapshot);

  // Returns how many statements this store sent to the "database" (for statement-budget tests):
  // one per operation, two for a Cancel that reaches its update; none for PutRow or rejected input.
  std::uint64_t statement_count() const;

  // Replaces a row verbatim, as another writer (e.g. a Backstage worker) would. Notifies nobody
  // and works even while the store is unavailable.
  void PutRow(const TaskRow& row);

  const std::string& plugin_id() const override { return plugin_id_; }
  Status Migrate() override;
  Result<UpsertResult> Upsert(const std::string& id, const TaskSchedule& schedule) override;
  Result<std::vector<UpsertResult>> UpsertMany(std::span<const TaskUpsert> tasks) override;
  Result<PollResult> Poll(std::span<const std::string> ids, bool sweep_expired) override;
  Result<ClaimResult> Claim(const std::string& id, const std::string& ticket,
                            std::chrono::milliseconds timeout,
                            std::chrono::milliseconds lease) override;
  Result<std::vector<ClaimResult>> ClaimMany(std::span<const ClaimRequest> claims,
                                             std::chrono::milliseconds lease) override;
  Result<LeaseStatus> RenewLease(const std::string& id, const std::string& ticket,
                                 std::chrono::milliseconds timeout,
                                 std::chrono::milliseconds lease) override;
  Result<bool> Reclaim(const std::string& id, const std::string& ticket,
                       std::int64_t claimed_version, std::chrono::milliseconds timeout,
                       std::chrono::milliseconds lease) override;
  Result<bool> Release(const std::string& id, const std::string& ticket,
                       const TaskSchedule& schedule,
                       const std::optional<std::string>& error_json) override;
  Result<std::vector<ReleaseResult>> ReleaseMany(std::span<const ReleaseRequest> releases) override;
  Result<SkipResult> SkipSlot(const std::string& id, std::int64_t expected_version, WallTime slot,
                              const TaskSchedule& schedule) override;
  Status Trigger(const std::string& id) override;
  // Other stores on the table get the caller with the kTrigger event.
  Status Trigger(const std::string& id, const TraceContext& caller) override;
  Status Cancel(const std::string& id, std::chrono::milliseconds hold) override;
  Status Pause(const std::string& id, const PauseRequest& request,
               std::chrono::milliseconds hold) override;
  Status Resume(const std::string& id) override;
  Result<std::vector<std::string>> SweepExpired() override;
  Result<std::vector<TaskRow>> States() override;
  Status Delete(const std::string& id) override;
  Result<WallTime> DatabaseNow() override;
  std::unique_ptr<Notifications> Listen(std::function<void(const StoreEvent&)> handler) override;
  // Unreachable while SetUnavailable(true) holds, since it was set.
  DatabaseHealth Health() const override;
  RunHistory* history() override { return this; }
  TaskRegistrations* registrations() override { return this; }
  // The table's keys; a keyed request's writes are not rolled back when `apply` fails (it fails
  // only where the memory store wrote nothing).
  RequestKeys* request_keys() override { return this; }

  void SetLimits(const RunHistoryLimits& limits) override;
  RunHistoryLimits limits() const override;
  Status RecordStarts(std::span<const RunStart> starts) override;
  Result<std::size_t> RecordEnds(std::span<const RunEnd> ends) override;
  Result<RunPage> ListRuns(const std::string& task_id, int limit,
                           const std::optional<std::string>& before) override;
  Result<TaskRun> GetRun(const std::string& run_id) override;
  Result<std::size_t> MarkLost(std::span<const std::string> run_ids,
                               const std::string& error_json) override;
  Result<std::size_t> PruneExpired(std::size_t max_rows) override;

  Result<std::size_t> RefreshRegistrations(std::span<const std::string> task_ids,
                                           const std::string& host) override;
  Result<std::vector<PruneCandidate>> ListPruneCandidates(WallTime cutoff) override;
  Result<std::vector<std::string>> PruneTasks(std::span<const std::string> task_ids,
                                              WallTime cutoff, PruneScope scope) override;
  Result<bool> TablesExist() override { return true; }

  Result<KeyedOutcome> ApplyOnce(const KeyedRequest& request,
                                 const std::function<Result<KeptAnswer>()>& apply) override;

 private:
  // Counts one statement, or fails with kUnavailable while the store is marked unavailable.
  Status BeginStatement();
  // Returns the "database" clock: the injected clock, at the SQL stores' 1 ms precision.
  WallTime DatabaseTime() const;

  std::string plugin_id_;
  const Clock& clock_;
  std::shared_ptr<MemoryTaskTable> table_;
  std::atomic<bool> unavailable_{false};
  std::atomic<bool> lose_next_claim_answer_{false};
  mutable Mutex health_mu_;
  MonoTime unavailable_since_ STAGEHAND_GUARDED_BY(health_mu_){};
  std::int64_t reconnects_ STAGEHAND_GUARDED_BY(health_mu_) = 0;
  std::atomic<std::uint64_t> statement_count_{0};
  std::unique_ptr<store_internal::LimitsHolder> limits_;
};

}  // namespace stagehand::testing
