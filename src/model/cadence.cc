#include "stagehand/model/cadence.h"

#include <utility>

namespace stagehand {

struct Cadence::Parsed {
  Kind kind = Kind::kManual;
  std::string text;
  std::shared_ptr<const CronExpression> cron;  // kCron; null for the empty text zod lets through
  double period_ms = 0;                        // kDuration
  std::chrono::milliseconds period{0};         // kDuration
};

const std::shared_ptr<const Cadence::Parsed>& Cadence::ManualParsed() {
  static const auto* const manual = new std::shared_ptr<const Parsed>(
      std::make_shared<const Parsed>(Parsed{Kind::kManual, "manual", nullptr, 0, {}}));
  return *manual;
}

Cadence::Cadence() : Cadence(ManualParsed()) {}

Cadence::Cadence(std::shared_ptr<const Parsed> parsed) : parsed_(std::move(parsed)) {}

Cadence::Kind Cadence::Classify(std::string_view text) {
  if (text == "manual") return Kind::kManual;
  if (!text.empty() && text.front() == 'P') return Kind::kDuration;
  return Kind::kCron;
}

Result<Cadence> Cadence::Parse(std::string_view text) {
  const Kind kind = Classify(text);
  if (kind == Kind::kManual) return Manual();
  if (kind == Kind::kDuration) {
    Result<HumanDuration> period = ParseIsoDuration(text);
    if (!period.ok()) {
      return InvalidArgumentError("Invalid duration '" + std::string(text) +
                                  "': " + period.status().message());
    }
    return Cadence(std::make_shared<const Parsed>(Parsed{Kind::kDuration, std::string(text),
                                                         nullptr, ToMillisecondsCasual(*period),
                                                         ToChronoMilliseconds(*period)}));
  }
  if (text.empty()) {
    return Cadence(std::make_shared<const Parsed>(Parsed{Kind::kCron, "", nullptr, 0, {}}));
  }
  Result<CronExpression> program = CronExpression::Parse(text);
  if (!program.ok()) {
    return InvalidArgumentError("Invalid cron expression '" + std::string(text) +
                                "': " + program.status().message());
  }
  return Cron(*std::move(program));
}

Cadence Cadence::Cron(std::shared_ptr<const CronExpression> program) {
  std::string text = program->source();
  return Cadence(std::make_shared<const Parsed>(
      Parsed{Kind::kCron, std::move(text), std::move(program), 0, {}}));
}

Cadence Cadence::Cron(CronExpression program) {
  return Cron(std::make_shared<const CronExpression>(std::move(program)));
}

Cadence Cadence::Every(const HumanDuration& period) {
  // The period as a reader of the stored text gets it (the text rounds seconds and milliseconds
  // into one value), so that every host computes the same starts.
  std::string text = FormatIsoDuration(period);
  const Result<HumanDuration> stored = ParseIsoDuration(text);
  const HumanDuration& length = stored.ok() ? *stored : period;
  return Cadence(std::make_shared<const Parsed>(Parsed{Kind::kDuration, std::move(text), nullptr,
                                                       ToMillisecondsCasual(length),
                                                       ToChronoMilliseconds(length)}));
}

Cadence Cadence::Every(std::chrono::milliseconds period) {
  return Cadence(
      std::make_shared<const Parsed>(Parsed{Kind::kDuration, FormatIsoDuration(period), nullptr,
                                            static_cast<double>(period.count()), period}));
}

Cadence::Kind Cadence::kind() const { return parsed_->kind; }

const std::string& Cadence::text() const { return parsed_->text; }

const CronExpression* Cadence::cron() const { return parsed_->cron.get(); }

double Cadence::period_ms() const { return parsed_->period_ms; }

std::chrono::milliseconds Cadence::period() const { return parsed_->period; }

Result<std::optional<WallTime>> Cadence::NextAfter(WallTime after, const TimeZone& zone) const {
  switch (parsed_->kind) {
    case Kind::kManual:
      return std::optional<WallTime>();
    case Kind::kDuration:
      return std::optional<WallTime>(after + parsed_->period);
    case Kind::kCron:
      break;
  }
  if (parsed_->cron == nullptr) {
    return InvalidArgumentError("Invalid cron expression '': Too few fields");
  }
  STAGEHAND_ASSIGN_OR_RETURN(WallTime next, parsed_->cron->NextAfter(after, zone));
  return std::optional<WallTime>(next);
}

}  // namespace stagehand
