// The function type of a task: what the engine runs and what plugins pass to ScheduleTask.
#pragma once

#include <concepts>
#include <functional>
#include <stop_token>
#include <type_traits>
#include <utility>

#include "stagehand/base/status.h"

namespace stagehand {

// The work of a task. It receives a stop token that is signalled on timeout, cancel, shutdown or a
// lost lease, and should return soon after. A run fails when the function throws or returns a
// non-OK Status; a function returning void succeeds unless it throws.
class TaskFunction {
 public:
  TaskFunction() = default;
  template <typename F>
  requires std::invocable<F&, std::stop_token> TaskFunction(
      F fn)  // NOLINT(google-explicit-constructor)
      : fn_(Wrap(std::move(fn))) {}

  explicit operator bool() const { return static_cast<bool>(fn_); }
  Status operator()(std::stop_token stop) const { return fn_(std::move(stop)); }

 private:
  template <typename F>
  static std::function<Status(std::stop_token)> Wrap(F fn) {
    if constexpr (std::is_void_v<std::invoke_result_t<F&, std::stop_token>>) {
      return [fn = std::move(fn)](std::stop_token stop) mutable {
        fn(std::move(stop));
        return Status::Ok();
      };
    } else {
      return [fn = std::move(fn)](std::stop_token stop) mutable -> Status {
        return fn(std::move(stop));
      };
    }
  }

  std::function<Status(std::stop_token)> fn_;
};

}  // namespace stagehand
