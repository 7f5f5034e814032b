#include "store/postgres/pg_arrays.h"

#include <fmt/format.h>

#include <utility>

#include "stagehand/base/check.h"
#include "store/postgres/pg_time.h"
#include "store/postgres/statements.h"
#include "store/run_history_support.h"

namespace stagehand::store_internal {

std::string_view PlanKindName(NextRunPlan::Kind kind) {
  switch (kind) {
    case NextRunPlan::Kind::kNull:
      return pg_sql::kPlanNull;
    case NextRunPlan::Kind::kNow:
      return pg_sql::kPlanNow;
    case NextRunPlan::Kind::kNowPlus:
      return pg_sql::kPlanNowPlus;
    case NextRunPlan::Kind::kInstant:
      return pg_sql::kPlanInstant;
    case NextRunPlan::Kind::kScheduledPlusCadence:
      return pg_sql::kPlanScheduledPlus;
  }
  STAGEHAND_CHECK(false);
}

void PgArray::Separate() {
  if (text_.size() > 1) text_ += ',';
}

PgArray& PgArray::Add(std::string_view value) {
  Separate();
  text_ += '"';
  for (char c : value) {
    if (c == '"' || c == '\\') text_ += '\\';
    text_ += c;
  }
  text_ += '"';
  return *this;
}

PgArray& PgArray::AddOrNull(const std::optional<std::string>& value) {
  return value ? Add(std::string_view(*value)) : AddNull();
}

PgArray& PgArray::AddUnquoted(std::string_view value) {
  Separate();
  text_ += value;
  return *this;
}

PgArray& PgArray::AddInt(std::optional<std::int64_t> value) {
  return value ? AddUnquoted(fmt::format("{}", *value)) : AddNull();
}

std::string PgArray::Finish() && {
  text_ += '}';
  return std::move(text_);
}

std::string TextArray(std::span<const std::string> values) {
  PgArray array;
  for (const std::string& value : values) array.Add(value);
  return std::move(array).Finish();
}

std::string HexOf(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const auto byte = static_cast<unsigned char>(c);
    hex += kDigits[byte >> 4];
    hex += kDigits[byte & 0xfU];
  }
  return hex;
}

std::optional<std::string> BytesOfHex(std::string_view hex) {
  const auto value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string bytes;
  bytes.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int high = value(hex[i]);
    const int low = value(hex[i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    bytes += static_cast<char>(high * 16 + low);
  }
  return bytes;
}

void PlanArrays::Add(const NextRunPlan& plan) {
  kinds_.AddUnquoted(PlanKindName(plan.kind));
  seconds_.AddUnquoted(fmt::format("{}", plan.seconds));
  if (plan.kind == NextRunPlan::Kind::kInstant) {
    instants_.Add(FormatPgTimestamp(plan.instant));
  } else {
    instants_.AddNull();
  }
}

void PlanArrays::AddTo(PgParams& params) && {
  params.Add(std::move(kinds_).Finish())
      .Add(std::move(seconds_).Finish())
      .Add(std::move(instants_).Finish());
}

namespace {

std::optional<std::int64_t> IntOrNull(std::optional<int> value) {
  if (!value) return std::nullopt;
  return *value;
}

}  // namespace

void RunOriginArrays::Add(const RunOrigin& origin, std::optional<WallTime> started) {
  hosts_.Add(origin.host);
  pids_.AddInt(origin.pid);
  triggers_.AddUnquoted(RunTriggerName(origin.trigger));
  if (origin.slot) {
    slots_.Add(FormatPgTimestamp(ToMillis(*origin.slot)));
  } else {
    slots_.AddNull();
  }
  if (started) {
    starts_.Add(FormatPgTimestamp(ToMillis(*started)));
  } else {
    starts_.AddNull();
  }
  attempts_.AddInt(origin.attempt);
  trace_ids_.AddOrNull(origin.trace_id);
}

void RunOriginArrays::AddNull() {
  for (PgArray* array : {&hosts_, &pids_, &triggers_, &slots_, &starts_, &attempts_, &trace_ids_}) {
    array->AddNull();
  }
}

void RunOriginArrays::AddTo(PgParams& params) && {
  params.Add(std::move(hosts_).Finish())
      .Add(std::move(pids_).Finish())
      .Add(std::move(triggers_).Finish())
      .Add(std::move(slots_).Finish());
  if (with_starts_) params.Add(std::move(starts_).Finish());
  params.Add(std::move(attempts_).Finish()).Add(std::move(trace_ids_).Finish());
}

void RunFinishArrays::Add(const RunFinish& finish) {
  outcomes_.AddUnquoted(RunOutcomeName(finish.outcome));
  errors_.AddOrNull(finish.error_json);
  exit_codes_.AddInt(IntOrNull(finish.exit_code));
  signals_.AddInt(IntOrNull(finish.signal));
  http_statuses_.AddInt(IntOrNull(finish.http_status));
  outputs_.Add(HexOf(OutputTail(finish.output_tail, max_output_bytes_)));
}

void RunFinishArrays::AddNull() {
  for (PgArray* array :
       {&outcomes_, &errors_, &exit_codes_, &signals_, &http_statuses_, &outputs_}) {
    array->AddNull();
  }
}

void RunFinishArrays::AddTo(PgParams& params) && {
  for (PgArray* array :
       {&outcomes_, &errors_, &exit_codes_, &signals_, &http_statuses_, &outputs_}) {
    params.Add(std::move(*array).Finish());
  }
}

}  // namespace stagehand::store_internal
