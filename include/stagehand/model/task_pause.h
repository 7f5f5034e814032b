// A pause of a global task (docs/adr/0013-pausing-a-task-in-backstages-row.md): what an operator
// asks for, and what a task's row says of it. Plain value types.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "stagehand/time/clock.h"

namespace stagehand {

// Who pauses a task and why (at most kMaxPauseTextBytes each), and until when (none: until it is
// resumed). A run in progress goes on, and the pause takes effect when it ends; with
// `cancel_run`, the scheduler also cancels that run (a store keeps the pause alone).
struct PauseRequest {
  std::string by;
  std::string reason;
  std::optional<WallTime> until;
  bool cancel_run = false;
};
inline constexpr std::size_t kMaxPauseTextBytes = 1024;

// A paused task's pause, as its row holds it: since when (the database's clock). A pause asked
// while a run was in progress is `pending` until that run ends; `since` is then the run's start.
struct TaskPause {
  std::string by;
  std::string reason;
  WallTime since{};
  std::optional<WallTime> until;
  bool pending = false;

  friend bool operator==(const TaskPause&, const TaskPause&) = default;
};

}  // namespace stagehand
