// The executor behind the engine: bounded threads, reservations, and no job left waiting while a
// thread could run it.
#include "engine/executor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace stagehand::engine_internal {
namespace {

// Regression: a job submitted right after another, while the one idle thread had been notified
// but not yet taken the first job, waited in the queue with no thread to run it.
TEST(ExecutorTest, JobsSubmittedBackToBackRunAtOnce) {
  for (int round = 0; round < 50; ++round) {
    std::mutex mu;
    std::condition_variable cv;
    int running = 0;
    bool release = false;
    Executor executor(4, nullptr);
    const auto job = [&] {
      std::unique_lock lock(mu);
      ++running;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    };
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(executor.TryReserve());
      executor.Submit(job);
    }
    {
      std::unique_lock lock(mu);
      const bool all = cv.wait_for(lock, std::chrono::seconds(10), [&] { return running == 3; });
      release = true;
      cv.notify_all();
      ASSERT_TRUE(all) << "round " << round << ": only " << running << " of 3 jobs started";
    }
    executor.Stop();
  }
}

TEST(ExecutorTest, ReservationsAreBounded) {
  Executor executor(2, nullptr);
  EXPECT_TRUE(executor.TryReserve());
  EXPECT_TRUE(executor.TryReserve());
  EXPECT_FALSE(executor.TryReserve());
  executor.CancelReservation();
  EXPECT_EQ(executor.busy(), 1);
  EXPECT_TRUE(executor.TryReserve());
  executor.CancelReservation();
  executor.CancelReservation();
  executor.Stop();
  EXPECT_FALSE(executor.TryReserve());
}

}  // namespace
}  // namespace stagehand::engine_internal
