#include "stagehand/time/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "stagehand/time/manual_clock.h"

namespace stagehand {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::ManualClock;

TEST(ManualClockTest, WallAndMonotonicAdvanceTogether) {
  ManualClock clock;
  const WallTime wall0 = clock.Now();
  const MonoTime mono0 = clock.MonoNow();
  clock.Advance(seconds(90));
  EXPECT_EQ(clock.Now() - wall0, seconds(90));
  EXPECT_EQ(clock.MonoNow() - mono0, seconds(90));
}

TEST(ManualClockTest, SetWallTimeLeavesMonotonicAlone) {
  ManualClock clock;
  const MonoTime mono0 = clock.MonoNow();
  clock.SetWallTime(ManualClock::DefaultStart() + std::chrono::hours(5));
  EXPECT_EQ(clock.Now(), ManualClock::DefaultStart() + std::chrono::hours(5));
  EXPECT_EQ(clock.MonoNow(), mono0);
}

TEST(ManualClockTest, SleeperWakesExactlyAtItsDeadline) {
  ManualClock clock;
  const MonoTime deadline = clock.MonoNow() + seconds(5);
  std::atomic<bool> finished{false};
  bool reached = false;
  std::jthread sleeper([&](std::stop_token stop) {
    reached = clock.SleepUntil(deadline, stop);
    finished = true;
  });
  ASSERT_TRUE(clock.BlockUntilWaiters(1));
  EXPECT_EQ(clock.NextDeadline(), deadline);

  clock.Advance(milliseconds(4999));
  EXPECT_FALSE(finished);
  EXPECT_EQ(clock.NumWaiters(), 1U);

  clock.Advance(milliseconds(1));
  sleeper.join();
  EXPECT_TRUE(finished);
  EXPECT_TRUE(reached);
  EXPECT_EQ(clock.NumWaiters(), 0U);
}

TEST(ManualClockTest, IsWaitingNamesTheThreadsBlockedOnTheClock) {
  ManualClock clock;
  std::jthread sleeper([&](std::stop_token stop) { clock.SleepFor(seconds(5), stop); });
  EXPECT_FALSE(clock.IsWaiting(std::this_thread::get_id()));
  ASSERT_TRUE(clock.BlockUntilWaiters(1));
  EXPECT_TRUE(clock.IsWaiting(sleeper.get_id()));
  EXPECT_FALSE(clock.IsWaiting(std::this_thread::get_id()));
  const std::thread::id id = sleeper.get_id();
  clock.Advance(seconds(5));
  sleeper.join();
  EXPECT_FALSE(clock.IsWaiting(id));
}

TEST(ManualClockTest, StopTokenEndsASleepEarly) {
  ManualClock clock;
  bool reached = true;
  std::jthread sleeper(
      [&](std::stop_token stop) { reached = clock.SleepFor(std::chrono::hours(1), stop); });
  ASSERT_TRUE(clock.BlockUntilWaiters(1));
  sleeper.request_stop();
  sleeper.join();
  EXPECT_FALSE(reached);
  EXPECT_EQ(clock.NumWaiters(), 0U);
}

TEST(ManualClockTest, PredicateChangeWakesWaiterWithoutTimeMoving) {
  ManualClock clock;
  std::mutex mu;
  std::condition_variable_any cv;
  bool ready = false;
  bool result = false;
  std::jthread waiter([&](std::stop_token stop) {
    std::unique_lock lock(mu);
    result = clock.WaitUntil(lock, cv, kMonoInfinity, stop, [&] { return ready; });
  });
  ASSERT_TRUE(clock.BlockUntilWaiters(1));
  EXPECT_EQ(clock.NextDeadline(), std::nullopt);
  {
    std::lock_guard lock(mu);
    ready = true;
  }
  cv.notify_all();
  waiter.join();
  EXPECT_TRUE(result);
}

TEST(ManualClockTest, AdvanceToNextDeadlineWakesTheEarliestSleeperOnly) {
  ManualClock clock;
  const MonoTime start = clock.MonoNow();
  std::atomic<int> woken{0};
  std::jthread early([&](std::stop_token stop) {
    if (clock.SleepUntil(start + seconds(2), stop)) ++woken;
  });
  std::jthread late([&](std::stop_token stop) {
    if (clock.SleepUntil(start + seconds(7), stop)) ++woken;
  });
  ASSERT_TRUE(clock.BlockUntilWaiters(2));

  ASSERT_TRUE(clock.AdvanceToNextDeadline());
  early.join();
  EXPECT_EQ(clock.MonoNow(), start + seconds(2));
  EXPECT_EQ(woken, 1);
  EXPECT_EQ(clock.NumWaiters(), 1U);

  ASSERT_TRUE(clock.AdvanceToNextDeadline());
  late.join();
  EXPECT_EQ(clock.MonoNow(), start + seconds(7));
  EXPECT_EQ(woken, 2);
  EXPECT_FALSE(clock.AdvanceToNextDeadline());
}

TEST(ManualClockTest, ManyAdvancesRacingWithSleepersLoseNoWakeup) {
  ManualClock clock;
  constexpr int kRounds = 200;
  std::atomic<int> completed{0};
  std::jthread sleeper([&](std::stop_token stop) {
    for (int i = 0; i < kRounds && !stop.stop_requested(); ++i) {
      if (clock.SleepFor(milliseconds(1), stop)) ++completed;
    }
  });
  while (completed < kRounds) {
    if (clock.BlockUntilWaiters(1, milliseconds(10))) clock.Advance(milliseconds(1));
  }
  sleeper.join();
  EXPECT_EQ(completed, kRounds);
}

TEST(SystemClockTest, SleepReturnsFalseWhenAlreadyStopped) {
  std::stop_source source;
  source.request_stop();
  EXPECT_FALSE(SystemClock::Instance().SleepFor(std::chrono::hours(1), source.get_token()));
}

TEST(SystemClockTest, ShortSleepReachesItsDeadline) {
  SystemClock& clock = SystemClock::Instance();
  const MonoTime before = clock.MonoNow();
  EXPECT_TRUE(clock.SleepFor(milliseconds(2), {}));
  EXPECT_GE(clock.MonoNow() - before, milliseconds(2));
}

}  // namespace
}  // namespace stagehand
