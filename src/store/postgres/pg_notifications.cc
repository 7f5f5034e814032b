#include "store/postgres/pg_notifications.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <set>
#include <utility>

#include "stagehand/base/hash.h"
#include "store/postgres/statements.h"

namespace stagehand::store_internal {

namespace {

constexpr size_t kMaxChannelBytes = 63;  // NAMEDATALEN - 1
constexpr std::string_view kChannelPrefix = "stagehand_tasks";
constexpr int kFirstRetryMs = 100;
constexpr int kMaxRetryMs = 800;
// An idle subscription wakes up this often even without traffic; a dead peer is detected by TCP
// keepalives, which make the socket readable with an error.
constexpr int kIdleWaitMs = 5000;
// Each LISTEN session sends an empty query (no statement: the server parses nothing and plans
// nothing) when it has heard nothing for this long, so that a database that went away is noticed
// within about a second even while no statement runs (readiness says so); a ping unanswered for
// kPingTimeout drops the session.
constexpr std::chrono::milliseconds kPingInterval{1000};
constexpr std::chrono::milliseconds kPingTimeout{1500};

}  // namespace

std::string NotificationChannel(const std::string& schema) {
  if (schema.empty()) return std::string(kChannelPrefix);
  std::string channel = fmt::format("{}_{}", kChannelPrefix, schema);
  if (channel.size() > kMaxChannelBytes) {
    channel = fmt::format("{}_{:016x}", kChannelPrefix, Fnv1a64(schema));
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
  if (kind == "traced-trigger") {
    std::string_view list = payload.substr(colon + 1);
    StoreEvent event(StoreEvent::Kind::kTrigger, {});
    std::string traceparent;
    std::string tracestate;
    if (!TakeItem(list, event.task_id) || !TakeItem(list, traceparent) ||
        !TakeItem(list, tracestate) || !list.empty()) {
      return false;
    }
    // A context that does not parse leaves the trigger untraced; the trigger still counts.
    if (Result<TraceContext> caller = ParseTraceparent(traceparent, tracestate); caller.ok()) {
      event.caller = *std::move(caller);
    }
    events.push_back(std::move(event));
    return true;
  }
  for (const auto& [name, value] : kKinds) {
    if (kind == name) {
      events.push_back(StoreEvent{value, std::string(payload.substr(colon + 1))});
      return true;
    }
  }
  return false;
}

struct PgNotificationHub::Subscriber {
  Subscriber(std::function<void(const StoreEvent&)> h, std::function<void()> lost)
      : handler(std::move(h)), on_session_lost(std::move(lost)) {}
  Mutex mu;  // held while the handler runs, and by Unsubscribe
  bool alive STAGEHAND_GUARDED_BY(mu) = true;
  const std::function<void(const StoreEvent&)> handler;
  const std::function<void()> on_session_lost;  // may be empty
};

struct PgNotificationHub::Listener {
  explicit Listener(PgConnectParams p) : params(std::move(p)) {}
  const PgConnectParams params;
  // Lock order: session_mu, then the hub's mu_.
  // Guarded by the hub's mu_, which the analysis cannot name from here (it is another object's),
  // so not annotated.
  std::map<std::string, std::vector<std::shared_ptr<Subscriber>>> channels;
  Mutex session_mu;
  std::unique_ptr<PgConnection> session STAGEHAND_GUARDED_BY(session_mu);
  // The channels LISTENed on `session`.
  std::set<std::string> listening STAGEHAND_GUARDED_BY(session_mu);
  // Deliver kResync once subscribed.
  bool resync_due STAGEHAND_GUARDED_BY(session_mu) = false;
  // The hub thread's reconnection schedule (real monotonic time: it paces socket retries).
  int retry_ms STAGEHAND_GUARDED_BY(session_mu) = kFirstRetryMs;
  MonoTime retry_at STAGEHAND_GUARDED_BY(session_mu){};
  // Where the last session went, tried first by the next.
  PgServerIdentity server STAGEHAND_GUARDED_BY(session_mu);
  // The session's pings: when the server last answered, and the ping in flight.
  MonoTime last_answer STAGEHAND_GUARDED_BY(session_mu){};
  bool ping_in_flight STAGEHAND_GUARDED_BY(session_mu) = false;
  MonoTime ping_sent STAGEHAND_GUARDED_BY(session_mu){};
  // Whether the session is down, since when, and why: written under session_mu and health_mu,
  // read under health_mu (Health takes health_mu only, so a connect in progress cannot block it).
  mutable Mutex health_mu;
  bool down STAGEHAND_GUARDED_BY(health_mu) = false;
  MonoTime down_since STAGEHAND_GUARDED_BY(health_mu){};
  MonoTime down_noticed STAGEHAND_GUARDED_BY(health_mu){};
  std::string down_reason STAGEHAND_GUARDED_BY(health_mu);
};

class PgNotificationHub::Subscription final : public Notifications {
 public:
  Subscription(std::shared_ptr<PgNotificationHub> hub, std::shared_ptr<Listener> listener,
               std::string channel, std::shared_ptr<Subscriber> subscriber)
      : hub_(std::move(hub)),
        listener_(std::move(listener)),
        channel_(std::move(channel)),
        subscriber_(std::move(subscriber)) {}
  ~Subscription() override { hub_->Unsubscribe(listener_, channel_, subscriber_); }
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;

 private:
  const std::shared_ptr<PgNotificationHub> hub_;
  const std::shared_ptr<Listener> listener_;
  const std::string channel_;
  const std::shared_ptr<Subscriber> subscriber_;
};

namespace {

// The key of a database: the connection string with the database that overrides it.
std::string DatabaseKey(const PgConnectParams& params) {
  return params.conninfo + '\n' + params.database;
}

// Returns the parameters of a LISTEN session: the database's (at notify_conninfo when set),
// without a search_path (channels are global to the database) and without a call bound (the
// session waits for notifications).
PgConnectParams ListenParams(const PgConnectParams& params) {
  PgConnectParams listen = params;
  if (!params.notify_conninfo.empty()) listen.conninfo = params.notify_conninfo;
  listen.transaction_pooler = false;
  listen.search_path.clear();
  listen.call_timeout = std::chrono::milliseconds(0);
  listen.application_name = "stagehand-listen";
  return listen;
}

bool ExecuteOn(PgConnection& connection, const std::string& channel, bool listen) {
  Result<std::string> quoted = connection.QuoteIdentifier(channel);
  if (!quoted.ok()) return false;
  const std::string statement = listen ? pg_sql::Listen(*quoted) : pg_sql::Unlisten(*quoted);
  return connection.ExecuteScript(statement.c_str()).ok();
}

struct Notice {
  std::string channel;
  std::string payload;
};

// Reads every pending notification of `connection` into `notices`. Returns false if the session
// broke.
bool Drain(PgConnection& connection, std::vector<Notice>& notices) {
  if (PQconsumeInput(connection.raw()) == 0) return false;
  while (PGnotify* notify = PQnotifies(connection.raw())) {
    notices.push_back(Notice{notify->relname == nullptr ? "" : notify->relname,
                             notify->extra == nullptr ? "" : notify->extra});
    PQfreemem(notify);
  }
  return PQstatus(connection.raw()) == CONNECTION_OK;
}

}  // namespace

std::shared_ptr<PgNotificationHub> PgNotificationHub::Create() {
  return std::shared_ptr<PgNotificationHub>(new PgNotificationHub());
}

PgNotificationHub::PgNotificationHub() {
  int fds[2];
  if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0) {
    wake_read_ = fds[0];
    wake_write_ = fds[1];
  }
}

PgNotificationHub::~PgNotificationHub() {
  if (thread_.joinable()) {
    thread_.request_stop();
    Wake();
    thread_.join();
  }
  if (wake_read_ >= 0) ::close(wake_read_);
  if (wake_write_ >= 0) ::close(wake_write_);
}

void PgNotificationHub::Wake() {
  if (wake_write_ < 0) return;
  const char byte = 1;
  [[maybe_unused]] const ssize_t written = ::write(wake_write_, &byte, 1);
}

int PgNotificationHub::sessions() const {
  std::vector<std::shared_ptr<Listener>> listeners;
  {
    MutexLock lock(mu_);
    for (const auto& [key, listener] : listeners_) listeners.push_back(listener);
  }
  int open = 0;
  for (const std::shared_ptr<Listener>& listener : listeners) {
    MutexLock lock(listener->session_mu);
    if (listener->session) ++open;
  }
  return open;
}

std::unique_ptr<Notifications> PgNotificationHub::Subscribe(
    const PgConnectParams& params, std::string channel,
    std::function<void(const StoreEvent&)> handler, std::function<void()> on_session_lost) {
  auto subscriber = std::make_shared<Subscriber>(std::move(handler), std::move(on_session_lost));
  std::shared_ptr<Listener> listener;
  {
    MutexLock lock(mu_);
    std::shared_ptr<Listener>& slot = listeners_[DatabaseKey(params)];
    if (!slot) slot = std::make_shared<Listener>(ListenParams(params));
    listener = slot;
    listener->channels[channel].push_back(subscriber);
    if (!thread_.joinable()) {
      thread_ = std::jthread([this](std::stop_token stop) { Run(stop); });
    }
  }
  {
    MutexLock lock(listener->session_mu);
    if (!listener->session) {
      // Connect() LISTENs on every channel with subscribers, this one included.
      if (!Connect(*listener)) listener->resync_due = true;
    } else if (!listener->listening.contains(channel)) {
      if (ExecuteOn(*listener->session, channel, true)) {
        listener->listening.insert(channel);
      } else {
        listener->session.reset();
        listener->listening.clear();
        listener->resync_due = true;
      }
    }
  }
  // The LISTEN's reply may have carried notifications for other channels: let the thread see them.
  Wake();
  return std::make_unique<Subscription>(shared_from_this(), std::move(listener), std::move(channel),
                                        std::move(subscriber));
}

void PgNotificationHub::Unsubscribe(const std::shared_ptr<Listener>& listener,
                                    const std::string& channel,
                                    const std::shared_ptr<Subscriber>& subscriber) {
  {
    MutexLock lock(subscriber->mu);  // waits for a handler call in progress
    subscriber->alive = false;
  }
  std::unique_ptr<PgConnection> closing;
  MutexLock session_lock(listener->session_mu);
  bool channel_empty = false;
  bool listener_empty = false;
  {
    MutexLock lock(mu_);
    auto it = listener->channels.find(channel);
    if (it != listener->channels.end()) {
      std::erase(it->second, subscriber);
      if (it->second.empty()) {
        listener->channels.erase(it);
        channel_empty = true;
      }
    }
    listener_empty = listener->channels.empty();
    if (listener_empty) {
      auto entry = listeners_.find(DatabaseKey(listener->params));
      if (entry != listeners_.end() && entry->second == listener) listeners_.erase(entry);
    }
  }
  if (listener_empty) {
    closing = std::move(listener->session);
    listener->listening.clear();
  } else if (channel_empty && listener->session && listener->listening.erase(channel) > 0) {
    if (!ExecuteOn(*listener->session, channel, false)) {
      listener->session.reset();  // the thread reconnects and LISTENs on what is left
      listener->listening.clear();
      listener->resync_due = true;
      Wake();
    }
  }
}

bool PgNotificationHub::Connect(Listener& listener) STAGEHAND_REQUIRES(listener.session_mu) {
  std::vector<std::string> channels;
  {
    MutexLock lock(mu_);
    for (const auto& [channel, subscribers] : listener.channels) channels.push_back(channel);
  }
  if (channels.empty()) return false;  // unsubscribed meanwhile: nothing to listen for
  PgConnectParams params = listener.params;
  params.preferred_host = listener.server.host;
  params.preferred_port = listener.server.port;
  Result<std::unique_ptr<PgConnection>> opened = PgConnection::Open(params);
  const MonoTime now = SystemClock::Instance().MonoNow();
  if (!opened.ok()) {
    MarkDown(listener, now, opened.status().message());
    return false;
  }
  std::set<std::string> listening;
  for (const std::string& channel : channels) {
    if (!ExecuteOn(**opened, channel, true)) {
      MarkDown(listener, now, "LISTEN failed");
      return false;
    }
    listening.insert(channel);
  }
  listener.server = (*opened)->server();
  listener.session = std::move(*opened);
  listener.listening = std::move(listening);
  listener.last_answer = now;
  listener.ping_in_flight = false;
  MutexLock health_lock(listener.health_mu);
  listener.down = false;
  return true;
}

void PgNotificationHub::MarkDown(Listener& listener, MonoTime now, std::string reason)
    STAGEHAND_REQUIRES(listener.session_mu) {
  MutexLock health_lock(listener.health_mu);
  if (!listener.down) {
    listener.down = true;
    listener.down_noticed = now;
    // Nothing was heard from the server since its last answer.
    listener.down_since = listener.session || listener.last_answer != MonoTime{}
                              ? std::min(now, listener.last_answer)
                              : now;
  }
  listener.down_reason = std::move(reason);
}

std::optional<PgNotificationHub::ListenHealth> PgNotificationHub::Health(
    const PgConnectParams& params) const {
  std::shared_ptr<Listener> listener;
  {
    MutexLock lock(mu_);
    const auto found = listeners_.find(DatabaseKey(params));
    if (found == listeners_.end()) return std::nullopt;
    listener = found->second;
  }
  MutexLock lock(listener->health_mu);
  return ListenHealth{!listener->down, listener->down_since, listener->down_noticed,
                      listener->down_reason};
}

std::string PgNotificationHub::Ping(Listener& listener, MonoTime now)
    STAGEHAND_REQUIRES(listener.session_mu) {
  PGconn* raw = listener.session->raw();
  if (listener.ping_in_flight && PQisBusy(raw) == 0) {
    while (PGresult* result = PQgetResult(raw)) PQclear(result);
    listener.ping_in_flight = false;
    listener.last_answer = now;
  }
  if (listener.ping_in_flight) {
    if (now - listener.ping_sent < kPingTimeout) return "";
    return fmt::format("the database did not answer a ping of its LISTEN session within {} ms",
                       kPingTimeout.count());
  }
  if (now - listener.last_answer < kPingInterval) return "";
  if (PQsendQuery(raw, "") != 1 || PQflush(raw) < 0) return "the LISTEN session broke";
  listener.ping_in_flight = true;
  listener.ping_sent = now;
  return "";
}

void PgNotificationHub::Run(std::stop_token stop) {
  const SystemClock& clock = SystemClock::Instance();
  std::vector<StoreEvent> events;
  while (!stop.stop_requested()) {
    std::vector<std::shared_ptr<Listener>> listeners;
    {
      MutexLock lock(mu_);
      for (const auto& [key, listener] : listeners_) listeners.push_back(listener);
    }
    std::vector<pollfd> fds = {pollfd{wake_read_, POLLIN, 0}};
    int timeout_ms = kIdleWaitMs;
    for (const std::shared_ptr<Listener>& listener : listeners) {
      std::vector<Notice> notices;
      bool resync = false;
      bool lost = false;  // the session was found broken or silent just now
      {
        MutexLock session_lock(listener->session_mu);
        const MonoTime now = clock.MonoNow();
        if (!listener->session && now >= listener->retry_at) {
          if (Connect(*listener)) {
            listener->retry_ms = kFirstRetryMs;
          } else {
            // Drawn from the upper half of the wait, so that hosts do not retry in step.
            jitter_ = jitter_ * 6364136223846793005ULL + 1442695040888963407ULL;
            const int half = listener->retry_ms / 2;
            listener->retry_at =
                now + std::chrono::milliseconds(
                          half + static_cast<int>((jitter_ >> 33) %
                                                  static_cast<unsigned>(std::max(half, 1))));
            listener->retry_ms = std::min(listener->retry_ms * 2, kMaxRetryMs);
          }
        }
        if (listener->session) {
          resync = std::exchange(listener->resync_due, false);
          // Notifications that arrived with a LISTEN reply are already buffered.
          std::string broken;
          if (!Drain(*listener->session, notices)) {
            broken = "the LISTEN session broke";
          } else {
            broken = Ping(*listener, now);
          }
          if (broken.empty()) {
            fds.push_back(pollfd{PQsocket(listener->session->raw()), POLLIN, 0});
            const MonoTime next_ping = listener->ping_in_flight
                                           ? listener->ping_sent + kPingTimeout
                                           : listener->last_answer + kPingInterval;
            const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next_ping - now);
            timeout_ms =
                std::min(timeout_ms, static_cast<int>(std::max<long long>(wait.count(), 0)));
          } else {
            MarkDown(*listener, now, broken);
            lost = true;
            listener->session.reset();
            listener->listening.clear();
            listener->resync_due = true;
            listener->retry_at = now;
            timeout_ms = 0;
          }
        } else {
          const auto wait = std::chrono::ceil<std::chrono::milliseconds>(listener->retry_at - now);
          timeout_ms = std::min(timeout_ms, static_cast<int>(std::max<long long>(wait.count(), 0)));
        }
      }
      if (!resync && !lost && notices.empty()) continue;
      std::map<std::string, std::vector<std::shared_ptr<Subscriber>>> channels;
      {
        MutexLock lock(mu_);
        channels = listener->channels;
      }
      const auto deliver = [](Subscriber& subscriber, const StoreEvent& event) {
        MutexLock lock(subscriber.mu);
        if (subscriber.alive) subscriber.handler(event);
      };
      if (lost) {
        for (const auto& [channel, subscribers] : channels) {
          for (const auto& subscriber : subscribers) {
            MutexLock lock(subscriber->mu);
            if (subscriber->alive && subscriber->on_session_lost) subscriber->on_session_lost();
          }
        }
      }
      if (resync) {
        for (const auto& [channel, subscribers] : channels) {
          for (const auto& subscriber : subscribers) {
            deliver(*subscriber, StoreEvent{StoreEvent::Kind::kResync, ""});
          }
        }
      }
      for (const Notice& notice : notices) {
        auto it = channels.find(notice.channel);
        if (it == channels.end()) continue;
        events.clear();
        ParseNotification(notice.payload, events);
        for (const auto& subscriber : it->second) {
          for (const StoreEvent& event : events) deliver(*subscriber, event);
        }
      }
    }
    if (stop.stop_requested()) return;
    if (wake_read_ < 0) timeout_ms = std::min(timeout_ms, 50);
    const nfds_t count = wake_read_ >= 0 ? fds.size() : fds.size() - 1;
    ::poll(wake_read_ >= 0 ? fds.data() : fds.data() + 1, count, timeout_ms);
    if (wake_read_ >= 0) {
      char buffer[64];
      while (::read(wake_read_, buffer, sizeof buffer) > 0) {
      }
    }
  }
}

}  // namespace stagehand::store_internal
