// Cadence: how often a task runs, parsed and classified once. Built from code or config (a cron
// program, a period, manual) or decoded from the text a row stores, and then passed by value: the
// parsed form is shared by every copy, so nothing after the boundary parses the text again.
// Immutable; thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "stagehand/base/status.h"
#include "stagehand/time/clock.h"
#include "stagehand/time/cron.h"
#include "stagehand/time/duration.h"
#include "stagehand/time/time_zone.h"

namespace stagehand {

class Cadence {
 public:
  enum class Kind {
    kCron,      // fires at the times of a cron program
    kDuration,  // a fixed period between starts
    kManual,    // runs only when triggered
  };

  // Manual.
  Cadence();

  // Returns the kind of a stored cadence text by Backstage's rule, the only place that classifies
  // one: exactly "manual" is manual, a text starting with 'P' an ISO-8601 duration, anything else
  // (the empty text too) a cron expression.
  static Kind Classify(std::string_view text);

  // Reads a stored cadence: classifies it (Classify) and parses it as that kind. Errors:
  // kInvalidArgument "Invalid cron expression '<text>': <why>" or "Invalid duration '<text>':
  // <why>".
  static Result<Cadence> Parse(std::string_view text);

  static Cadence Manual() { return Cadence(); }
  // Fires at the times of `program`; its source() is the stored text.
  static Cadence Cron(std::shared_ptr<const CronExpression> program);
  static Cadence Cron(CronExpression program);
  // Every `period`, stored as its ISO-8601 text (FormatIsoDuration).
  static Cadence Every(const HumanDuration& period);
  static Cadence Every(std::chrono::milliseconds period);

  Kind kind() const;
  bool is_cron() const { return kind() == Kind::kCron; }
  bool is_duration() const { return kind() == Kind::kDuration; }
  bool is_manual() const { return kind() == Kind::kManual; }

  // The text stored in settings_json's cadence: the cron expression verbatim, the ISO duration,
  // or "manual".
  const std::string& text() const;

  // The cron program; nullptr unless is_cron().
  const CronExpression* cron() const;

  // The period of a duration cadence, by Backstage's casual conversion (a month is 30 days):
  // in milliseconds as a fraction, and rounded to whole milliseconds. Zero for other kinds.
  double period_ms() const;
  std::chrono::milliseconds period() const;

  // Returns the first start after `after`: the cron program's next fire in `zone`, `after` plus
  // the period, or nullopt for a manual cadence. Errors: kInvalidArgument from the cron program
  // when it fires no more.
  Result<std::optional<WallTime>> NextAfter(WallTime after, const TimeZone& zone) const;

  // Equal when the stored texts are.
  friend bool operator==(const Cadence& a, const Cadence& b) { return a.text() == b.text(); }

 private:
  struct Parsed;
  explicit Cadence(std::shared_ptr<const Parsed> parsed);
  static const std::shared_ptr<const Parsed>& ManualParsed();

  std::shared_ptr<const Parsed> parsed_;
};

}  // namespace stagehand
