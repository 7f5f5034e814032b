#include "store/next_run.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "stagehand/model/schedule.h"
#include "stagehand/time/cron.h"
#include "stagehand/time/duration.h"

namespace stagehand::store_internal {

namespace {

Result<NextRunPlan> CronPlan(const TaskSchedule& schedule, WallTime db_now) {
  // Shifting the grid by the offset: the fire after (now - offset), plus the offset, is the first
  // jittered slot after now.
  const auto offset = schedule.jitter_offset;
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> next,
                             schedule.settings.cadence.NextAfter(db_now - offset, schedule.zone));
  return NextRunPlan{NextRunPlan::Kind::kInstant, 0, *next + offset};
}

// now + `seconds` + the schedule's jitter offset; now itself when both are zero.
NextRunPlan NowPlusJittered(const TaskSchedule& schedule, double seconds) {
  const double total = seconds + std::chrono::duration<double>(schedule.jitter_offset).count();
  if (total == 0) return NextRunPlan{NextRunPlan::Kind::kNow};
  return NextRunPlan{NextRunPlan::Kind::kNowPlus, total};
}

double CadenceSeconds(const TaskSchedule& schedule) {
  return schedule.settings.cadence.period_ms() / 1000.0;
}

}  // namespace

Result<double> IsoDurationSeconds(const std::string& iso) {
  if (iso.empty()) return 0.0;
  Result<HumanDuration> parsed = ParseIsoDuration(iso);
  if (!parsed.ok()) {
    return InvalidArgumentError("Invalid ISO duration '" + iso + "': " + parsed.status().message());
  }
  return ToMillisecondsCasual(*parsed) / 1000.0;
}

Result<NextRunPlan> PlanInsertStart(const TaskSchedule& schedule, WallTime db_now) {
  const TaskSettingsV2& settings = schedule.settings;
  if (settings.initial_delay_duration && !settings.initial_delay_duration->empty()) {
    STAGEHAND_ASSIGN_OR_RETURN(double delay, IsoDurationSeconds(*settings.initial_delay_duration));
    return NowPlusJittered(schedule, delay);
  }
  switch (settings.cadence.kind()) {
    case Cadence::Kind::kCron:
      return CronPlan(schedule, db_now);
    case Cadence::Kind::kManual:
      return NextRunPlan{NextRunPlan::Kind::kNull};
    case Cadence::Kind::kDuration:
      return NowPlusJittered(schedule, 0);
  }
  return InternalError("unknown cadence kind");
}

Result<NextRunPlan> PlanReregisterStart(const TaskSchedule& schedule, WallTime db_now) {
  switch (schedule.settings.cadence.kind()) {
    case Cadence::Kind::kCron:
      return CronPlan(schedule, db_now);
    case Cadence::Kind::kManual:
      return NextRunPlan{NextRunPlan::Kind::kNull};
    case Cadence::Kind::kDuration: {
      const double cadence = CadenceSeconds(schedule);
      return NowPlusJittered(schedule, cadence);
    }
  }
  return InternalError("unknown cadence kind");
}

Result<NextRunPlan> PlanReleaseNext(const TaskSchedule& schedule, WallTime db_now) {
  switch (schedule.settings.cadence.kind()) {
    case Cadence::Kind::kCron:
      return CronPlan(schedule, db_now);
    case Cadence::Kind::kManual:
      return NextRunPlan{NextRunPlan::Kind::kNull};
    case Cadence::Kind::kDuration: {
      const double cadence = CadenceSeconds(schedule);
      return NextRunPlan{NextRunPlan::Kind::kScheduledPlusCadence, cadence};
    }
  }
  return InternalError("unknown cadence kind");
}

Result<NextRunPlan> PlanRelease(const ReleaseRequest& release, WallTime db_now) {
  if (!release.next_in) return PlanReleaseNext(release.schedule, db_now);
  return NextRunPlan{NextRunPlan::Kind::kNowPlus,
                     std::chrono::duration<double>(*release.next_in).count(), WallTime{}};
}

Result<NextRunPlan> PlanSkipNext(const TaskSchedule& schedule, WallTime slot, WallTime db_now) {
  // Cron and manual tasks wait for their next slot after now, as a release writes it.
  if (!schedule.settings.cadence.is_duration()) {
    return PlanReleaseNext(schedule, db_now);
  }
  const double cadence = CadenceSeconds(schedule);
  const auto step = std::chrono::milliseconds(std::llround(cadence * 1000));
  if (step <= std::chrono::milliseconds::zero() || slot > db_now) {
    return NextRunPlan{NextRunPlan::Kind::kInstant, 0, std::max(slot, db_now)};
  }
  return NextRunPlan{NextRunPlan::Kind::kInstant, 0, FirstSlotAfter(slot, step, db_now)};
}

void DatabaseClock::Observe(WallTime sent, WallTime received, WallTime db_now) {
  const WallTime midpoint = sent + (received - sent) / 2;
  const auto offset = std::chrono::duration_cast<std::chrono::microseconds>(db_now - midpoint);
  MutexLock lock(mu_);
  offset_ = offset;
}

WallTime DatabaseClock::Now() const {
  const WallTime local = clock_.Now();
  MutexLock lock(mu_);
  return offset_ ? local + *offset_ : local;
}

Result<std::vector<PlannedUpsert>> PlanUpserts(std::span<const TaskUpsert> tasks, WallTime db_now) {
  std::vector<PlannedUpsert> planned;
  planned.reserve(tasks.size());
  std::unordered_set<std::string_view> ids;
  ids.reserve(tasks.size());
  std::unordered_map<std::string, std::size_t> by_schedule;  // settings JSON + zone -> first index
  for (const TaskUpsert& task : tasks) {
    const auto fail = [&](const Status& status) {
      return status.WithPrefix("task " + task.id + ": ");
    };
    if (!ids.insert(task.id).second) {
      return InvalidArgumentError("task " + task.id + " appears more than once in the batch");
    }
    std::string settings_json = task.schedule.settings.ToJson();
    std::string key = settings_json + '\n' + task.schedule.zone.name() + '\n' +
                      std::to_string(task.schedule.jitter_offset.count());
    if (auto same = by_schedule.find(key); same != by_schedule.end()) {
      planned.push_back(planned[same->second]);
      continue;
    }
    if (Status valid = task.schedule.settings.Validate(); !valid.ok()) return fail(valid);
    Result<NextRunPlan> insert = PlanInsertStart(task.schedule, db_now);
    if (!insert.ok()) return fail(insert.status());
    Result<NextRunPlan> reregister = PlanReregisterStart(task.schedule, db_now);
    if (!reregister.ok()) return fail(reregister.status());
    by_schedule.emplace(std::move(key), planned.size());
    planned.push_back(PlannedUpsert{*insert, *reregister, std::move(settings_json)});
  }
  return planned;
}

}  // namespace stagehand::store_internal

namespace stagehand {

Result<SkipResult> TaskStore::SkipSlot(const std::string& /*id*/, std::int64_t /*expected_version*/,
                                       WallTime /*slot*/, const TaskSchedule& /*schedule*/) {
  return UnimplementedError("plugin " + plugin_id() + ": this task store cannot skip slots");
}

}  // namespace stagehand
