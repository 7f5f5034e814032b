#include "store/postgres/pg_notifications.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "store/postgres/statements.h"

namespace stagehand::store_internal {

namespace {

constexpr size_t kMaxChannelBytes = 63;  // NAMEDATALEN - 1
constexpr std::string_view kChannelPrefix = "stagehand_tasks";
constexpr int kFirstRetryMs = 100;
constexpr int kMaxRetryMs = 2000;
// An idle subscription wakes up this often even without traffic; a dead peer is detected by TCP
// keepalives, which make the socket readable with an error.
constexpr int kIdleWaitMs = 5000;

std::uint64_t Fnv1a(std::string_view text) {
  std::uint64_t hash = 14695981039346656037ULL;
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

}  // namespace

std::string NotificationChannel(const std::string& schema) {
  if (schema.empty()) return std::string(kChannelPrefix);
  std::string channel = fmt::format("{}_{}", kChannelPrefix, schema);
  if (channel.size() > kMaxChannelBytes) {
    channel = fmt::format("{}_{:016x}", kChannelPrefix, Fnv1a(schema));
  }
  return channel;
}

namespace {

// Takes one "<byte length>:<text>" item off the front of `list`. Returns false if there is none.
bool TakeItem(std::string_view& list, std::string& item) {
  const size_t colon = list.find(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  size_t length = 0;
  for (const char c : list.substr(0, colon)) {
    if (c < '0' || c > '9' || length > list.size()) return false;
    length = length * 10 + static_cast<size_t>(c - '0');
  }
  list.remove_prefix(colon + 1);
  if (length > list.size()) return false;
  item = std::string(list.substr(0, length));
  list.remove_prefix(length);
  return true;
}

// Parses the list of a "releases:" payload (an item per task id) or a "claims:" one (an item per
// task id, each followed by an item for its ticket).
bool ParseBatch(std::string_view list, StoreEvent::Kind kind, std::vector<StoreEvent>& events) {
  std::vector<StoreEvent> parsed;
  while (!list.empty()) {
    StoreEvent& event = parsed.emplace_back();
    event.kind = kind;
    if (!TakeItem(list, event.task_id)) return false;
    if (kind == StoreEvent::Kind::kClaim && !TakeItem(list, event.ticket)) return false;
  }
  events.insert(events.end(), parsed.begin(), parsed.end());
  return true;
}

}  // namespace

bool ParseNotification(std::string_view payload, std::vector<StoreEvent>& events) {
  static constexpr std::array<std::pair<std::string_view, StoreEvent::Kind>, 6> kKinds = {{
      {"upsert", StoreEvent::Kind::kUpsert},
      {"trigger", StoreEvent::Kind::kTrigger},
      {"cancel", StoreEvent::Kind::kCancel},
      {"release", StoreEvent::Kind::kRelease},
      {"sweep", StoreEvent::Kind::kSweep},
      {"delete", StoreEvent::Kind::kDelete},
  }};
  const size_t colon = payload.find(':');
  if (colon == std::string_view::npos) return false;
  const std::string_view kind = payload.substr(0, colon);
  if (kind == "releases") {
    return ParseBatch(payload.substr(colon + 1), StoreEvent::Kind::kRelease, events);
  }
  if (kind == "claims") {
    return ParseBatch(payload.substr(colon + 1), StoreEvent::Kind::kClaim, events);
  }
  for (const auto& [name, value] : kKinds) {
    if (kind == name) {
      events.push_back(StoreEvent{value, std::string(payload.substr(colon + 1))});
      return true;
    }
  }
  return false;
}

PgNotifications::PgNotifications(PgConnectParams params, std::string channel,
                                 std::function<void(const StoreEvent&)> handler)
    : params_(std::move(params)), channel_(std::move(channel)), handler_(std::move(handler)) {
  int fds[2];
  if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0) {
    wake_read_ = fds[0];
    wake_write_ = fds[1];
  }
  std::unique_ptr<PgConnection> connection = Subscribe();
  thread_ = std::jthread([this, first = std::move(connection)](std::stop_token stop) mutable {
    Run(stop, std::move(first));
  });
}

PgNotifications::~PgNotifications() {
  thread_.request_stop();
  if (wake_write_ >= 0) {
    const char byte = 1;
    [[maybe_unused]] const ssize_t written = ::write(wake_write_, &byte, 1);
  }
  thread_.join();
  if (wake_read_ >= 0) ::close(wake_read_);
  if (wake_write_ >= 0) ::close(wake_write_);
}

std::unique_ptr<PgConnection> PgNotifications::Subscribe() {
  Result<std::unique_ptr<PgConnection>> opened = PgConnection::Open(params_);
  if (!opened.ok()) return nullptr;
  std::unique_ptr<PgConnection> connection = std::move(*opened);
  Result<std::string> quoted = connection->QuoteIdentifier(channel_);
  if (!quoted.ok()) return nullptr;
  if (!connection->ExecuteScript(pg_sql::Listen(*quoted).c_str()).ok()) return nullptr;
  return connection;
}

bool PgNotifications::Pause(const std::stop_token& stop, int timeout_ms) {
  if (stop.stop_requested()) return false;
  if (wake_read_ >= 0) {
    pollfd wake{wake_read_, POLLIN, 0};
    ::poll(&wake, 1, timeout_ms);
  } else {
    // Without a wake-up pipe, poll the stop token in short steps.
    for (int waited = 0; waited < timeout_ms && !stop.stop_requested(); waited += 50) {
      ::poll(nullptr, 0, 50);
    }
  }
  return !stop.stop_requested();
}

bool PgNotifications::Drain(PgConnection& connection) {
  if (PQconsumeInput(connection.raw()) == 0) return false;
  std::vector<StoreEvent> events;
  while (PGnotify* notify = PQnotifies(connection.raw())) {
    events.clear();
    ParseNotification(notify->extra == nullptr ? "" : notify->extra, events);
    PQfreemem(notify);
    for (const StoreEvent& event : events) handler_(event);
  }
  return PQstatus(connection.raw()) == CONNECTION_OK;
}

void PgNotifications::Run(std::stop_token stop, std::unique_ptr<PgConnection> connection) {
  bool resync = connection == nullptr;
  int retry_ms = kFirstRetryMs;
  while (!stop.stop_requested()) {
    if (!connection) {
      connection = Subscribe();
      if (!connection) {
        if (!Pause(stop, retry_ms)) return;
        retry_ms = std::min(retry_ms * 2, kMaxRetryMs);
        continue;
      }
      retry_ms = kFirstRetryMs;
    }
    if (resync) {
      resync = false;
      handler_(StoreEvent{StoreEvent::Kind::kResync, ""});
    }
    // Notifications that arrived with the LISTEN reply are already buffered.
    if (!Drain(*connection)) {
      connection.reset();
      resync = true;
      continue;
    }
    std::array<pollfd, 2> fds = {pollfd{PQsocket(connection->raw()), POLLIN, 0},
                                 pollfd{wake_read_, POLLIN, 0}};
    const nfds_t count = wake_read_ >= 0 ? 2 : 1;
    ::poll(fds.data(), count, wake_read_ >= 0 ? kIdleWaitMs : 50);
    if (stop.stop_requested()) return;
  }
}

}  // namespace stagehand::store_internal
