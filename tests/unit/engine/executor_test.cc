// The executor behind the engine: bounded threads, reservations, and no job left waiting while a
// thread could run it.
#include "engine/executor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>

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

// Returns how many threads of this process are executor threads (by name).
int ExecutorThreads() {
  int count = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    count += name == Executor::kThreadName ? 1 : 0;
  }
  return count;
}

// Issue 15: every plugin held an executor thread while idle.
TEST(ExecutorTest, HoldsNoThreadUntilAJobAndEndsIdleThreads) {
  const int before = ExecutorThreads();
  Executor executor(4, nullptr, std::chrono::milliseconds(1));
  EXPECT_EQ(ExecutorThreads(), before);
  for (int round = 0; round < 2; ++round) {
    std::mutex mu;
    std::condition_variable cv;
    bool ran = false;
    ASSERT_TRUE(executor.TryReserve());
    executor.Submit([&] {
      std::lock_guard lock(mu);
      ran = true;
      cv.notify_all();
    });
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return ran; })) << round;
    lock.unlock();
    // The thread ends a millisecond after its job; a new job after that gets a new thread.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ExecutorThreads() > before && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    EXPECT_EQ(ExecutorThreads(), before) << round;
  }
  executor.Stop();
}

}  // namespace
}  // namespace stagehand::engine_internal
