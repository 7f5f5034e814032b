#include "stagehand/base/logger.h"

namespace stagehand {

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

namespace {

class ChildLoggerImpl final : public Logger {
 public:
  ChildLoggerImpl(std::shared_ptr<Logger> parent, LogFields fields)
      : parent_(std::move(parent)), fields_(std::move(fields)) {}

  void Log(LogLevel level, std::string_view message, const LogFields& fields) override {
    if (!parent_->Enabled(level)) return;
    LogFields all = fields_;
    all.insert(all.end(), fields.begin(), fields.end());
    parent_->Log(level, message, all);
  }
  bool Enabled(LogLevel level) const override { return parent_->Enabled(level); }

 private:
  std::shared_ptr<Logger> parent_;
  LogFields fields_;
};

class NullLoggerImpl final : public Logger {
 public:
  void Log(LogLevel, std::string_view, const LogFields&) override {}
  bool Enabled(LogLevel) const override { return false; }
};

}  // namespace

std::shared_ptr<Logger> ChildLogger(std::shared_ptr<Logger> parent, LogFields fields) {
  return std::make_shared<ChildLoggerImpl>(std::move(parent), std::move(fields));
}

std::shared_ptr<Logger> NullLogger() {
  static const std::shared_ptr<Logger> instance = std::make_shared<NullLoggerImpl>();
  return instance;
}

}  // namespace stagehand
