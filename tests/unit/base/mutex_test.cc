#include "stagehand/base/mutex.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <thread>
#include <vector>

#include "stagehand/base/recursive_mutex.h"

namespace stagehand {
namespace {

struct Counter {
  Mutex mu;
  std::condition_variable cv;
  int value STAGEHAND_GUARDED_BY(mu) = 0;
};

TEST(MutexTest, MutexLockExcludesOtherThreads) {
  Counter counter;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&counter] {
      for (int i = 0; i < 10000; ++i) {
        MutexLock lock(counter.mu);
        ++counter.value;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  MutexLock lock(counter.mu);
  EXPECT_EQ(counter.value, 40000);
}

TEST(MutexTest, UnlockLetsAnotherThreadInUntilLock) {
  Counter counter;
  MutexLock lock(counter.mu);
  EXPECT_TRUE(lock.unique_lock().owns_lock());
  lock.Unlock();
  EXPECT_FALSE(lock.unique_lock().owns_lock());
  std::thread([&counter] {
    MutexLock other(counter.mu);
    counter.value = 1;
  }).join();
  lock.Lock();
  EXPECT_TRUE(lock.unique_lock().owns_lock());
  EXPECT_EQ(counter.value, 1);
}

TEST(MutexTest, ConditionVariableWaitsOnTheUniqueLock) {
  Counter counter;
  std::thread setter([&counter] {
    {
      MutexLock lock(counter.mu);
      counter.value = 7;
    }
    counter.cv.notify_all();
  });
  MutexLock lock(counter.mu);
  counter.cv.wait(lock.unique_lock(),
                  [&counter]() STAGEHAND_REQUIRES(counter.mu) { return counter.value == 7; });
  EXPECT_TRUE(lock.unique_lock().owns_lock());
  EXPECT_EQ(counter.value, 7);
  lock.Unlock();
  setter.join();
}

TEST(MutexTest, DestructorReleasesALockThatWasUnlocked) {
  Counter counter;
  {
    MutexLock lock(counter.mu);
    lock.Unlock();
  }
  MutexLock again(counter.mu);
  EXPECT_TRUE(again.unique_lock().owns_lock());
}

struct RecursiveCounter {
  RecursiveMutex mu;
  int value STAGEHAND_GUARDED_BY(mu) = 0;
};

// Locks `counter.mu` again while the caller holds it, as a callback re-entering its owner does.
void IncrementAgain(RecursiveCounter& counter) {
  RecursiveMutexLock lock(counter.mu);
  ++counter.value;
}

TEST(RecursiveMutexTest, TheHolderMayLockAgain) {
  RecursiveCounter counter;
  RecursiveMutexLock lock(counter.mu);
  IncrementAgain(counter);
  EXPECT_EQ(counter.value, 1);
}

TEST(RecursiveMutexTest, RecursiveMutexLockExcludesOtherThreads) {
  RecursiveCounter counter;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&counter] {
      for (int i = 0; i < 10000; ++i) {
        RecursiveMutexLock lock(counter.mu);
        IncrementAgain(counter);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  RecursiveMutexLock lock(counter.mu);
  EXPECT_EQ(counter.value, 40000);
}

}  // namespace
}  // namespace stagehand
