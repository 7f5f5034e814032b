#include "store/mysql/my_connection.h"

#include <errmsg.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <mysql.h>
#include <poll.h>

#include <charconv>
#include <cmath>
#include <mutex>

#include "stagehand/base/text.h"

namespace stagehand::store_internal {

namespace {

// Client errors after which the session is gone.
bool IsConnectionError(unsigned code) {
  return code == CR_SERVER_GONE_ERROR || code == CR_SERVER_LOST || code == CR_CONNECTION_ERROR ||
         code == CR_CONN_HOST_ERROR || code == CR_COMMANDS_OUT_OF_SYNC ||
         code == 1053 /* ER_SERVER_SHUTDOWN */ || code == 1927 /* ER_CONNECTION_KILLED */;
}

// Returns `text` with every occurrence of `what` (non-empty) replaced by `with`.
std::string ReplaceAll(std::string text, std::string_view what, std::string_view with) {
  for (std::size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + with.size())) {
    text.replace(at, what.size(), with);
  }
  return text;
}

unsigned WholeSeconds(std::chrono::milliseconds span) {
  const auto seconds = std::chrono::ceil<std::chrono::seconds>(span).count();
  return static_cast<unsigned>(std::max<long long>(seconds, 1));
}

// The length of the quoted text (string or identifier) that starts at sql[at] with `quote`,
// including both quotes; the rest of `sql` when it is not closed.
std::size_t QuotedLength(std::string_view sql, std::size_t at, char quote) {
  for (std::size_t i = at + 1; i < sql.size(); ++i) {
    if (sql[i] == '\\' && quote != '`') {
      ++i;
    } else if (sql[i] == quote) {
      if (i + 1 < sql.size() && sql[i + 1] == quote) {
        ++i;
      } else {
        return i + 1 - at;
      }
    }
  }
  return sql.size() - at;
}

// The length of the comment that starts at sql[at], or 0 when none does there.
std::size_t CommentLength(std::string_view sql, std::size_t at) {
  const std::string_view rest = sql.substr(at);
  if (rest.starts_with("#") || rest.starts_with("-- ")) {
    const std::size_t end = rest.find('\n');
    return end == std::string_view::npos ? rest.size() : end + 1;
  }
  if (rest.starts_with("/*")) {
    const std::size_t end = rest.find("*/", 2);
    return end == std::string_view::npos ? rest.size() : end + 2;
  }
  return 0;
}

}  // namespace

MyParams& MyParams::Add(std::string value) {
  values_.emplace_back(std::move(value));
  return *this;
}

MyParams& MyParams::Add(double value) {
  values_.emplace_back(value);
  return *this;
}

MyParams& MyParams::Add(const std::optional<std::string>& value) {
  return value ? Add(*value) : AddNull();
}

MyParams& MyParams::AddNull() {
  values_.emplace_back(std::monostate{});
  return *this;
}

std::string_view MyResult::Get(int row, int column) const {
  const std::optional<std::string>& value = Cell(row, column);
  return value ? std::string_view(*value) : std::string_view();
}

const std::optional<std::string>& MyResult::GetOptional(int row, int column) const {
  return Cell(row, column);
}

std::int64_t MyResult::GetInt(int row, int column) const {
  const std::string_view text = Get(row, column);
  std::int64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

Result<std::unique_ptr<MyConnection>> MyConnection::Open(const MyConnectParams& params) {
  // mysql_init() initialises the library on first use, which is not thread-safe.
  static std::once_flag library_initialised;
  std::call_once(library_initialised, [] { mysql_library_init(0, nullptr, nullptr); });
  MYSQL* mysql = mysql_init(nullptr);
  if (mysql == nullptr) return UnavailableError("cannot allocate a MySQL session");
  const unsigned connect_timeout = WholeSeconds(params.connect_timeout);
  mysql_optionsv(mysql, MYSQL_OPT_CONNECT_TIMEOUT, &connect_timeout);
  if (params.call_timeout.count() > 0) {
    const unsigned call_timeout = WholeSeconds(params.call_timeout);
    mysql_optionsv(mysql, MYSQL_OPT_READ_TIMEOUT, &call_timeout);
    mysql_optionsv(mysql, MYSQL_OPT_WRITE_TIMEOUT, &call_timeout);
  }
  mysql_optionsv(mysql, MYSQL_SET_CHARSET_NAME, "utf8mb4");
  if (params.tls_required) {
    const my_bool enforce = 1;
    mysql_optionsv(mysql, MYSQL_OPT_SSL_ENFORCE, &enforce);
  }
  const bool unix_socket = !params.socket_path.empty();
  if (mysql_real_connect(
          mysql, unix_socket ? "localhost" : params.host.c_str(), params.user.c_str(),
          params.password.c_str(), params.database.empty() ? nullptr : params.database.c_str(),
          unix_socket ? 0 : static_cast<unsigned>(params.port),
          unix_socket ? params.socket_path.c_str() : nullptr, CLIENT_FOUND_ROWS) == nullptr) {
    std::string reason = OneLine(mysql_error(mysql));
    if (!params.password.empty()) reason = ReplaceAll(reason, params.password, "***");
    mysql_close(mysql);
    return UnavailableError(fmt::format(
        "cannot connect to MySQL at {}: {}",
        unix_socket ? params.socket_path : fmt::format("{}:{}", params.host, params.port), reason));
  }
  // Close-on-exec whatever the library did: the daemon's children must not inherit the session.
  if (const int fd = static_cast<int>(mysql_get_socket(mysql)); fd >= 0) {
    fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
  }
  std::unique_ptr<MyConnection> connection(new MyConnection(mysql));
  if (!params.time_zone.empty()) {
    MyResult set = connection->Execute("SET time_zone = ?", MyParams().Add(params.time_zone));
    if (!set.ok()) {
      return UnavailableError("cannot set the MySQL session's time zone: " + set.error());
    }
  }
  return connection;
}

MyConnection::~MyConnection() { mysql_close(mysql_); }

Result<std::string> MyConnection::QuoteIdentifier(std::string_view identifier) {
  if (identifier.empty() || identifier.find('\0') != std::string_view::npos) {
    return InvalidArgumentError("a MySQL identifier must be non-empty text without NUL");
  }
  return "`" + ReplaceAll(std::string(identifier), "`", "``") + "`";
}

std::string MyConnection::Literal(const MyParams::Value& value) {
  if (std::holds_alternative<std::monostate>(value)) return "NULL";
  if (const std::int64_t* number = std::get_if<std::int64_t>(&value)) {
    return std::to_string(*number);
  }
  if (const double* number = std::get_if<double>(&value)) {
    if (!std::isfinite(*number)) return "NULL";
    return fmt::format("{}", *number);
  }
  const std::string& text = std::get<std::string>(value);
  std::string escaped(text.size() * 2 + 1, '\0');
  const unsigned long length =
      mysql_real_escape_string(mysql_, escaped.data(), text.data(), text.size());
  escaped.resize(length);
  return "'" + escaped + "'";
}

Result<std::string> MyConnection::Bind(std::string_view sql, const MyParams& params) {
  std::string bound;
  bound.reserve(sql.size() + 16 * params.values_.size());
  std::size_t placeholders = 0;
  for (std::size_t i = 0; i < sql.size();) {
    const char c = sql[i];
    const std::size_t skip =
        c == '\'' || c == '"' || c == '`' ? QuotedLength(sql, i, c) : CommentLength(sql, i);
    if (skip > 0) {
      bound.append(sql.substr(i, skip));
      i += skip;
      continue;
    }
    if (c != '?') {
      bound += c;
    } else if (placeholders++ < params.values_.size()) {
      bound += Literal(params.values_[placeholders - 1]);
    }
    ++i;
  }
  if (placeholders != params.values_.size()) {
    return InvalidArgumentError(
        fmt::format("a statement was given {} parameters for {} placeholders",
                    params.values_.size(), placeholders));
  }
  return bound;
}

MyResult MyConnection::Failure() {
  MyResult result;
  result.error_code_ = mysql_errno(mysql_);
  if (result.error_code_ == 0) result.error_code_ = CR_UNKNOWN_ERROR;
  result.sql_state_ = mysql_sqlstate(mysql_);
  result.error_ = OneLine(mysql_error(mysql_));
  if (result.error_.empty()) result.error_ = "unknown MySQL error";
  result.connection_lost_ = IsConnectionError(result.error_code_);
  lost_ = lost_ || result.connection_lost_;
  return result;
}

MyResult MyConnection::Execute(std::string_view sql, const MyParams& params) {
  Result<std::string> bound = Bind(sql, params);
  if (!bound.ok()) {
    MyResult result;
    result.error_code_ = CR_UNKNOWN_ERROR;
    result.error_ = bound.status().message();
    return result;
  }
  if (mysql_real_query(mysql_, bound->data(), bound->size()) != 0) return Failure();
  MyResult result;
  MYSQL_RES* rows = mysql_store_result(mysql_);
  if (rows == nullptr) {
    if (mysql_field_count(mysql_) != 0) return Failure();
    result.affected_ = static_cast<long long>(mysql_affected_rows(mysql_));
    return result;
  }
  result.columns_ = static_cast<int>(mysql_num_fields(rows));
  result.rows_.reserve(mysql_num_rows(rows));
  while (MYSQL_ROW row = mysql_fetch_row(rows)) {
    const unsigned long* lengths = mysql_fetch_lengths(rows);
    std::vector<std::optional<std::string>>& out = result.rows_.emplace_back();
    out.reserve(static_cast<std::size_t>(result.columns_));
    for (int column = 0; column < result.columns_; ++column) {
      if (row[column] == nullptr) {
        out.emplace_back(std::nullopt);
      } else {
        out.emplace_back(std::string(row[column], lengths[column]));
      }
    }
  }
  result.affected_ = static_cast<long long>(result.rows_.size());
  mysql_free_result(rows);
  return result;
}

bool MyConnection::Healthy() {
  if (lost_) return false;
  // An idle session receives nothing unless the server is closing it (KILL, wait_timeout, a
  // restart): anything readable, its end of file included, means the session is gone.
  pollfd readable{mysql_get_socket(mysql_), POLLIN, 0};
  return ::poll(&readable, 1, 0) == 0;
}

}  // namespace stagehand::store_internal
