// The function type of a task: what plugins pass to ScheduleTask, what executors build (command and
// HTTP tasks) and what the engine runs. Part of a task's definition, so it lives in the model,
// below every module that makes or runs one.
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <type_traits>
#include <utility>

#include "stagehand/base/status.h"
#include "stagehand/model/run_report.h"
#include "stagehand/trace/span.h"
#include "stagehand/trace/trace_context.h"

namespace stagehand {

// What a running task function is told by the engine. Both tokens only ever go from not requested
// to requested. Cheap to copy; thread-safe.
struct RunControl {
  // Finish soon: signalled on timeout, cancel, shutdown or a lease that could not be renewed. A
  // function that starts processes or requests may give them a grace period to end cleanly.
  std::stop_token stop;
  // End now, without grace: the run's claim is about to lapse (its lease could not be renewed),
  // shutdown has waited long enough, or a cancel came while the run was already stopping. An
  // executor that started processes must have ended every one of them when it returns. Always
  // requested after (or together with) `stop`.
  std::stop_token kill;
  // Where the function may tell how its run went (exit code, HTTP status, output); the run
  // history keeps it. Null when nobody listens (a function called outside the engine).
  std::shared_ptr<RunReport> report = nullptr;
  // The W3C trace context of the run's span when the scheduler traces runs (invalid otherwise):
  // a function starts its own child spans under it with whatever tracing library it uses.
  TraceContext trace{};
  // Where the function's own finished spans go, exported with the run's own span: set when the
  // run's span is sampled and the host exports spans (null otherwise). Valid while the function
  // runs. The HTTP tasks of `stagehand serve` put their client span here.
  SpanSink* spans = nullptr;
  // The run's id, as the run history, the REST API and the events name it (a global task's run
  // holds its task's row with it); empty for a function called outside the engine.
  std::string run_id{};
};

// The work of a task. It receives a stop token that is signalled on timeout, cancel, shutdown or a
// lost lease, and should return soon after; or, in its RunControl form, also the kill token. A run
// fails when the function throws or returns a non-OK Status; a function returning void succeeds
// unless it throws. A function that ignores its tokens keeps its run's claim (renewed by the
// engine) until it returns, and is reported as overdue.
class TaskFunction {
 public:
  TaskFunction() = default;
  template <typename F>
  requires(std::invocable<F&, std::stop_token> || std::invocable<F&, const RunControl&>)
      TaskFunction(F fn)  // NOLINT
      : fn_(Wrap(std::move(fn))) {}

  explicit operator bool() const { return static_cast<bool>(fn_); }
  Status operator()(const RunControl& control) const { return fn_(control); }
  // Runs with `stop` as the stop token and a kill token that is never requested.
  Status operator()(std::stop_token stop) const {
    return fn_(RunControl{std::move(stop), {}, nullptr});
  }

 private:
  template <typename F>
  static std::function<Status(const RunControl&)> Wrap(F fn) {
    if constexpr (std::invocable<F&, const RunControl&>) {
      using R = std::invoke_result_t<F&, const RunControl&>;
      return [fn = std::move(fn)](const RunControl& control) mutable -> Status {
        if constexpr (std::is_void_v<R>) {
          fn(control);
          return Status::Ok();
        } else {
          return fn(control);
        }
      };
    } else {
      using R = std::invoke_result_t<F&, std::stop_token>;
      return [fn = std::move(fn)](const RunControl& control) mutable -> Status {
        if constexpr (std::is_void_v<R>) {
          fn(control.stop);
          return Status::Ok();
        } else {
          return fn(control.stop);
        }
      };
    }
  }

  std::function<Status(const RunControl&)> fn_;
};

}  // namespace stagehand
