#include "reservations.h"

#include <chrono>
#include <optional>
#include <string_view>
#include <utility>

#include "stagehand/http/http_message.h"
#include "stagehand/model/schedule.h"

namespace reservations {

using stagehand::Status;

Reservations::Reservations(const stagehand::Clock& clock, std::shared_ptr<stagehand::Logger> logger)
    : clock_(clock), logger_(std::move(logger)) {}

Status Reservations::ScheduleTasks(stagehand::SchedulerService& scheduler) {
  // Global (the default scope): one host at a time runs it, every minute. Frequencies and timeouts
  // may also be cron expressions (CronFrequency) or Backstage's HumanDuration objects.
  stagehand::TaskDefinition expire;
  expire.id = "expire-reservations";
  expire.frequency = std::chrono::minutes(1);
  expire.timeout = std::chrono::seconds(30);
  expire.fn = [this](std::stop_token stop) { return ExpireReservations(std::move(stop)); };
  if (Status status = scheduler.ScheduleTask(std::move(expire)); !status.ok()) {
    return status;
  }

  // Local: every process runs it on its own, every 10 seconds, starting 1 second after startup.
  // A schedule can also come from config (ReadScheduleDefinitionFromConfig in
  // stagehand/backend/schedule_config.h) and be given to a runner, as here.
  stagehand::ScheduleDefinition every_ten_seconds;
  every_ten_seconds.frequency = std::chrono::seconds(10);
  every_ten_seconds.timeout = std::chrono::seconds(5);
  every_ten_seconds.initial_delay = std::chrono::seconds(1);
  every_ten_seconds.scope = stagehand::TaskScope::kLocal;
  stagehand::TaskInvocation report;
  report.id = "report-stats";
  report.fn = [this](std::stop_token stop) { ReportStats(std::move(stop)); };
  return scheduler.CreateScheduledTaskRunner(every_ten_seconds).Run(std::move(report));
}

Status Reservations::Reserve(const std::string& seat) {
  std::lock_guard lock(mu_);
  if (!reserved_at_.emplace(seat, clock_.Now()).second) {
    return stagehand::ConflictError("Seat " + seat + " is already reserved");
  }
  return Status::Ok();
}

std::vector<std::string> Reservations::Seats() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> seats;
  for (const auto& [seat, reserved_at] : reserved_at_) {
    seats.push_back(seat);
  }
  return seats;
}

std::size_t Reservations::last_reported_count() const {
  std::lock_guard lock(mu_);
  return last_reported_count_;
}

Status Reservations::ExpireReservations(std::stop_token stop) {
  const stagehand::WallTime cutoff = clock_.Now() - kReservationLifetime;
  std::lock_guard lock(mu_);
  for (auto it = reserved_at_.begin(); it != reserved_at_.end();) {
    // The token fires on timeout, cancel, shutdown or a lost lease: stop soon, with a status
    // that says why (the run is then recorded as failed with this message).
    if (stop.stop_requested()) {
      return stagehand::CancelledError("Stopped before every reservation was checked");
    }
    if (it->second <= cutoff) {
      it = reserved_at_.erase(it);
    } else {
      ++it;
    }
  }
  return Status::Ok();
}

void Reservations::ReportStats(std::stop_token /*stop*/) {
  std::size_t count = 0;
  {
    std::lock_guard lock(mu_);
    count = reserved_at_.size();
    last_reported_count_ = count;
  }
  // Never log while holding the lock.
  if (logger_) {
    logger_->Info("Reservation stats", {{"reserved", std::to_string(count)}});
  }
}

namespace {

stagehand::HttpResponse TextResponse(int status, std::string body) {
  stagehand::HttpResponse response;
  response.status = status;
  response.headers.push_back({"Content-Type", "text/plain; charset=utf-8"});
  response.body = std::move(body);
  return response;
}

// Serves the plugin's own routes; paths are relative to /api/reservations. Returning nullopt
// passes the request on (a 404 when nobody answers).
std::optional<stagehand::HttpResponse> HandleSeats(Reservations& state,
                                                   const stagehand::HttpRequest& request) {
  constexpr std::string_view kSeats = "/seats";
  const std::string_view path = request.path;
  if (path == kSeats && request.method == "GET") {
    std::string body;
    for (const std::string& seat : state.Seats()) {
      body += seat + "\n";
    }
    return TextResponse(200, std::move(body));
  }
  if (path.starts_with("/seats/") && request.method == "POST") {
    const std::string seat(path.substr(kSeats.size() + 1));
    if (Status status = state.Reserve(seat); !status.ok()) {
      return TextResponse(409, status.message() + "\n");
    }
    return TextResponse(201, "Reserved " + seat + "\n");
  }
  return std::nullopt;
}

}  // namespace

stagehand::BackendPlugin MakeReservationsPlugin(Reservations& state) {
  return {.id = "reservations", .init = [&state](stagehand::PluginServices& services) {
            services.router->Use([&state](const stagehand::HttpRequest& request) {
              return HandleSeats(state, request);
            });
            return state.ScheduleTasks(*services.scheduler);
          }};
}

}  // namespace reservations
