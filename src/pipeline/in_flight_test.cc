// InFlight: the registry of passes in flight and the shrink barrier (docs/pipeline.md).
#include "pipeline/in_flight.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace ctrbox {
namespace {

std::shared_ptr<const WorkingTable> Table() { return std::make_shared<WorkingTable>(); }

TEST(InFlightTest, SnapshotListsThePassesInFlightInAscendingOrder) {
  InFlight r(/*pushed=*/3);
  auto t5 = Table(), t3 = Table(), t4 = Table();
  r.Add(5, t5);
  r.Add(3, t3);
  r.Add(4, t4);
  InFlight::Tables s = r.Snapshot();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].first, 3u);
  EXPECT_EQ(s[0].second, t3);
  EXPECT_EQ(s[1].first, 4u);
  EXPECT_EQ(s[1].second, t4);
  EXPECT_EQ(s[2].first, 5u);
  EXPECT_EQ(s[2].second, t5);
  r.Remove(3, /*pushed=*/true);
  s = r.Snapshot();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].first, 4u);
  // The snapshot holds its own references: the table outlives its removal.
  r.Remove(4, /*pushed=*/true);
  EXPECT_EQ(s[0].second, t4);
  EXPECT_EQ(r.Snapshot().size(), 1u);
}

TEST(InFlightTest, TheBarrierOpensWhenEveryEarlierPassIsPushed) {
  InFlight r(/*pushed=*/2);
  EXPECT_TRUE(r.WaitPushed(0));
  EXPECT_TRUE(r.WaitPushed(2));  // passes 0 and 1 were pushed before this run
  r.Add(2, Table());
  r.Add(3, Table());
  std::atomic<int> pushed_before_wake{-1};
  std::atomic<int> last_pushed{1};
  std::thread waiter([&] {
    const bool ok = r.WaitPushed(4);
    pushed_before_wake.store(last_pushed.load());
    EXPECT_TRUE(ok);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(pushed_before_wake.load(), -1);  // still waiting: passes 2 and 3 are in flight
  last_pushed.store(2);
  r.Remove(2, /*pushed=*/true);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(pushed_before_wake.load(), -1);  // pass 3 still in flight
  last_pushed.store(3);
  r.Remove(3, /*pushed=*/true);
  waiter.join();
  EXPECT_EQ(pushed_before_wake.load(), 3);
  EXPECT_TRUE(r.Snapshot().empty());
}

TEST(InFlightTest, ADiscardedPassCancelsTheBarrierForEveryWaiterAndLaterOnes) {
  InFlight r(/*pushed=*/0);
  r.Add(0, Table());
  r.Add(1, Table());
  std::atomic<int> results{0};
  std::thread w1([&] { results += r.WaitPushed(2) ? 100 : 1; });
  std::thread w2([&] { results += r.WaitPushed(1) ? 100 : 1; });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  r.Remove(0, /*pushed=*/false);  // discarded (Ctrl-C, a failure): pass 1 will never be pushed
  w1.join();
  w2.join();
  EXPECT_EQ(results.load(), 2);
  EXPECT_FALSE(r.WaitPushed(0));  // cancelled for good
  EXPECT_EQ(r.Snapshot().size(), 1u);
}

TEST(InFlightTest, CancelWakesAWaiter) {
  InFlight r(/*pushed=*/0);
  r.Add(0, Table());
  std::atomic<bool> done{false}, ok{true};
  std::thread waiter([&] {
    ok = r.WaitPushed(1);
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(done.load());
  r.Cancel();
  waiter.join();
  EXPECT_FALSE(ok.load());
}

}  // namespace
}  // namespace ctrbox
