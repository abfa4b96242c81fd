#include "util/bounded_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace ctrbox {
namespace {

using namespace std::chrono_literals;

// Waits (up to 10 s) until done() holds; false if it never did.
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 10000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return done();
}

TEST(BoundedQueueTest, DeliversInOrderAndDrainsAfterClose) {
  for (size_t capacity : {0u, 1u, 3u}) {
    BoundedQueue<int> q(capacity);
    std::thread producer([&] {
      for (int i = 0; i < 100; ++i) ASSERT_TRUE(q.Push(i));
      q.Close();
    });
    std::vector<int> got;
    int v;
    while (q.Pop(&v)) got.push_back(v);
    producer.join();
    ASSERT_EQ(got.size(), 100u) << capacity;
    for (int i = 0; i < 100; ++i) EXPECT_EQ(got[i], i) << capacity;
    EXPECT_FALSE(q.Push(7));
  }
}

// A producer runs at most `capacity` items ahead of the consumer; with capacity 0, Push
// returns only once a Pop has taken its item.
TEST(BoundedQueueTest, AProducerWaitsForRoom) {
  for (size_t capacity : {0u, 1u, 2u}) {
    BoundedQueue<int> q(capacity);
    std::atomic<int> pushed{0};
    std::thread producer([&] {
      for (int i = 0; i < 5; ++i) {
        ASSERT_TRUE(q.Push(i));
        pushed.fetch_add(1);
      }
    });
    ASSERT_TRUE(Eventually([&] { return pushed.load() == static_cast<int>(capacity); }));
    std::this_thread::sleep_for(20ms);  // and no further
    EXPECT_EQ(pushed.load(), static_cast<int>(capacity)) << capacity;
    int v;
    for (int taken = 1; taken <= 5; ++taken) {
      ASSERT_TRUE(q.Pop(&v));
      EXPECT_EQ(v, taken - 1);
      const int expect = std::min(5, taken + static_cast<int>(capacity));
      ASSERT_TRUE(Eventually([&] { return pushed.load() == expect; })) << capacity << " " << taken;
      std::this_thread::sleep_for(5ms);
      EXPECT_EQ(pushed.load(), expect) << capacity << " " << taken;
    }
    producer.join();
  }
}

// Close wakes a producer waiting for its item to be taken: its Push fails, and the item is
// still there for a Pop to drain (the pipeline's Fail drains its queues so).
TEST(BoundedQueueTest, CloseReleasesAHandoffNobodyTook) {
  BoundedQueue<int> q(0);
  std::atomic<int> result{-1};
  std::thread producer([&] { result.store(q.Push(42) ? 1 : 0); });
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(result.load(), -1);  // waiting for a consumer
  q.Close();
  producer.join();
  EXPECT_EQ(result.load(), 0);
  int v = 0;
  EXPECT_TRUE(q.Pop(&v));
  EXPECT_EQ(v, 42);
  EXPECT_FALSE(q.Pop(&v));
}

}  // namespace
}  // namespace ctrbox
