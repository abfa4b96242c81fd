// WorkerPool: every task runs once; one at a time, they all run on the worker that went idle
// last; at once, on distinct workers; Join runs what was queued.
#include "serve/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <set>
#include <thread>

namespace ctrbox {
namespace {

// Waits until every one of the pool's `workers` is idle (a worker goes back to the idle list
// after its task returns; on a busy machine that can take more than any fixed sleep).
void WaitAllIdle(const WorkerPool& pool, size_t workers) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (pool.idle() < workers && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ASSERT_EQ(pool.idle(), workers);
}

TEST(WorkerPoolTest, SequentialTasksStayOnTheWarmestWorker) {
  WorkerPool pool(4);
  std::set<std::thread::id> ran_on;
  for (int i = 0; i < 50; ++i) {
    ASSERT_NO_FATAL_FAILURE(WaitAllIdle(pool, 4));
    std::promise<std::thread::id> done;
    pool.Post([&] { done.set_value(std::this_thread::get_id()); });
    ran_on.insert(done.get_future().get());
  }
  EXPECT_EQ(ran_on.size(), 1u);
}

TEST(WorkerPoolTest, ConcurrentTasksRunOnDistinctWorkersAndJoinRunsTheQueue) {
  WorkerPool pool(3);
  std::atomic<int> running{0}, most{0}, ran{0};
  std::atomic<bool> release{false};
  for (int i = 0; i < 3; ++i) {
    pool.Post([&] {
      most = std::max(most.load(), ++running);
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      --running;
      ++ran;
    });
  }
  for (int i = 0; i < 3 && most < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(most.load(), 3);  // three at once: no task waits while a worker is idle
  for (int i = 0; i < 100; ++i) pool.Post([&] { ++ran; });  // queued behind the three
  release = true;
  pool.Join();
  EXPECT_EQ(ran.load(), 103);
}

}  // namespace
}  // namespace ctrbox
