#include "util/thread_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "util/sys.h"

namespace ctrbox {
namespace {

TEST(ThreadPoolTest, RunsEveryTaskOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (size_t n : {0u, 1u, 7u, 1000u}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](size_t task, int thread) {
        EXPECT_GE(thread, 0);
        EXPECT_LT(thread, threads);
        hits[task].fetch_add(1);
      });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << i;
    }
  }
}

// A named pool's workers carry its name (what `top -H` and `perf report --sort comm` show);
// the caller keeps its own.
TEST(ThreadPoolTest, ANamedPoolsWorkersCarryItsName) {
  char caller[16] = {};
  pthread_getname_np(pthread_self(), caller, sizeof(caller));
  ThreadPool pool(3, "ctrbox-test-pool-long");
  std::vector<std::string> names(3);
  std::atomic<int> started{0};
  // Three tasks that wait for each other: each thread runs one.
  pool.ParallelFor(3, [&](size_t, int thread) {
    started.fetch_add(1);
    while (started.load() < 3) std::this_thread::yield();
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof(name));
    names[thread] = name;
  });
  EXPECT_EQ(names[0], caller);
  EXPECT_EQ(names[1], "ctrbox-test-poo");  // (15 characters are kept)
  EXPECT_EQ(names[2], "ctrbox-test-poo");
}

// A pool made for background work runs its workers at the job's background threads' nice
// value (util/sys.h); the caller, and an ordinary pool's workers, keep the caller's.
TEST(ThreadPoolTest, ABackgroundPoolsWorkersTakeTheBackgroundNiceValue) {
  std::thread([] {  // a thread of the test's own, whose nice value it may lower
    const int own = ThreadNice();
    if (own + 3 > 19) GTEST_SKIP() << "this test already runs at nice " << own;
    SetBackgroundNice(3);
    auto nices = [](ThreadPool& pool) {  // each thread's, one task each
      const int n = pool.num_threads();
      std::vector<int> nice(n);
      std::atomic<int> started{0};
      pool.ParallelFor(n, [&](size_t, int thread) {
        started.fetch_add(1);
        while (started.load() < n) std::this_thread::yield();
        nice[thread] = ThreadNice();
      });
      return nice;
    };
    ThreadPool background(3, "ctrbox-test-bg", ThreadPool::Wait::kSleep,
                          ThreadPool::Priority::kBackground);
    ThreadPool inherited(3, "ctrbox-test-fg");
    EXPECT_EQ(nices(background), (std::vector<int>{own, own + 3, own + 3}));
    EXPECT_EQ(nices(inherited), (std::vector<int>{own, own, own}));
    SetBackgroundNice(0);
    ThreadPool after(2, "ctrbox-test-bg", ThreadPool::Wait::kSleep,
                     ThreadPool::Priority::kBackground);
    EXPECT_EQ(nices(after), (std::vector<int>{own, own})) << "background nice 0 changes nothing";
  })
      .join();
}

// This process's threads named `name` and their context switches so far (/proc/self/task).
struct Switches {
  int threads = 0;
  uint64_t switches = 0;
};
Switches ContextSwitchesOf(const std::string& name) {
  Switches out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::string comm;
    std::getline(std::ifstream(task.path() / "comm"), comm);
    if (comm != name) continue;
    ++out.threads;
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);) {
      for (const char* field : {"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"}) {
        if (line.rfind(field, 0) == 0) out.switches += std::stoull(line.substr(std::strlen(field)));
      }
    }
  }
  return out;
}

// Idle pools' workers sleep through another pool's loops. They used to wait on a 64-bit word,
// which libstdc++ waits on through 16 waiter slots shared by the whole process: every loop of
// a busy pool woke the idle workers of any pool in its slot (the tiers' idle device readers
// woke ~3 000 times a second in a training job). With 32 idle pools, some share a slot with
// the busy pool's two words but for a chance of about 1 in 70, so the old code fails here
// (1 666-3 976 switches in 20 000 loops when it was measured).
TEST(ThreadPoolTest, IdlePoolsSleepThroughAnotherPoolsLoops) {
  constexpr const char* kIdle = "ctrbox-idle";  // (a thread's name keeps 15 characters)
  std::vector<std::unique_ptr<ThreadPool>> idle;
  for (int i = 0; i < 32; ++i) {
    idle.push_back(std::make_unique<ThreadPool>(2, kIdle, ThreadPool::Wait::kSleep));
    idle.back()->ParallelFor(2, [](size_t, int) {});  // started and gone back to sleep
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const Switches before = ContextSwitchesOf(kIdle);
  ASSERT_EQ(before.threads, 32) << "one worker per idle pool, found by its name";
  if (before.switches == 0) GTEST_SKIP() << "no context switch counts in /proc/self/task/*/status";
  ThreadPool busy(2, "ctrbox-busy", ThreadPool::Wait::kSleep);
  constexpr int kLoops = 20000;
  std::atomic<int> ran{0};
  for (int i = 0; i < kLoops; ++i) busy.ParallelFor(2, [&](size_t, int) { ran.fetch_add(1); });
  EXPECT_EQ(ran.load(), 2 * kLoops);
  // A few switches of the 32 workers are the machine's own (timer ticks, migrations).
  const uint64_t woken = ContextSwitchesOf(kIdle).switches - before.switches;
  EXPECT_LT(woken, uint64_t{kLoops / 50}) << "of " << kLoops << " loops";
}

TEST(ThreadPoolTest, ManyBackToBackLoopsSeeEarlierWrites) {
  // Both ways of waiting: spinning first, and sleeping at once (workers and the caller go
  // straight to the futex between and at the end of loops).
  for (ThreadPool::Wait wait : {ThreadPool::Wait::kSpinThenSleep, ThreadPool::Wait::kSleep}) {
    ThreadPool pool(3, "ctrbox-test", wait);
    std::vector<int64_t> data(64, 0);
    std::vector<std::atomic<int>> ran(3);
    for (int round = 0; round < 2000; ++round) {
      pool.ParallelFor(data.size(), [&](size_t i, int thread) {
        data[i] += static_cast<int64_t>(i);
        ran[thread].fetch_add(1, std::memory_order_relaxed);
      });
    }
    for (size_t i = 0; i < data.size(); ++i) EXPECT_EQ(data[i], 2000 * static_cast<int64_t>(i));
    int total = 0;
    for (const auto& r : ran) total += r.load();
    EXPECT_EQ(total, 2000 * 64);
  }
}

// A worker held before it joins a loop plays one the OS has not scheduled: the caller runs
// every task itself and returns (it used to wait for every worker to check in, which here
// would never end). Released, the worker must stay out of the loop it missed and serve later
// ones.
TEST(ThreadPoolTest, ALoopDoesNotWaitForAWorkerThatHasNotJoinedIt) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> seen{0};
  ThreadPool pool(2, [&](int) {
    if (seen.fetch_add(1) != 0) return;  // hold only its first loop
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return release; });
  });
  std::vector<int> thread_of(4, -1);
  pool.ParallelFor(thread_of.size(), [&](size_t task, int thread) { thread_of[task] = thread; });
  for (int t : thread_of) EXPECT_EQ(t, 0);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  // Later loops: every task once; the worker takes part (tasks long enough that it wakes).
  std::atomic<int> by_worker{0};
  for (int round = 0; round < 200 && by_worker.load() == 0; ++round) {
    std::vector<std::atomic<int>> hits(64);
    pool.ParallelFor(hits.size(), [&](size_t task, int thread) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
      while (std::chrono::steady_clock::now() < until) {
      }
      hits[task].fetch_add(1);
      if (thread == 1) by_worker.fetch_add(1);
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
  EXPECT_GT(by_worker.load(), 0);
}

// Pools that outnumber the cores: workers are often not scheduled in time for a loop, so its
// caller runs the tasks and closes it without them. A late worker must then stay out (each
// loop's fn lives on the caller's stack: a late call would hit a dead frame, which ASan and
// TSan report) and join the next loop instead; every task still runs once, and loops see the
// writes of earlier ones.
TEST(ThreadPoolTest, LoopsGoOnWithoutWorkersTheOsHasNotScheduled) {
  constexpr int kPools = 4, kRounds = 20000;
  std::vector<std::thread> callers;
  std::vector<int> failures(kPools, 0);
  for (int p = 0; p < kPools; ++p) {
    callers.emplace_back([&, p] {
      ThreadPool pool(3);
      std::vector<int64_t> data(8, 0);
      for (int round = 0; round < kRounds; ++round) {
        const int64_t add = round % 7 + 1;  // a value per loop, captured by this loop's fn only
        std::vector<std::atomic<int>> hits(data.size());
        pool.ParallelFor(data.size(), [&, add](size_t i, int) {
          data[i] += add;
          hits[i].fetch_add(1);
        });
        for (auto& h : hits) failures[p] += h.load() != 1;
      }
      int64_t want = 0;
      for (int round = 0; round < kRounds; ++round) want += round % 7 + 1;
      for (int64_t d : data) failures[p] += d != want;
    });
  }
  for (auto& c : callers) c.join();
  for (int p = 0; p < kPools; ++p) EXPECT_EQ(failures[p], 0) << "pool " << p;
}

}  // namespace
}  // namespace ctrbox
