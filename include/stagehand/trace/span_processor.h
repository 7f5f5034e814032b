// Where finished spans go: a bounded queue exported in batches on a thread of its own, so that a
// slow or unreachable collector never slows or blocks a run (spans that do not fit are dropped and
// counted).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string_view>
#include <thread>
#include <vector>

#include "stagehand/base/mutex.h"
#include "stagehand/base/status.h"
#include "stagehand/time/clock.h"
#include "stagehand/trace/span.h"

namespace stagehand {

// OpenTelemetry's batch span processor settings (OTEL_BSP_*), with its defaults.
struct BatchSpanOptions {
  std::size_t max_queue_size = 2048;
  std::size_t max_export_batch_size = 512;
  std::chrono::milliseconds schedule_delay{5000};
  // Told of the spans counted in SpanCounts as it counts them ("exported", "dropped", "failed"),
  // never under the processor's lock: from OnEnd's caller for drops, from the processor's thread
  // otherwise. May be empty.
  std::function<void(std::string_view result, std::uint64_t spans)> on_counted;
};

// Sends one batch; called on the processor's thread only, one batch at a time. An error counts
// the batch's spans as failed (they are not retried).
using SpanExportFunction = std::function<Status(const std::vector<SpanData>&)>;

// What a processor has done with the spans it was given. A value type.
struct SpanCounts {
  std::uint64_t exported = 0;
  std::uint64_t dropped = 0;  // the queue was full
  std::uint64_t failed = 0;   // the export returned an error
};

// Thread-safe. Exports when a batch is full, `schedule_delay` after the oldest queued span, on
// ForceFlush and on Shutdown. Waits on `clock`, which must outlive it.
class BatchSpanProcessor final : public SpanSink {
 public:
  BatchSpanProcessor(Clock& clock, SpanExportFunction export_batch, BatchSpanOptions options = {});
  ~BatchSpanProcessor() override;  // runs Shutdown
  BatchSpanProcessor(const BatchSpanProcessor&) = delete;
  BatchSpanProcessor& operator=(const BatchSpanProcessor&) = delete;

  // Queues the span, or drops it (counted) when the queue is full or the processor shut down.
  void OnEnd(SpanData span) override;
  // Exports every span queued before the call and waits until that is done or `timeout` passed
  // (on the clock). Returns whether it was done.
  bool ForceFlush(std::chrono::milliseconds timeout);
  // Exports what is queued, then stops the thread. Idempotent.
  void Shutdown();
  SpanCounts counts() const;

 private:
  void Loop(std::stop_token stop);

  Clock& clock_;
  SpanExportFunction export_batch_;
  BatchSpanOptions options_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  std::deque<SpanData> queue_ STAGEHAND_GUARDED_BY(mu_);
  MonoTime oldest_queued_at_ STAGEHAND_GUARDED_BY(mu_) = kMonoInfinity;
  std::uint64_t flush_requested_ STAGEHAND_GUARDED_BY(mu_) = 0;  // flushes asked for
  std::uint64_t flush_done_ STAGEHAND_GUARDED_BY(mu_) = 0;       // flushes completed
  bool shut_down_ STAGEHAND_GUARDED_BY(mu_) = false;
  SpanCounts counts_ STAGEHAND_GUARDED_BY(mu_);
  std::jthread thread_;
};

}  // namespace stagehand
