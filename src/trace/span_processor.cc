#include "stagehand/trace/span_processor.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace stagehand {

BatchSpanProcessor::BatchSpanProcessor(Clock& clock, SpanExportFunction export_batch,
                                       BatchSpanOptions options)
    : clock_(clock), export_batch_(std::move(export_batch)), options_(options) {
  options_.max_queue_size = std::max<std::size_t>(options_.max_queue_size, 1);
  options_.max_export_batch_size =
      std::clamp<std::size_t>(options_.max_export_batch_size, 1, options_.max_queue_size);
  thread_ = std::jthread([this](std::stop_token stop) { Loop(std::move(stop)); });
}

BatchSpanProcessor::~BatchSpanProcessor() { Shutdown(); }

void BatchSpanProcessor::OnEnd(SpanData span) {
  MutexLock lock(mu_);
  if (shut_down_ || queue_.size() >= options_.max_queue_size) {
    ++counts_.dropped;
    lock.Unlock();
    if (options_.on_counted) options_.on_counted("dropped", 1);
    return;
  }
  const bool first = queue_.empty();
  if (first) oldest_queued_at_ = clock_.MonoNow();
  queue_.push_back(std::move(span));
  // The first span sets the export's deadline; a full batch is due now.
  if (first || queue_.size() >= options_.max_export_batch_size) cv_.notify_all();
}

bool BatchSpanProcessor::ForceFlush(std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  if (shut_down_) return queue_.empty();
  const std::uint64_t ticket = ++flush_requested_;
  cv_.notify_all();
  return clock_.WaitUntil(lock.unique_lock(), cv_, clock_.MonoNow() + timeout, {},
                          [&]() STAGEHAND_REQUIRES(mu_) { return flush_done_ >= ticket; });
}

void BatchSpanProcessor::Shutdown() {
  {
    MutexLock lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    ++flush_requested_;
    cv_.notify_all();
  }
  thread_.request_stop();
  if (thread_.joinable()) thread_.join();
}

SpanCounts BatchSpanProcessor::counts() const {
  MutexLock lock(mu_);
  return counts_;
}

void BatchSpanProcessor::Loop(std::stop_token stop) {
  MutexLock lock(mu_);
  while (true) {
    const MonoTime deadline =
        queue_.empty() ? kMonoInfinity : oldest_queued_at_ + options_.schedule_delay;
    const auto ready = [&]() STAGEHAND_REQUIRES(mu_) {
      return queue_.size() >= options_.max_export_batch_size || flush_done_ < flush_requested_ ||
             (deadline == kMonoInfinity && !queue_.empty());
    };
    clock_.WaitUntil(lock.unique_lock(), cv_, deadline, shut_down_ ? std::stop_token() : stop,
                     ready);
    // Everything queued up to the flush being served goes out, a batch at a time.
    const std::uint64_t serving = flush_requested_;
    const bool flushing = flush_done_ < serving;
    const bool due =
        !queue_.empty() && clock_.MonoNow() >= oldest_queued_at_ + options_.schedule_delay;
    while (!queue_.empty() &&
           (flushing || due || queue_.size() >= options_.max_export_batch_size)) {
      const std::size_t n = std::min(queue_.size(), options_.max_export_batch_size);
      std::vector<SpanData> batch(std::make_move_iterator(queue_.begin()),
                                  std::make_move_iterator(queue_.begin() + static_cast<long>(n)));
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<long>(n));
      oldest_queued_at_ = queue_.empty() ? kMonoInfinity : clock_.MonoNow();
      lock.Unlock();
      const Status exported = export_batch_(batch);
      if (options_.on_counted) options_.on_counted(exported.ok() ? "exported" : "failed", n);
      lock.Lock();
      (exported.ok() ? counts_.exported : counts_.failed) += n;
      if (!flushing && queue_.size() < options_.max_export_batch_size) break;
    }
    if (flushing) {
      flush_done_ = serving;
      cv_.notify_all();
    }
    if (shut_down_ && queue_.empty() && flush_done_ >= flush_requested_) return;
  }
}

}  // namespace stagehand
