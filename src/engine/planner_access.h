// How the I/O components of an engine (Releaser, DispatchRounds, Registrar) take the engine's
// planner: under the engine's one lock, for one step at a time, never across a store call.
#pragma once

#include <functional>

#include "engine/planner.h"

namespace stagehand::engine_internal {

// Implemented by TaskEngine. Thread-safe.
class PlannerAccess {
 public:
  // Which lane of the engine a step wakes once it is done.
  enum class Wake { kNone, kTimer, kDispatcher, kBoth };

  virtual ~PlannerAccess() = default;
  // Runs `step` on the planner under the engine's lock, then wakes `wake`.
  virtual void WithPlanner(const std::function<void(Planner&)>& step, Wake wake) = 0;
};

}  // namespace stagehand::engine_internal
