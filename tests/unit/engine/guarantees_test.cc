// The engine's two promises on the manual clock, whatever the task does: a run never outlives its
// claim (stubborn functions keep their claim until they return; a run about to lose its lease is
// killed first) and each cron slot starts at most once, never before the slot (Backstage's
// "slot - 1 s" registration included), through restarts and joins.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "engine_harness.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::engine_internal {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;

using std::chrono::milliseconds;
using std::chrono::seconds;

// A task function that behaves like a command: it works for `work` of manual time, then, once
// asked to stop, takes `grace` more (ignoring further stop requests) unless killed. Its runs do not
// wait on the clock themselves: the test ends them at their deadlines (EndDue), so they end at
// exactly the manual time planned. Records every start and the most runs ever inside it at once.
// Thread-safe.
class Worker {
 public:
  explicit Worker(testing::ManualClock& clock) : clock_(clock) {}

  TaskFunction Fn(std::function<std::pair<milliseconds, milliseconds>()> plan) {
    return [this, plan = std::move(plan)](const RunControl& control) -> Status {
      const auto [work, grace] = plan();
      auto run = std::make_shared<RunState>();
      run->end = clock_.MonoNow() + work;
      // The engine's threads request the tokens at the manual time they act on. The callbacks are
      // in place before the start is recorded: tests move time only once every start is.
      std::stop_callback on_stop(control.stop, [&, grace = grace] {
        std::lock_guard lock(mu_);
        run->stopped = true;
        if (!run->release) run->end = clock_.MonoNow() + grace;
      });
      std::stop_callback on_kill(control.kill, [&] {
        {
          std::lock_guard lock(mu_);
          run->release = true;
          run->killed = true;
        }
        cv_.notify_all();
      });
      {
        std::lock_guard lock(mu_);
        runs_.push_back(run);
        starts_.push_back(clock_.Now());
        ++active_;
        max_active_ = std::max(max_active_, active_);
      }
      cv_.notify_all();
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return run->release; });
      --active_;
      ++ended_;
      killed_ += run->killed ? 1 : 0;
      std::erase(runs_, run);
      cv_.notify_all();
      if (run->stopped) return CancelledError("worker stopped");
      return Status::Ok();
    };
  }
  // Works until stopped, then ignores the stop until killed.
  TaskFunction Stubborn() {
    return Fn([] { return std::pair(milliseconds(kNever), milliseconds(kNever)); });
  }

  // Returns the earliest end of a run still working or stopping.
  std::optional<MonoTime> NextEnd() const {
    std::lock_guard lock(mu_);
    std::optional<MonoTime> next;
    for (const auto& run : runs_) {
      if (!run->release && (!next || run->end < *next)) next = run->end;
    }
    return next;
  }
  // Ends every run whose end has come and waits until they have returned.
  void EndDue(MonoTime now) {
    std::unique_lock lock(mu_);
    bool any = false;
    for (const auto& run : runs_) {
      if (!run->release && run->end <= now) run->release = any = true;
    }
    if (any) cv_.notify_all();
    WaitReleased(lock);
  }
  // Waits until every run told to end (by EndDue or its kill token) has left the function.
  void WaitReleased() {
    std::unique_lock lock(mu_);
    WaitReleased(lock);
  }

  std::vector<WallTime> starts() const {
    std::lock_guard lock(mu_);
    return starts_;
  }
  int active() const {
    std::lock_guard lock(mu_);
    return active_;
  }
  int max_active() const {
    std::lock_guard lock(mu_);
    return max_active_;
  }
  int killed() const {
    std::lock_guard lock(mu_);
    return killed_;
  }
  int ended() const {
    std::lock_guard lock(mu_);
    return ended_;
  }
  bool WaitStarts(std::size_t n) const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, seconds(10), [&] { return starts_.size() >= n; });
  }
  bool WaitInactive() const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, seconds(10), [&] { return active_ == 0; });
  }

 private:
  static constexpr std::chrono::hours kNever{24 * 365};
  void WaitReleased(std::unique_lock<std::mutex>& lock) {
    cv_.wait_for(lock, seconds(10), [&] {
      return std::none_of(runs_.begin(), runs_.end(), [](const auto& run) { return run->release; });
    });
  }
  struct RunState {
    MonoTime end;
    bool stopped = false;
    bool release = false;
    bool killed = false;
  };

  testing::ManualClock& clock_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<std::shared_ptr<RunState>> runs_;
  std::vector<WallTime> starts_;
  int active_ = 0;
  int max_active_ = 0;
  int killed_ = 0;
  int ended_ = 0;
};

class GuaranteesTest : public EngineTest {
 protected:
  // Runs still going are stopped while manual time passes (the base class would wait for them
  // with time standing still).
  ~GuaranteesTest() override {
    for (auto& engine : engines_) {
      if (stopped_.count(engine.get()) == 0) ShutdownWhileTimePasses(*engine);
    }
  }

  // Returns a worker for the task `id`; one worker per task id.
  Worker& MakeWorker(const std::string& id) {
    worker_tasks_.push_back(id);
    return workers_.emplace_back(clock_);
  }

  // Waits until the engine has reported the end of every run that left a worker's function (so
  // its release is done).
  void WaitEndsReported() {
    std::map<std::string, int> ended;
    for (std::size_t i = 0; i < workers_.size(); ++i)
      ended[worker_tasks_[i]] += workers_[i].ended();
    const auto give_up = std::chrono::steady_clock::now() + seconds(10);
    for (const auto& [id, count] : ended) {
      while (recorder_->Count("completed", id) + recorder_->Count("failed", id) < count) {
        ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "run ends of " << id;
        std::this_thread::yield();
      }
    }
  }

  // Waits until every run the engines started has recorded its start in its worker (the engine
  // reports a start before calling the function, which reads the clock).
  void WaitStartsRecorded() {
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      const int started = recorder_->Count("started", worker_tasks_[i]);
      ASSERT_TRUE(workers_[i].WaitStarts(static_cast<std::size_t>(started))) << worker_tasks_[i];
    }
  }

  // Moves time forward by `duration`, stopping at every engine deadline and every run's end.
  void Pass(std::chrono::nanoseconds duration) {
    const MonoTime target = clock_.MonoNow() + duration;
    while (Step(target)) {
    }
  }

  // Shuts `engine` down on another thread while manual time passes, as it would for real: a
  // stubborn run's grace and the shutdown grace both count in manual time.
  void ShutdownWhileTimePasses(TaskEngine& engine) {
    std::atomic<bool> done = false;
    std::jthread shutdown([&] {
      engine.Shutdown();
      done = true;
    });
    // Time moves only while the shutdown waits on the clock (for its grace, or a run's), never
    // while it works: had it moved then, a slot could come before the shutdown even began, which
    // real time never does. Small steps: a deadline the shutdown waits for next may not be known.
    const std::thread::id shutting_down = shutdown.get_id();
    auto give_up = std::chrono::steady_clock::now() + seconds(10);
    bool gave_up = false;
    while (!done) {
      const bool waiting = clock_.IsWaiting(shutting_down);
      if (waiting || std::chrono::steady_clock::now() > give_up) {
        gave_up = gave_up || !waiting;
        Step(clock_.MonoNow() + milliseconds(100));
        give_up = std::chrono::steady_clock::now() + seconds(10);
      } else {
        std::this_thread::yield();
      }
    }
    EXPECT_FALSE(gave_up) << "the shutdown neither ended nor waited on the clock for 10 s";
    stopped_.insert(&engine);
  }

  static WallTime FirstSlotAfter(const std::string& cron, WallTime after) {
    return *CronExpression::Parse(cron)->NextAfter(after, TimeZone::Utc());
  }

  // Writes the row as a Backstage worker's registration of a cron task would (§4.3): the next
  // slot - 1 s, unless the row's next start is already earlier; nobody is notified.
  void BackstageRegistration(const std::string& id, const std::string& cron) {
    const WallTime early = FirstSlotAfter(cron, clock_.Now()) - seconds(1);
    TaskRow row = Row(id).value_or(TaskRow{});
    row.id = id;
    if (row.settings_json.empty()) row.settings_json = Schedule(cron).settings.ToJson();
    if (!row.next_run_start_at || early < *row.next_run_start_at) row.next_run_start_at = early;
    store_->PutRow(row);
  }

  std::deque<Worker> workers_;
  std::vector<std::string> worker_tasks_;
  std::set<const TaskEngine*> stopped_;  // engines shut down (their threads are gone)

 private:
  // Settles the engines, then moves to the next deadline or run end up to `target` and ends the
  // runs due then. Returns false when nothing is due up to `target`.
  bool Step(MonoTime target) {
    for (Worker& worker : workers_) worker.WaitReleased();
    WaitEndsReported();
    SettleRunning();
    WaitStartsRecorded();
    std::optional<MonoTime> next = clock_.NextDeadline();
    for (const Worker& worker : workers_) {
      std::optional<MonoTime> end = worker.NextEnd();
      if (end && (!next || *end < *next)) next = end;
    }
    if (!next || *next > target) {
      if (target != kMonoInfinity && clock_.MonoNow() < target) clock_.AdvanceTo(target);
      SettleRunning();
      return false;
    }
    if (*next > clock_.MonoNow()) clock_.AdvanceTo(*next);
    for (Worker& worker : workers_) worker.EndDue(clock_.MonoNow());
    WaitEndsReported();
    return true;
  }

  // Waits until every engine not shut down is parked.
  void SettleRunning() {
    for (std::size_t i = 0; i < engines_.size(); ++i) {
      const TaskEngine* engine = engines_[i].get();
      if (stopped_.count(engine) > 0) continue;
      EXPECT_TRUE(engines_[i]->WaitIdleForTesting()) << "engine " << i;
    }
  }
};

TEST_F(GuaranteesTest, StubbornRunKeepsItsClaimPastTheTimeoutAndRunsOnce) {
  TaskEngine& a = StartEngine();
  TaskEngine& b = StartEngine(OtherHostStore(), Options());
  Worker& worker = MakeWorker("t");
  ASSERT_THAT(a.Register(Task("t", Schedule("manual", "PT2S"), worker.Stubborn())), IsOk());
  ASSERT_THAT(b.Register(Task("t", Schedule("manual", "PT2S"), worker.Stubborn())), IsOk());
  ASSERT_THAT(a.Trigger("t"), IsOk());
  ASSERT_TRUE(worker.WaitStarts(1));
  // Far past its timeout and past several leases, the run is still going and still holds the row:
  // no host sweeps it, no other run starts, a trigger is refused.
  Pass(seconds(60));
  EXPECT_EQ(worker.active(), 1);
  EXPECT_EQ(worker.starts().size(), 1U);
  std::optional<TaskRow> row = Row("t");
  ASSERT_TRUE(row->current_run_ticket.has_value());
  EXPECT_GT(*row->current_run_expires_at, clock_.Now());
  EXPECT_THAT(b.Trigger("t"), StatusIs(StatusCode::kConflict));
  EXPECT_EQ(recorder_->Count("reclaimed", "t"), 0);
  EXPECT_EQ(recorder_->Count("overdue", "t"), 1);  // once, a lease after the timeout
  // A cancel of a run that is already stopping kills it.
  ASSERT_THAT(b.Cancel("t"), IsOk());
  Pass(seconds(1));
  ASSERT_TRUE(worker.WaitInactive());
  WaitEndsReported();
  Settle();
  EXPECT_EQ(worker.killed(), 1);
  row = Row("t");
  EXPECT_FALSE(row->current_run_ticket.has_value());
  EXPECT_EQ(row->next_run_start_at, std::nullopt);  // manual: one trigger, one run
  Pass(seconds(60));
  EXPECT_EQ(worker.starts().size(), 1U);
  EXPECT_EQ(worker.max_active(), 1);
}

TEST_F(GuaranteesTest, TimedOutRunIsNamedAndTheNextRunFollowsTheCadence) {
  TaskEngine& engine = StartEngine();
  Worker& worker = MakeWorker("t");
  // Works for 10 s (timeout 2 s), then takes 5 s to stop, like a command in its kill grace.
  ASSERT_TRUE(engine
                  .Register(Task("t", Schedule("PT1M", "PT2S"), worker.Fn([] {
                    return std::pair(milliseconds(10'000), milliseconds(5'000));
                  })))
                  .ok());
  ASSERT_TRUE(worker.WaitStarts(1));
  const WallTime first = clock_.Now();
  Pass(seconds(3));
  EXPECT_EQ(worker.active(), 1);  // in its grace: still running, still claimed
  EXPECT_TRUE(Row("t")->current_run_ticket.has_value());
  Pass(seconds(5));
  ASSERT_TRUE(worker.WaitInactive());
  WaitEndsReported();
  Settle();
  const std::optional<TaskRow> row = Row("t");
  EXPECT_FALSE(row->current_run_ticket.has_value());
  EXPECT_EQ(row->last_run_error_json,
            R"({"name":"Error","message":"timed out after 2s: worker stopped"})");
  EXPECT_EQ(row->next_run_start_at, first + seconds(60));
  Pass(seconds(50));
  EXPECT_EQ(worker.starts().size(), 1U);
  Pass(seconds(2));
  ASSERT_TRUE(worker.WaitStarts(2));
  EXPECT_EQ(worker.starts()[1], first + seconds(60));
}

TEST_F(GuaranteesTest, RunIsKilledBeforeItsLeaseLapsesWhenRenewalsFail) {
  TaskEngine& engine = StartEngine();
  Worker& worker = MakeWorker("t");
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1H", "PT1H"), worker.Stubborn())), IsOk());
  ASSERT_TRUE(worker.WaitStarts(1));
  Settle();
  const WallTime expiry = *Row("t")->current_run_expires_at;
  store_->SetUnavailable(true);
  while (worker.active() > 0) {
    ASSERT_TRUE(clock_.AdvanceToNextDeadline());
    Settle();
    worker.WaitReleased();
    ASSERT_LT(clock_.Now(), expiry) << "the run outlived its lease";
  }
  EXPECT_EQ(worker.killed(), 1);
  EXPECT_EQ(recorder_->Count("lease-lost", "t"), 1);
  store_->SetUnavailable(false);
}

TEST_F(GuaranteesTest, ShutdownKillsARunThatIgnoresItsStopAndReleasesIt) {
  TaskEngine& engine = StartEngine();
  Worker& worker = MakeWorker("t");
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1H", "PT1H"), worker.Stubborn())), IsOk());
  ASSERT_TRUE(worker.WaitStarts(1));
  ShutdownWhileTimePasses(engine);
  EXPECT_EQ(worker.active(), 0);
  EXPECT_EQ(worker.killed(), 1);
  const std::optional<TaskRow> row = Row("t");
  EXPECT_FALSE(row->current_run_ticket.has_value());
  EXPECT_EQ(row->last_run_error_json,
            R"({"name":"Error","message":"interrupted by shutdown: worker stopped"})");
}

TEST_F(GuaranteesTest, BackstageEarlyRegistrationSlotStartsAtTheSlot) {
  TaskEngine& engine = StartEngine();
  Worker& worker = MakeWorker("c");
  const auto instant = [] { return std::pair(milliseconds(1), milliseconds(0)); };
  // A Backstage worker registered the task first: its row says "next slot - 1 s" (§4.3).
  const WallTime slot = FirstSlotAfter("*/10 * * * * *", clock_.Now());
  BackstageRegistration("c", "*/10 * * * * *");
  ASSERT_EQ(Row("c")->next_run_start_at, slot - seconds(1));
  ASSERT_THAT(engine.Register(Task("c", Schedule("*/10 * * * * *"), worker.Fn(instant))), IsOk());
  Pass(seconds(40));
  const std::vector<WallTime> starts = worker.starts();
  ASSERT_EQ(starts.size(), 4U);
  for (std::size_t i = 0; i < starts.size(); ++i) {
    EXPECT_EQ(starts[i], slot + seconds(10) * static_cast<int>(i)) << "start " << i;
  }
}

TEST_F(GuaranteesTest, AHostJoiningOrRestartingNeverStartsASlotTwice) {
  Worker& worker = MakeWorker("c");
  const auto instant = [] { return std::pair(milliseconds(1), milliseconds(0)); };
  TaskEngine* a = &StartEngine();
  ASSERT_THAT(a->Register(Task("c", Schedule("*/5 * * * * *"), worker.Fn(instant))), IsOk());
  Pass(seconds(12));
  // A join between two slots re-registers the task.
  TaskEngine& b = StartEngine(OtherHostStore(), Options());
  ASSERT_THAT(b.Register(Task("c", Schedule("*/5 * * * * *"), worker.Fn(instant))), IsOk());
  Pass(seconds(11));
  ShutdownWhileTimePasses(*a);
  a = &StartEngine(OtherHostStore(), Options());
  ASSERT_THAT(a->Register(Task("c", Schedule("*/5 * * * * *"), worker.Fn(instant))), IsOk());
  Pass(seconds(20));
  const std::vector<WallTime> starts = worker.starts();
  ASSERT_GE(starts.size(), 8U);
  for (std::size_t i = 0; i < starts.size(); ++i) {
    EXPECT_EQ(starts[i].time_since_epoch() % seconds(5), milliseconds(0)) << "start " << i;
    if (i > 0) {
      EXPECT_EQ(starts[i] - starts[i - 1], seconds(5)) << "start " << i;
    }
  }
}

// Random registrations (stagehand's and Backstage's), restarts, joins, downtime and runs of random
// length (some past their timeout, stopping slowly) over a simulated day: at most one run at a
// time, and at most one start per cron slot (each start counted for the latest slot at or before
// it, so a start before its slot counts for the previous one and shows up as a second start there).
TEST_F(GuaranteesTest, PropertyEachCronSlotStartsAtMostOnceThroughADayOfChurn) {
  for (unsigned seed : {1U, 2U}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    std::mutex rng_mu;
    const std::string id = "c" + std::to_string(seed);
    Worker& worker = MakeWorker(id);
    const auto plan = [&] {
      std::lock_guard lock(rng_mu);
      const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
      const int work_ms = kind < 7   ? std::uniform_int_distribution<int>(0, 2'000)(rng)
                          : kind < 9 ? std::uniform_int_distribution<int>(5'000, 50'000)(rng)
                                     : std::uniform_int_distribution<int>(50'000, 150'000)(rng);
      const int grace_ms = std::uniform_int_distribution<int>(0, 8'000)(rng);
      return std::pair(milliseconds(work_ms), milliseconds(grace_ms));
    };
    const auto start_host = [&] {
      std::shared_ptr<TaskStore> store = OtherHostStore();
      TaskEngine& engine = StartEngine(store, Options());
      EXPECT_THAT(engine.Register(Task(id, Schedule("* * * * *", "PT1M"), worker.Fn(plan))),
                  IsOk());
      return &engine;
    };
    std::vector<TaskEngine*> hosts = {start_host()};
    const WallTime end = clock_.Now() + std::chrono::hours(24);
    while (clock_.Now() < end) {
      int event = 0;
      int step_s = 0;
      std::size_t victim = 0;
      {
        std::lock_guard lock(rng_mu);
        event = std::uniform_int_distribution<int>(0, 99)(rng);
        step_s = std::uniform_int_distribution<int>(1, 40)(rng);
        victim = std::uniform_int_distribution<std::size_t>(0, 9)(rng);
      }
      if (event < 3 && !hosts.empty()) {  // a restart
        TaskEngine* host = hosts[victim % hosts.size()];
        ShutdownWhileTimePasses(*host);
        std::erase(hosts, host);
        hosts.push_back(start_host());
      } else if (event < 5 && hosts.size() < 3) {  // a join
        hosts.push_back(start_host());
      } else if (event < 7 && !hosts.empty()) {  // a host leaves (maybe the last one)
        TaskEngine* host = hosts[victim % hosts.size()];
        ShutdownWhileTimePasses(*host);
        std::erase(hosts, host);
      } else if (event < 9 && hosts.empty()) {  // back after downtime
        hosts.push_back(start_host());
      } else if (event < 12) {  // a Backstage worker of the fleet registers the task
        BackstageRegistration(id, "* * * * *");
      }
      Pass(seconds(step_s));
    }
    for (TaskEngine* host : hosts) ShutdownWhileTimePasses(*host);
    std::map<std::int64_t, int> starts_per_slot;
    for (const WallTime start : worker.starts()) {
      const auto minute =
          std::chrono::floor<std::chrono::minutes>(start.time_since_epoch()).count();
      EXPECT_EQ(++starts_per_slot[minute], 1)
          << "two starts for the slot of minute " << minute << " (second start at +"
          << (start.time_since_epoch() % std::chrono::minutes(1)).count() << ")";
    }
    EXPECT_EQ(worker.max_active(), 1);
    EXPECT_GT(starts_per_slot.size(), 1000U);
  }
}

}  // namespace
}  // namespace stagehand::engine_internal
