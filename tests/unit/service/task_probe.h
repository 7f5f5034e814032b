// A stand-in task function for the service tests: records each call and the state of its stop
// token, and can hold a call until its stop token fires. Shared by the PluginScheduler and
// MockScheduler tests.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>

#include "stagehand/service/scheduler.h"

namespace stagehand::service_testing {

// How long a test waits for an event before it fails (real time).
inline constexpr std::chrono::seconds kRealTimeout{10};

// Stands in for a task function: records each call and the state of its stop token, and can hold
// a call until its stop token fires. Thread-safe; kept alive by the functions it hands out.
class TaskProbe : public std::enable_shared_from_this<TaskProbe> {
 public:
  // Returns a function that records the call and returns `result`.
  TaskFunction Returning(Status result = Status::Ok()) {
    auto self = shared_from_this();
    return [self, result](std::stop_token stop) {
      self->Enter(stop);
      self->Leave(stop);
      return result;
    };
  }

  // Returns a function that records the call and throws `message`.
  TaskFunction Throwing(std::string message) {
    auto self = shared_from_this();
    return [self, message](std::stop_token stop) {
      self->Enter(stop);
      self->Leave(stop);
      throw std::runtime_error(message);
    };
  }

  // Returns a function that records the call, blocks until its stop token fires or ReleaseAll()
  // was called, then returns the outcome set by SetOutcome (OK by default).
  TaskFunction Blocking() {
    auto self = shared_from_this();
    return [self](std::stop_token stop) {
      self->Enter(stop);
      Status outcome;
      {
        std::unique_lock lock(self->mu_);
        self->cv_.wait(lock, stop, [&] { return self->released_; });
        outcome = self->outcome_;
      }
      self->Leave(stop);
      return outcome;
    };
  }

  // Returns a function like Blocking() that first reports `output` through its RunControl (when
  // the run has a report).
  TaskFunction BlockingWithOutput(std::string output) {
    auto self = shared_from_this();
    return [self, output](const RunControl& control) {
      if (control.report != nullptr) control.report->AppendOutput(output);
      self->Enter(control.stop);
      Status outcome;
      {
        std::unique_lock lock(self->mu_);
        self->cv_.wait(lock, control.stop, [&] { return self->released_; });
        outcome = self->outcome_;
      }
      self->Leave(control.stop);
      return outcome;
    };
  }

  // Makes every blocked call, and every later call of Blocking(), return at once.
  void ReleaseAll() {
    {
      std::lock_guard lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }

  void SetOutcome(Status outcome) {
    std::lock_guard lock(mu_);
    outcome_ = std::move(outcome);
  }

  // Blocks until `n` calls have started (or returned), or kRealTimeout passes.
  bool WaitForStarts(std::size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kRealTimeout, [&] { return stopped_at_start_.size() >= n; });
  }
  bool WaitForReturns(std::size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kRealTimeout, [&] { return stopped_at_return_.size() >= n; });
  }

  std::size_t starts() const {
    std::lock_guard lock(mu_);
    return stopped_at_start_.size();
  }
  // Whether each call's stop token had fired when the call started / returned.
  std::vector<bool> stopped_at_start() const {
    std::lock_guard lock(mu_);
    return stopped_at_start_;
  }
  std::vector<bool> stopped_at_return() const {
    std::lock_guard lock(mu_);
    return stopped_at_return_;
  }

 private:
  void Enter(const std::stop_token& stop) {
    {
      std::lock_guard lock(mu_);
      stopped_at_start_.push_back(stop.stop_requested());
    }
    cv_.notify_all();
  }
  void Leave(const std::stop_token& stop) {
    {
      std::lock_guard lock(mu_);
      stopped_at_return_.push_back(stop.stop_requested());
    }
    cv_.notify_all();
  }

  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  bool released_ = false;
  Status outcome_;
  std::vector<bool> stopped_at_start_;
  std::vector<bool> stopped_at_return_;
};

}  // namespace stagehand::service_testing
