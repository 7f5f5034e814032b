#include "store/postgres/pg_connection.h"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>

#include "stagehand/base/text.h"
#include "store/postgres/pg_time.h"
#include "store/postgres/statements.h"

namespace stagehand::store_internal {

namespace {

// Returns the primary line of a libpq message (its first line; DETAIL, HINT and context lines
// follow it), without the "ERROR:  " style prefix, on one line as OneLine writes it.
std::string PrimaryLine(const char* message) {
  std::string_view text = message == nullptr ? "" : message;
  text = text.substr(0, text.find('\n'));
  for (std::string_view prefix : {"ERROR:  ", "FATAL:  ", "PANIC:  "}) {
    if (text.substr(0, prefix.size()) == prefix) {
      text.remove_prefix(prefix.size());
    }
  }
  std::string line = OneLine(text);
  return line.empty() ? std::string("unknown libpq error") : line;
}

// SQLSTATEs after which the session is gone: class 08 (connection exception) and the operator
// or crash shutdowns of class 57.
bool IsConnectionSqlState(std::string_view state) {
  return state.substr(0, 2) == "08" || state == "57P01" || state == "57P02" || state == "57P03";
}

// Removes the password from a libpq message about `conninfo`: libpq echoes a malformed URI
// verbatim, and any other mention of the password value is masked as well.
std::string Redact(std::string message, const std::string& conninfo) {
  const auto replace_all = [&message](const std::string& secret, std::string_view mask) {
    if (secret.empty()) return;
    for (size_t at = message.find(secret); at != std::string::npos;
         at = message.find(secret, at + mask.size())) {
      message.replace(at, secret.size(), mask);
    }
  };
  if (PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), nullptr)) {
    for (PQconninfoOption* option = options; option->keyword != nullptr; ++option) {
      if (option->val != nullptr && std::string_view(option->keyword) == "password") {
        replace_all(option->val, "***");
      }
    }
    PQconninfoFree(options);
  }
  replace_all(conninfo, "<connection string>");
  // A URI's user:password@ part, when the URI did not parse.
  for (std::string_view scheme : {"postgresql://", "postgres://"}) {
    for (size_t at = message.find(scheme); at != std::string::npos;
         at = message.find(scheme, at + 1)) {
      const size_t start = at + scheme.size();
      const size_t end = message.find_first_of("@/\" ", start);
      if (end == std::string::npos || message[end] != '@') continue;
      const size_t colon = message.find(':', start);
      if (colon != std::string::npos && colon < end)
        message.replace(colon + 1, end - colon - 1, "***");
    }
  }
  return message;
}

// Splits a libpq list value ("a,b,c") into its items.
std::vector<std::string> SplitList(std::string_view list) {
  std::vector<std::string> items;
  while (true) {
    const std::size_t comma = list.find(',');
    items.emplace_back(list.substr(0, comma));
    if (comma == std::string_view::npos) return items;
    list.remove_prefix(comma + 1);
  }
}

// Returns each host of the multi-host list `conninfo` names, with its port (one port may serve
// them all), or nothing when it names one host, or addresses hosts by hostaddr.
std::vector<std::pair<std::string, std::string>> HostsOf(const std::string& conninfo) {
  std::string host;
  std::string port;
  bool by_address = false;
  if (PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), nullptr)) {
    for (PQconninfoOption* option = options; option->keyword != nullptr; ++option) {
      if (option->val == nullptr) continue;
      const std::string_view keyword = option->keyword;
      if (keyword == "host") host = option->val;
      if (keyword == "port") port = option->val;
      if (keyword == "hostaddr" && *option->val != '\0') by_address = true;
    }
    PQconninfoFree(options);
  }
  std::vector<std::pair<std::string, std::string>> hosts;
  if (by_address || host.find(',') == std::string::npos) return hosts;
  const std::vector<std::string> names = SplitList(host);
  const std::vector<std::string> ports = SplitList(port);
  for (std::size_t i = 0; i < names.size(); ++i) {
    hosts.emplace_back(names[i], ports.size() == names.size() ? ports[i] : ports.front());
  }
  return hosts;
}

// The keywords and values of one connection attempt (without the terminating nullptrs).
struct ConnectTarget {
  std::vector<const char*> keywords;
  std::vector<const char*> values;
};

// Gap between the start of one host's connection attempt and the next host's while none has
// succeeded: a primary that answers is reached before a second attempt starts, and a host that
// does not answer delays the next by no more than this.
constexpr std::chrono::milliseconds kConnectStagger{250};

// An attempt in progress: its connection and what PQconnectPoll asked to wait for.
struct ConnectAttempt {
  PGconn* conn = nullptr;
  PostgresPollingStatusType wants = PGRES_POLLING_WRITING;
  std::chrono::steady_clock::time_point deadline;
};

// Whether a failed connection's `message` is one every host of a cluster would give (a role or
// database that does not exist, a password refused): physical replicas share roles and
// databases, so the other hosts' attempts are not waited for. A standby's refusal to write, a
// server starting up or out of sessions are not.
bool AnswersForEveryHost(std::string_view message) {
  if (message.find("FATAL:") == std::string_view::npos) return false;
  for (std::string_view decisive :
       {"does not exist", "authentication failed", "pg_hba.conf", "permission denied"}) {
    if (message.find(decisive) != std::string_view::npos) return true;
  }
  return false;
}

// While every attempt is in flight and none has answered, the hosts are tried again this long
// after the last start, on new sockets: a server cut off by a partition that heals (or a path
// that dropped the first packets) is then reached within about this, not after the kernel's
// SYN retransmissions (1, 3, 7 s) or the whole connect timeout.
constexpr std::chrono::milliseconds kSilentRetry{1000};

// Connects to the first of `targets` to complete, starting them in order kConnectStagger apart
// and again every kSilentRetry while none has answered, all within `timeout`, and closes the
// others. Returns nullptr when every attempt failed, with the first failure's reason in
// `first_error`.
PGconn* ConnectFirst(std::vector<ConnectTarget>& targets, std::chrono::milliseconds timeout,
                     std::string* first_error) {
  using SteadyClock = std::chrono::steady_clock;
  const auto fail = [&](PGconn* conn, const std::string& fallback) {
    if (first_error->empty() && conn != nullptr) *first_error = PrimaryLine(PQerrorMessage(conn));
    if (first_error->empty()) *first_error = fallback;
    if (conn != nullptr) PQfinish(conn);
  };
  for (ConnectTarget& target : targets) {
    target.keywords.push_back(nullptr);
    target.values.push_back(nullptr);
  }
  const SteadyClock::time_point give_up = SteadyClock::now() + timeout;
  std::vector<ConnectAttempt> attempts;
  std::size_t next = 0;  // the target to start next
  SteadyClock::time_point next_start = SteadyClock::now();
  PGconn* winner = nullptr;
  while (winner == nullptr) {
    SteadyClock::time_point now = SteadyClock::now();
    const bool again = next == targets.size() && !attempts.empty() && now + kSilentRetry < give_up;
    if (again && now >= next_start) next = 0;
    if (next < targets.size() && (now >= next_start || attempts.empty())) {
      ConnectTarget& target = targets[next++];
      PGconn* conn = PQconnectStartParams(target.keywords.data(), target.values.data(), 1);
      if (conn == nullptr || PQstatus(conn) == CONNECTION_BAD) {
        fail(conn, "out of memory creating a connection");
      } else {
        attempts.push_back({conn, PGRES_POLLING_WRITING, std::min(now + timeout, give_up)});
      }
      next_start = now + (next == targets.size() ? kSilentRetry : kConnectStagger);
      continue;
    }
    if (attempts.empty()) break;
    std::vector<pollfd> fds;
    SteadyClock::time_point wake =
        next < targets.size() || again ? next_start : SteadyClock::time_point::max();
    for (const ConnectAttempt& attempt : attempts) {
      const short events = attempt.wants == PGRES_POLLING_READING ? POLLIN : POLLOUT;
      fds.push_back({PQsocket(attempt.conn), events, 0});
      wake = std::min(wake, attempt.deadline);
    }
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(wait, 0, 60000))) <
            0 &&
        errno != EINTR) {
      break;
    }
    now = SteadyClock::now();
    for (std::size_t i = attempts.size(); i-- > 0;) {
      ConnectAttempt& attempt = attempts[i];
      if (fds[i].revents != 0) attempt.wants = PQconnectPoll(attempt.conn);
      if (attempt.wants == PGRES_POLLING_OK) {
        if (winner == nullptr) {
          winner = attempt.conn;
          continue;
        }
        PQfinish(attempt.conn);
      } else if (attempt.wants == PGRES_POLLING_FAILED) {
        const bool decisive = AnswersForEveryHost(PQerrorMessage(attempt.conn));
        fail(attempt.conn, "the connection failed");
        if (decisive) {
          next = targets.size();
          for (std::size_t j = 0; j < attempts.size(); ++j) {
            if (j != i) fail(attempts[j].conn, "");
          }
          attempts.clear();
          break;
        }
      } else if (now >= attempt.deadline) {
        fail(attempt.conn, "timeout expired");
      } else {
        continue;
      }
      attempts.erase(attempts.begin() + static_cast<long>(i));
    }
  }
  for (const ConnectAttempt& attempt : attempts) {
    if (attempt.conn != winner) PQfinish(attempt.conn);
  }
  return winner;
}

std::string Seconds(std::chrono::milliseconds duration) {
  const long long seconds = (duration.count() + 999) / 1000;
  return std::to_string(seconds < 1 ? 1 : seconds);
}

}  // namespace

PgParams& PgParams::Add(std::string value) {
  values_.emplace_back(std::move(value));
  return *this;
}

PgParams& PgParams::Add(double value) { return Add(fmt::format("{}", value)); }

PgParams& PgParams::Add(long long value) { return Add(std::to_string(value)); }

PgParams& PgParams::Add(bool value) { return Add(std::string(value ? "true" : "false")); }

PgParams& PgParams::Add(const std::optional<std::string>& value) {
  values_.push_back(value);
  return *this;
}

PgParams& PgParams::AddNull() {
  values_.emplace_back(std::nullopt);
  return *this;
}

std::vector<const char*> PgParams::Pointers() const {
  std::vector<const char*> pointers;
  pointers.reserve(values_.size());
  for (const auto& value : values_) pointers.push_back(value ? value->c_str() : nullptr);
  return pointers;
}

PgResult::PgResult(PGresult* result, std::string error, bool connection_lost)
    : result_(result), error_(std::move(error)), connection_lost_(connection_lost) {}

bool PgResult::ok() const {
  if (!result_) return false;
  const ExecStatusType status = PQresultStatus(result_.get());
  return status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
}

std::string PgResult::SqlState() const {
  if (!result_) return "";
  const char* state = PQresultErrorField(result_.get(), PG_DIAG_SQLSTATE);
  return state == nullptr ? "" : state;
}

int PgResult::rows() const { return result_ ? PQntuples(result_.get()) : 0; }

bool PgResult::IsNull(int row, int column) const {
  return PQgetisnull(result_.get(), row, column) != 0;
}

std::string_view PgResult::Get(int row, int column) const {
  return {PQgetvalue(result_.get(), row, column),
          static_cast<size_t>(PQgetlength(result_.get(), row, column))};
}

std::optional<std::string> PgResult::GetOptional(int row, int column) const {
  if (IsNull(row, column)) return std::nullopt;
  return std::string(Get(row, column));
}

bool PgResult::GetBool(int row, int column) const {
  return !IsNull(row, column) && Get(row, column) == "t";
}

long long PgResult::GetInt(int row, int column) const {
  const std::string_view text = Get(row, column);
  long long value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

long long PgResult::affected() const {
  if (!result_) return 0;
  const char* text = PQcmdTuples(result_.get());
  return text == nullptr || *text == '\0' ? 0 : std::atoll(text);
}

Result<std::unique_ptr<PgConnection>> PgConnection::Open(const PgConnectParams& params,
                                                         WallTime* db_now) {
  const std::string connect_timeout = Seconds(params.connect_timeout);
  // Unacknowledged data is given up on a little after the statement timeout would have fired, or
  // within the call bound when there is one; an idle session that stops answering is noticed by
  // keepalives within about the call bound too.
  const bool bounded = params.call_timeout.count() > 0;
  const std::string tcp_user_timeout =
      std::to_string(bounded ? params.call_timeout.count()
                             : params.statement_timeout.count() + params.connect_timeout.count());
  const std::string keepalives_idle = bounded ? Seconds(params.call_timeout / 2) : "10";
  const std::string keepalives_interval = bounded ? "1" : "5";
  // A session must be able to write: with a multi-host list libpq skips standbys (the URL's own
  // target_session_attrs, given later, overrides this).
  std::vector<const char*> keywords = {"target_session_attrs", "dbname",
                                       "connect_timeout",      "keepalives",
                                       "keepalives_idle",      "keepalives_interval",
                                       "keepalives_count",     "tcp_user_timeout",
                                       "client_encoding",      "fallback_application_name"};
  std::vector<const char*> values = {"read-write",
                                     params.conninfo.c_str(),
                                     connect_timeout.c_str(),
                                     "1",
                                     keepalives_idle.c_str(),
                                     keepalives_interval.c_str(),
                                     "3",
                                     tcp_user_timeout.c_str(),
                                     "UTF8",
                                     params.application_name.c_str()};
  if (!params.database.empty()) {
    // A later dbname overrides the one inside the expanded connection string.
    keywords.push_back("dbname");
    values.push_back(params.database.c_str());
  }
  // A multi-host list is walked here rather than by libpq: libpq gives up on a list at the first
  // host that accepts the TCP connection and then fails (a load balancer or proxy in front of a
  // dead server closes it at once), and it waits a whole connect_timeout on a host that does not
  // answer (a primary cut off by a partition) before it tries the next. The host that answered
  // last (the primary, after a failover) is tried first.
  std::vector<std::pair<std::string, std::string>> hosts = HostsOf(params.conninfo);
  if (!params.preferred_host.empty()) {
    const auto preferred = std::find(hosts.begin(), hosts.end(),
                                     std::pair(params.preferred_host, params.preferred_port));
    if (preferred != hosts.end()) std::rotate(hosts.begin(), preferred, preferred + 1);
  }
  std::vector<ConnectTarget> targets;
  if (hosts.empty()) targets.push_back({keywords, values});
  for (const auto& [host, port] : hosts) {
    ConnectTarget& target = targets.emplace_back(ConnectTarget{keywords, values});
    target.keywords.insert(target.keywords.end(), {"host", "port"});
    target.values.insert(target.values.end(), {host.c_str(), port.c_str()});
  }
  std::string first_error;
  PGconn* raw = ConnectFirst(targets, params.connect_timeout, &first_error);
  if (raw == nullptr) return UnavailableError(Redact(first_error, params.conninfo));
  std::unique_ptr<PgConnection> connection(new PgConnection(raw));
  connection->set_call_timeout(params.call_timeout);
  // Notices ("relation already exists, skipping") are not errors; keep them off stderr.
  PQsetNoticeProcessor(
      raw, [](void*, const char*) {}, nullptr);

  connection->unnamed_statements_ = params.transaction_pooler;
  if (params.transaction_pooler && !params.search_path.empty()) {
    return InvalidArgumentError(fmt::format(
        "schema '{}' cannot be used behind a pooler in transaction mode (a session's search_path "
        "does not follow its statements there): use pluginDivisionMode database",
        params.search_path));
  }
  std::string search_path;
  if (!params.search_path.empty()) {
    STAGEHAND_ASSIGN_OR_RETURN(std::string quoted, connection->QuoteIdentifier(params.search_path));
    search_path = quoted;
  }
  PgParams setup;
  setup.Add(std::to_string(params.statement_timeout.count())).Add(search_path);
  PgResult result = connection->ExecuteText(
      params.transaction_pooler ? pg_sql::kPooledSessionSetup : pg_sql::kSessionSetup, setup);
  if (!result.ok()) return UnavailableError("session setup failed: " + result.error());
  connection->search_path_ = params.search_path;
  if (db_now != nullptr && result.rows() == 1) {
    if (Result<WallTime> now = ParsePgTimestamp(result.Get(0, 4)); now.ok()) *db_now = *now;
  }
  PgServerIdentity& server = connection->server_;
  server.host = PQhost(raw) == nullptr ? "" : PQhost(raw);
  server.port = PQport(raw) == nullptr ? "" : PQport(raw);
  // A server that does not tell (a PostgreSQL-compatible service without these functions) is
  // still used; its changes are not detected.
  PgResult identity = connection->ExecuteText(pg_sql::kServerIdentity, PgParams());
  if (identity.ok() && identity.rows() == 1) {
    if (identity.GetBool(0, 1)) {
      return UnavailableError(fmt::format(
          "the server at {}:{} is a standby (read-only); name the primary, or every server with "
          "target_session_attrs=read-write",
          server.host, server.port));
    }
    server.system_id = identity.GetOptional(0, 0).value_or("");
    const std::string_view wal_file = identity.Get(0, 2);
    std::uint32_t timeline = 0;
    if (wal_file.size() >= 8 &&
        std::from_chars(wal_file.data(), wal_file.data() + 8, timeline, 16).ec == std::errc()) {
      server.timeline = timeline;
    }
  } else if (identity.connection_lost()) {
    return UnavailableError("session setup failed: " + identity.error());
  }
  return connection;
}

bool PgServerIdentity::SameHistoryAs(const PgServerIdentity& other) const {
  if (system_id.empty() || other.system_id.empty()) return true;
  return system_id == other.system_id && timeline == other.timeline;
}

PgConnection::~PgConnection() { PQfinish(conn_); }

bool PgConnection::UseSearchPath(const std::string& schema) {
  if (schema == search_path_) return true;
  std::string quoted;
  if (!schema.empty()) {
    Result<std::string> escaped = QuoteIdentifier(schema);
    if (!escaped.ok()) return false;
    quoted = *escaped;
  }
  PgParams params;
  params.Add(quoted);
  if (!ExecuteText(pg_sql::kSetSearchPath, params).ok()) return false;
  search_path_ = schema;
  return true;
}

PgResult PgConnection::Wrap(PGresult* result) {
  const ExecStatusType status = result == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(result);
  if (result != nullptr && (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK)) {
    return PgResult(result, "", false);
  }
  std::string error;
  std::string state;
  if (result != nullptr) {
    const char* primary = PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
    error = primary != nullptr ? primary : PrimaryLine(PQresultErrorMessage(result));
    const char* code = PQresultErrorField(result, PG_DIAG_SQLSTATE);
    if (code != nullptr) state = code;
  } else {
    error = PrimaryLine(PQerrorMessage(conn_));
  }
  const bool lost = PQstatus(conn_) != CONNECTION_OK || IsConnectionSqlState(state);
  return PgResult(result, std::move(error), lost);
}

PgResult PgConnection::AwaitResult() {
  SystemClock& clock = SystemClock::Instance();
  const bool bounded = call_timeout_.count() > 0;
  const MonoTime deadline = clock.MonoNow() + call_timeout_;
  // Waits until the socket is ready for `events` or the deadline passes; false on timeout. Past
  // the deadline the socket is still looked at once: an answer that arrived while this thread
  // was not running (a busy host) is an answer, not a silent database.
  const auto wait_for = [&](short events) {
    while (true) {
      int timeout_ms = -1;
      bool last_look = false;
      if (bounded) {
        const auto left =
            std::chrono::ceil<std::chrono::milliseconds>(deadline - clock.MonoNow()).count();
        last_look = left <= 0;
        timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, 60'000));
      }
      pollfd fd{PQsocket(conn_), events, 0};
      const int ready = ::poll(&fd, 1, timeout_ms);
      if (ready > 0) return true;
      if (ready < 0 && errno != EINTR) return true;  // let libpq report the socket's error
      if (last_look && ready == 0) return false;
    }
  };
  const auto abandon = [&] {
    // PQcancel is not used: it opens a new connection, which a path that drops packets would block
    // just as long. The server's statement_timeout ends the statement. The session is left with a
    // query in flight (not PQTRANS_IDLE), so the pool closes it instead of lending it again.
    return PgResult(nullptr,
                    fmt::format("no answer from the database within {} ms (connection dropped)",
                                call_timeout_.count()),
                    true);
  };
  while (true) {
    const int flushed = PQflush(conn_);
    if (flushed == 0) break;
    if (flushed < 0) return Wrap(nullptr);
    if (!wait_for(POLLIN | POLLOUT)) return abandon();
    if (PQconsumeInput(conn_) == 0) return Wrap(nullptr);
  }
  PGresult* first = nullptr;
  while (true) {
    while (PQisBusy(conn_) != 0) {
      if (!wait_for(POLLIN)) {
        if (first != nullptr) PQclear(first);
        return abandon();
      }
      if (PQconsumeInput(conn_) == 0) {
        if (first != nullptr) PQclear(first);
        return Wrap(nullptr);
      }
    }
    PGresult* next = PQgetResult(conn_);
    if (next == nullptr) break;
    if (first == nullptr) {
      first = next;
    } else {
      PQclear(next);
    }
  }
  return Wrap(first);
}

std::optional<PgResult> PgConnection::Prepare(const PgStatement& statement) {
  STAGEHAND_CHECK(statement.index >= 0 && statement.index < kMaxStatements);
  if (statement.replan || unnamed_statements_ || prepared_[statement.index]) return std::nullopt;
  PgResult prepared = PQsendPrepare(conn_, statement.name, statement.sql, 0, nullptr) == 1
                          ? AwaitResult()
                          : Wrap(nullptr);
  if (!prepared.ok() && prepared.SqlState() != "42P05") return prepared;  // 42P05: exists
  prepared_[statement.index] = true;
  return std::nullopt;
}

PgResult PgConnection::Execute(const PgStatement& statement, const PgParams& params) {
  if (statement.replan || unnamed_statements_) return ExecuteText(statement.sql, params);
  if (std::optional<PgResult> failed = Prepare(statement)) return *std::move(failed);
  const std::vector<const char*> values = params.Pointers();
  if (PQsendQueryPrepared(conn_, statement.name, params.size(), values.data(), nullptr, nullptr,
                          /*resultFormat=*/0) != 1) {
    return Wrap(nullptr);
  }
  PgResult result = AwaitResult();
  // 26000: no such prepared statement. The statement was prepared on another server session: a
  // pooler in transaction mode sits in between. Nothing ran; run it unnamed from now on.
  // Inside a transaction, which the error aborted, the caller's retry runs it unnamed.
  if (result.SqlState() == "26000") {
    unnamed_statements_ = true;
    if (PQtransactionStatus(conn_) == PQTRANS_IDLE) return ExecuteText(statement.sql, params);
  }
  return result;
}

PgResult PgConnection::ExecuteText(const char* sql, const PgParams& params) {
  const std::vector<const char*> values = params.Pointers();
  if (PQsendQueryParams(conn_, sql, params.size(), nullptr, values.data(), nullptr, nullptr,
                        /*resultFormat=*/0) != 1) {
    return Wrap(nullptr);
  }
  return AwaitResult();
}

PgResult PgConnection::ExecuteScript(const char* sql) { return Wrap(PQexec(conn_, sql)); }

bool PgConnection::Healthy() {
  if (PQstatus(conn_) != CONNECTION_OK) return false;
  pollfd readable{PQsocket(conn_), POLLIN, 0};
  if (::poll(&readable, 1, 0) > 0) {
    // An idle session only receives something when the server is closing it (or sends a notice).
    if (PQconsumeInput(conn_) == 0) return false;
    while (PGnotify* notify = PQnotifies(conn_)) PQfreemem(notify);
  }
  return PQstatus(conn_) == CONNECTION_OK && PQtransactionStatus(conn_) == PQTRANS_IDLE;
}

Result<std::string> PgConnection::QuoteIdentifier(std::string_view identifier) {
  char* quoted = PQescapeIdentifier(conn_, identifier.data(), identifier.size());
  if (quoted == nullptr) {
    return InvalidArgumentError(
        fmt::format("cannot quote identifier: {}", PrimaryLine(PQerrorMessage(conn_))));
  }
  std::string result(quoted);
  PQfreemem(quoted);
  return result;
}

std::string DatabaseNameOf(const PgConnectParams& params) {
  if (!params.database.empty()) return params.database;
  std::string name;
  std::string user;
  if (PQconninfoOption* options = PQconninfoParse(params.conninfo.c_str(), nullptr)) {
    for (PQconninfoOption* option = options; option->keyword != nullptr; ++option) {
      if (option->val == nullptr || *option->val == '\0') continue;
      if (std::string_view(option->keyword) == "dbname") name = option->val;
      if (std::string_view(option->keyword) == "user") user = option->val;
    }
    PQconninfoFree(options);
  }
  if (name.empty()) {
    if (const char* env = std::getenv("PGDATABASE")) name = env;
  }
  if (name.empty()) name = user;
  if (name.empty()) {
    if (const char* env = std::getenv("PGUSER")) name = env;
  }
  return name.empty() ? std::string("(default)") : name;
}

}  // namespace stagehand::store_internal
