// The array parameters of the PostgreSQL task store's batched statements (upsert_many,
// poll_changed, claim_many, release_many, the run history's), which bind one array literal per
// column and unnest them on the server, and the hex text that carries a run's output bytes.
// PostgresTaskStore builds them on the thread that calls the store, before it borrows a session.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "stagehand/model/task_run.h"
#include "store/next_run.h"
#include "store/postgres/pg_connection.h"

namespace stagehand::store_internal {

// Returns the name the statements' plan expressions read for `kind` (pg_sql::kPlanNull, ...).
std::string_view PlanKindName(NextRunPlan::Kind kind);

// Builds the text of one PostgreSQL array literal ("{a,b,NULL}"), element by element.
// Thread-compatible.
class PgArray {
 public:
  // Appends `value` double-quoted, with '"' and '\' escaped.
  PgArray& Add(std::string_view value);
  // Appends `value` quoted, or NULL when it is empty.
  PgArray& AddOrNull(const std::optional<std::string>& value);
  // Appends `value` unquoted: a number or a word that needs no quoting (a plan kind).
  PgArray& AddUnquoted(std::string_view value);
  // Appends the integer `value`, or NULL when it is empty.
  PgArray& AddInt(std::optional<std::int64_t> value);
  PgArray& AddNull() { return AddUnquoted("NULL"); }

  // Returns the literal. The builder is spent.
  std::string Finish() &&;

 private:
  void Separate();

  std::string text_ = "{";
};

// Returns `values` as a PostgreSQL text[] literal.
std::string TextArray(std::span<const std::string> values);

// Returns `bytes` as lower-case hex digits, the text the statements turn into a bytea with
// decode(..., 'hex').
std::string HexOf(std::string_view bytes);

// Returns the bytes of hex digits (as encode(..., 'hex') writes them), or nullopt if `hex` is not
// an even number of hex digits.
std::optional<std::string> BytesOfHex(std::string_view hex);

// The three arrays that bind one plan per task (kinds text[], seconds float8[], instants
// timestamptz[]), as the statements' plan columns read them. Thread-compatible.
class PlanArrays {
 public:
  void Add(const NextRunPlan& plan);
  // Binds the kinds, the seconds and the instants to `params`, in that order. The builder is spent.
  void AddTo(PgParams& params) &&;

 private:
  PgArray kinds_;
  PgArray seconds_;
  PgArray instants_;
};

// The arrays that bind one run origin per run (hosts text[], pids int8[], triggers text[], slots
// timestamptz[], with `with_starts` starts timestamptz[], attempts int4[], trace ids text[]), as
// the run history's statements read them; times are kept to the millisecond. Thread-compatible.
class RunOriginArrays {
 public:
  explicit RunOriginArrays(bool with_starts) : with_starts_(with_starts) {}
  // `started`: the run's start (NULL: the database's now()); ignored without starts.
  void Add(const RunOrigin& origin, std::optional<WallTime> started);
  void AddNull();
  // Binds the hosts, pids, triggers, slots, starts (if kept), attempts and trace ids to
  // `params`, in that order. The builder is spent.
  void AddTo(PgParams& params) &&;

 private:
  bool with_starts_;
  PgArray hosts_;
  PgArray pids_;
  PgArray triggers_;
  PgArray slots_;
  PgArray starts_;
  PgArray attempts_;
  PgArray trace_ids_;
};

// The arrays that bind one run finish per run (outcomes text[], error JSONs text[], exit codes,
// signals and HTTP statuses int4[], outputs as hex text[], each cut to its last
// `max_output_bytes`), as the run history's statements read them. Thread-compatible.
class RunFinishArrays {
 public:
  explicit RunFinishArrays(std::size_t max_output_bytes) : max_output_bytes_(max_output_bytes) {}
  void Add(const RunFinish& finish);
  void AddNull();
  // Binds the outcomes, errors, exit codes, signals, HTTP statuses and outputs to `params`, in
  // that order. The builder is spent.
  void AddTo(PgParams& params) &&;

 private:
  std::size_t max_output_bytes_;
  PgArray outcomes_;
  PgArray errors_;
  PgArray exit_codes_;
  PgArray signals_;
  PgArray http_statuses_;
  PgArray outputs_;
};

}  // namespace stagehand::store_internal
