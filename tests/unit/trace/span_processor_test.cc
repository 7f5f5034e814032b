#include "stagehand/trace/span_processor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "stagehand/time/manual_clock.h"

namespace stagehand {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

BatchSpanOptions Options(std::size_t queue, std::size_t batch) {
  BatchSpanOptions options;
  options.max_queue_size = queue;
  options.max_export_batch_size = batch;
  options.schedule_delay = milliseconds(5000);
  return options;
}

SpanData Named(std::string name) {
  SpanData span;
  span.name = std::move(name);
  return span;
}

// Records each exported batch's span names. Can be told to fail, or to block until released.
class RecordingExport {
 public:
  SpanExportFunction Function() {
    return [this](const std::vector<SpanData>& batch) {
      std::unique_lock lock(mu_);
      std::vector<std::string> names;
      for (const SpanData& span : batch) names.push_back(span.name);
      batches_.push_back(std::move(names));
      ++calls_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !blocked_; });
      return fail_ ? UnavailableError("collector down") : Status::Ok();
    };
  }
  std::vector<std::vector<std::string>> batches() {
    std::lock_guard lock(mu_);
    return batches_;
  }
  void Block() {
    std::lock_guard lock(mu_);
    blocked_ = true;
  }
  void Release() {
    std::lock_guard lock(mu_);
    blocked_ = false;
    cv_.notify_all();
  }
  void WaitForCalls(int n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return calls_ >= n; });
  }
  void Fail() {
    std::lock_guard lock(mu_);
    fail_ = true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<std::string>> batches_;
  int calls_ = 0;
  bool blocked_ = false;
  bool fail_ = false;
};

TEST(BatchSpanProcessorTest, ExportsAFullBatchAtOnce) {
  testing::ManualClock clock;
  RecordingExport exported;
  BatchSpanProcessor processor(clock, exported.Function(), Options(100, 2));
  processor.OnEnd(Named("a"));
  processor.OnEnd(Named("b"));
  exported.WaitForCalls(1);
  EXPECT_EQ(exported.batches(), (std::vector<std::vector<std::string>>{{"a", "b"}}));
}

TEST(BatchSpanProcessorTest, ExportsAPartialBatchAfterTheScheduleDelay) {
  testing::ManualClock clock;
  RecordingExport exported;
  BatchSpanProcessor processor(clock, exported.Function(), Options(100, 10));
  processor.OnEnd(Named("a"));
  clock.BlockUntilWaiters(1);
  clock.Advance(milliseconds(4999));
  EXPECT_TRUE(exported.batches().empty());
  clock.Advance(milliseconds(1));
  exported.WaitForCalls(1);
  EXPECT_EQ(exported.batches(), (std::vector<std::vector<std::string>>{{"a"}}));
}

TEST(BatchSpanProcessorTest, ForceFlushExportsEverythingQueuedInBatches) {
  testing::ManualClock clock;
  RecordingExport exported;
  BatchSpanProcessor processor(clock, exported.Function(), Options(100, 2));
  exported.Block();
  processor.OnEnd(Named("a"));
  processor.OnEnd(Named("b"));
  exported.WaitForCalls(1);
  processor.OnEnd(Named("c"));
  processor.OnEnd(Named("d"));
  processor.OnEnd(Named("e"));
  exported.Release();
  EXPECT_TRUE(processor.ForceFlush(seconds(30)));
  EXPECT_EQ(exported.batches(),
            (std::vector<std::vector<std::string>>{{"a", "b"}, {"c", "d"}, {"e"}}));
  EXPECT_EQ(processor.counts().exported, 5u);
}

TEST(BatchSpanProcessorTest, AStuckCollectorNeverBlocksTheRunsItDropsAndCounts) {
  testing::ManualClock clock;
  RecordingExport exported;
  BatchSpanProcessor processor(clock, exported.Function(), Options(3, 1));
  exported.Block();
  processor.OnEnd(Named("in export"));
  exported.WaitForCalls(1);
  for (int i = 0; i < 10; ++i) processor.OnEnd(Named("queued or dropped"));
  EXPECT_EQ(processor.counts().dropped, 7u);
  exported.Release();
  processor.Shutdown();
  EXPECT_EQ(processor.counts().exported, 4u);
  processor.OnEnd(Named("after shutdown"));
  EXPECT_EQ(processor.counts().dropped, 8u);
}

TEST(BatchSpanProcessorTest, TellsEachCountAsItChanges) {
  testing::ManualClock clock;
  RecordingExport exported;
  std::mutex mu;
  std::map<std::string, std::uint64_t> told;
  BatchSpanOptions options = Options(1, 1);
  options.on_counted = [&](std::string_view result, std::uint64_t spans) {
    std::lock_guard lock(mu);
    told[std::string(result)] += spans;
  };
  BatchSpanProcessor processor(clock, exported.Function(), options);
  exported.Block();
  processor.OnEnd(Named("a"));
  exported.WaitForCalls(1);
  processor.OnEnd(Named("b"));
  processor.OnEnd(Named("c"));
  exported.Release();
  processor.Shutdown();
  std::lock_guard lock(mu);
  EXPECT_EQ(told, (std::map<std::string, std::uint64_t>{{"dropped", 1}, {"exported", 2}}));
}

TEST(BatchSpanProcessorTest, AFailedExportIsCountedNotRetried) {
  testing::ManualClock clock;
  RecordingExport exported;
  exported.Fail();
  BatchSpanProcessor processor(clock, exported.Function(), Options(100, 1));
  processor.OnEnd(Named("a"));
  EXPECT_TRUE(processor.ForceFlush(seconds(30)));
  EXPECT_EQ(processor.counts().failed, 1u);
  EXPECT_EQ(processor.counts().exported, 0u);
  EXPECT_EQ(exported.batches().size(), 1u);
}

TEST(BatchSpanProcessorTest, ShutdownExportsWhatIsQueued) {
  testing::ManualClock clock;
  RecordingExport exported;
  {
    BatchSpanProcessor processor(clock, exported.Function(), Options(100, 10));
    processor.OnEnd(Named("a"));
  }
  EXPECT_EQ(exported.batches(), (std::vector<std::vector<std::string>>{{"a"}}));
}

}  // namespace
}  // namespace stagehand
