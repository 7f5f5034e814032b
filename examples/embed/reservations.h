// The example plugin: seat reservations that lapse 15 minutes after they are made.
//
// It shows the two kinds of scheduled task a plugin usually needs:
//   - `expire-reservations`, a global task: it changes shared state, so across every host that
//     shares the plugin's database it runs on one host at a time (here the state is in memory to
//     keep the example small; a real plugin would delete rows from its own database);
//   - `report-stats`, a local task: it looks at this process only, so every host runs it.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <vector>

#include "stagehand/backend/backend.h"
#include "stagehand/base/logger.h"
#include "stagehand/base/status.h"
#include "stagehand/service/scheduler.h"
#include "stagehand/time/clock.h"

namespace reservations {

inline constexpr std::chrono::minutes kReservationLifetime{15};

// The plugin's state and its task functions. Thread-safe: tasks run on scheduler threads while
// HTTP handlers run on server threads.
class Reservations {
 public:
  // `clock` is read for the time a reservation is made and for expiry; it must outlive this.
  // `logger` may be null.
  explicit Reservations(const stagehand::Clock& clock,
                        std::shared_ptr<stagehand::Logger> logger = nullptr);

  // Registers the plugin's two tasks with `scheduler`; this object must outlive the scheduler.
  // Errors: as SchedulerService::ScheduleTask.
  stagehand::Status ScheduleTasks(stagehand::SchedulerService& scheduler);

  // Reserves `seat` from now on. Errors: kConflict when the seat is already reserved.
  stagehand::Status Reserve(const std::string& seat);
  // Returns the reserved seats, sorted.
  std::vector<std::string> Seats() const;
  // Returns the seat count that the last `report-stats` run saw.
  std::size_t last_reported_count() const;

  // The body of `expire-reservations`: drops reservations older than kReservationLifetime.
  // Errors: kCancelled when `stop` fires before it is done (what it removed stays removed).
  stagehand::Status ExpireReservations(std::stop_token stop);
  // The body of `report-stats`: logs and records how many seats are reserved.
  void ReportStats(std::stop_token stop);

 private:
  const stagehand::Clock& clock_;
  std::shared_ptr<stagehand::Logger> logger_;
  mutable std::mutex mu_;
  std::map<std::string, stagehand::WallTime> reserved_at_;  // by seat
  std::size_t last_reported_count_ = 0;
};

// Returns the backend plugin `reservations`: its init schedules the tasks on the plugin's
// scheduler and serves `GET /seats` and `POST /seats/<seat>` under /api/reservations. `state` must
// outlive the backend.
stagehand::BackendPlugin MakeReservationsPlugin(Reservations& state);

}  // namespace reservations
