// What a running task function tells about its run beyond success or failure: the exit code or
// signal of a command, the HTTP status of a request, and the tail of what it printed. The engine
// gives each run one (RunControl::report), records it in the run history when the run ends, and
// shows the output of a run still going to whoever asks for it (`stagehand logs --follow`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "stagehand/base/mutex.h"

namespace stagehand {

// Thread-safe: the task function writes while the engine and the REST API read.
class RunReport {
 public:
  // Keeps the last `max_output_bytes` of the output.
  explicit RunReport(std::size_t max_output_bytes);

  // Appends bytes the run printed (stdout and stderr, interleaved as they came).
  void AppendOutput(std::string_view bytes);
  void SetExitCode(int code);
  void SetSignal(int signal);
  void SetHttpStatus(int status);

  struct Snapshot {
    std::optional<int> exit_code;
    std::optional<int> signal;
    std::optional<int> http_status;
    std::string output_tail;         // the last max_output_bytes bytes
    std::uint64_t output_bytes = 0;  // every byte appended, kept or not
  };
  Snapshot Read() const;

 private:
  const std::size_t max_output_bytes_;
  mutable Mutex mu_;
  Snapshot state_ STAGEHAND_GUARDED_BY(mu_);
};

}  // namespace stagehand
