#include "util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <vector>

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

TEST(ThreadPoolTest, ManyBackToBackLoopsSeeEarlierWrites) {
  ThreadPool pool(3);
  std::vector<int64_t> data(64, 0);
  for (int round = 0; round < 2000; ++round) {
    pool.ParallelFor(data.size(), [&](size_t i, int) { data[i] += static_cast<int64_t>(i); });
  }
  for (size_t i = 0; i < data.size(); ++i) EXPECT_EQ(data[i], 2000 * static_cast<int64_t>(i));
}

}  // namespace
}  // namespace ctrbox
