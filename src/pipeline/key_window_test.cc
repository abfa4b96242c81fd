#include "pipeline/key_window.h"

#include <gtest/gtest.h>

#include <deque>
#include <set>
#include <string>
#include <tuple>

#include "util/hash.h"
#include "util/random.h"

namespace ctrbox {
namespace {

// The reference: the window as a deque of per-pass key sets.
class ReferenceWindow {
 public:
  explicit ReferenceWindow(size_t passes) : passes_(passes) { window_.emplace_back(); }
  uint64_t DistinctWith(const std::vector<uint64_t>& keys) const {
    std::set<uint64_t> all(keys.begin(), keys.end());
    for (const auto& p : window_) all.insert(p.begin(), p.end());
    return all.size();
  }
  void Add(const std::vector<uint64_t>& keys) { window_.back().insert(keys.begin(), keys.end()); }
  void NextPass() {
    window_.emplace_back();
    if (window_.size() > passes_) window_.pop_front();
  }
  uint64_t PassWith(const std::vector<uint64_t>& keys) const {
    std::set<uint64_t> pass(keys.begin(), keys.end());
    pass.insert(window_.back().begin(), window_.back().end());
    return pass.size();
  }
  uint64_t distinct() const { return DistinctWith({}); }
  uint64_t current() const { return window_.back().size(); }

 private:
  size_t passes_;
  std::deque<std::set<uint64_t>> window_;
};

// Zipf-like keys with a drifting hot set, so keys leave the window and come back, the map's
// stale entries are dropped, and it grows and shrinks.
TEST(KeyWindowTest, MatchesAReferenceOverManyPasses) {
  for (uint32_t passes : {1u, 2u, 5u}) {
    Random rng(passes);
    KeyWindow w(passes);
    ReferenceWindow ref(passes);
    for (int pass = 0; pass < 60; ++pass) {
      const int chunks = 1 + static_cast<int>(rng.Below(6));
      for (int c = 0; c < chunks; ++c) {
        std::vector<uint64_t> keys(rng.Below(3000));
        for (uint64_t& k : keys) {
          const uint64_t r = rng.Below(100);
          // 0 is a valid key too.
          k = r < 50 ? rng.Below(200) : r < 90 ? 1000 + pass * 500 + rng.Below(2000) : rng.Next();
        }
        const KeyWindow::Counts got = w.CountWith(keys.data(), keys.size());
        ASSERT_EQ(got.window, ref.DistinctWith(keys))
            << "window " << passes << " pass " << pass << " chunk " << c;
        ASSERT_EQ(got.pass, ref.PassWith(keys)) << "pass " << pass << " chunk " << c;
        ASSERT_EQ(got.batch, std::set<uint64_t>(keys.begin(), keys.end()).size());
        if (rng.Below(4) == 0) continue;  // a chunk asked about and not added
        // Added as counted (the lookups CountWith made), after a pass ended in between, or
        // plainly.
        const uint64_t how = rng.Below(4);
        if (how == 0) {
          w.NextPass();
          ref.NextPass();
        }
        if (how == 3) {
          w.Add(keys.data(), keys.size());
        } else {
          w.AddCounted(keys.data(), keys.size());
        }
        ref.Add(keys);
        ASSERT_EQ(w.distinct(), ref.distinct());
        ASSERT_EQ(w.current(), ref.current());
      }
      w.NextPass();
      ref.NextPass();
      ASSERT_EQ(w.distinct(), ref.distinct()) << "after pass " << pass;
    }
  }
}

// model.slot_dims: keys weighed by their table (top 4 bits); the window's weight is the sum of
// its distinct keys' weights, through keys that move between passes and leave the window.
TEST(KeyWindowTest, WeighsKeysByTheirTable) {
  const std::vector<uint64_t> weights = {100, 340, 7};
  auto weight = [&](uint64_t k) { return weights[k >> kTableShift]; };
  for (uint32_t passes : {1u, 3u}) {
    Random rng(10 + passes);
    KeyWindow w(passes, weights);
    std::deque<std::set<uint64_t>> ref(1);
    auto ref_weight = [&](const std::vector<uint64_t>& more) {
      std::set<uint64_t> all(more.begin(), more.end());
      for (const auto& p : ref) all.insert(p.begin(), p.end());
      uint64_t sum = 0;
      for (uint64_t k : all) sum += weight(k);
      return sum;
    };
    for (int pass = 0; pass < 40; ++pass) {
      std::vector<uint64_t> keys(rng.Below(2000));
      for (uint64_t& k : keys) {
        k = TableKey(rng.Below(100) < 60 ? rng.Below(300) : rng.Next(),
                     static_cast<uint32_t>(rng.Below(3)));
      }
      const KeyWindow::Counts got = w.CountWith(keys.data(), keys.size());
      ASSERT_EQ(got.window_weight, ref_weight(keys)) << passes << " pass " << pass;
      const std::set<uint64_t> own(keys.begin(), keys.end());
      uint64_t own_weight = 0;
      for (uint64_t k : own) own_weight += weight(k);
      ASSERT_EQ(got.batch_weight, own_weight);
      if (pass % 2 == 0) {
        w.Add(keys.data(), keys.size());
      } else {
        w.AddCounted(keys.data(), keys.size());
      }
      ref.back().insert(keys.begin(), keys.end());
      ASSERT_EQ(w.distinct_weight(), ref_weight({}));
      w.NextPass();
      ref.emplace_back();
      if (ref.size() > passes) ref.pop_front();
      ASSERT_EQ(w.distinct_weight(), ref_weight({})) << "after pass " << pass;
    }
  }
}

// AddCounted of an array other than the one last counted is a plain Add: the keys added are
// its own, not the counted ones.
TEST(KeyWindowTest, AddCountedOfAnotherArrayAddsThatArray) {
  KeyWindow w(2);
  const std::vector<uint64_t> counted = {1, 2, 3, 3}, added = {7, 8, 1};
  EXPECT_EQ(w.CountWith(counted.data(), counted.size()).batch, 3u);
  w.AddCounted(added.data(), added.size());
  EXPECT_EQ(w.distinct(), 3u);
  const std::vector<uint64_t> probe = {1, 2, 7, 8};
  EXPECT_EQ(w.CountWith(probe.data(), probe.size()).window, 4u);  // 2 is new, 1, 7, 8 are in
  // The same array with fewer keys is another array too.
  w.AddCounted(probe.data(), 1);
  EXPECT_EQ(w.distinct(), 3u);
  w.AddCounted(probe.data(), probe.size());
  EXPECT_EQ(w.distinct(), 4u);
}

// Recount is CountWith: a chunk counted, then passes ended (the map rebuilt at times, keys
// leaving the window), then counted again, as the pass reader judges a minibatch that closed
// the pass before it; and after adds in between (then it counts afresh).
TEST(KeyWindowTest, RecountIsCountWithAfterPassesEnd) {
  for (uint32_t passes : {1u, 3u}) {
    Random rng(20 + passes);
    KeyWindow w(passes), twin(passes);
    ReferenceWindow ref(passes);
    for (int step = 0; step < 300; ++step) {
      std::vector<uint64_t> keys(rng.Below(2500));
      for (uint64_t& k : keys) {
        const uint64_t r = rng.Below(100);
        k = r < 40 ? rng.Below(150) : r < 85 ? step * 300 + rng.Below(1500) : rng.Next();
      }
      const KeyWindow::Counts first = w.CountWith(keys.data(), keys.size());
      ASSERT_EQ(first.window, ref.DistinctWith(keys));
      const uint64_t ended = rng.Below(3);  // passes that end before the count again
      for (uint64_t p = 0; p < ended; ++p) {
        w.NextPass();
        twin.NextPass();
        ref.NextPass();
      }
      const uint64_t how = rng.Below(5);
      std::vector<uint64_t> other = {rng.Below(150), rng.Next()};
      if (how == 0) {  // an add in between: the count is made afresh
        w.Add(other.data(), other.size());
        twin.Add(other.data(), other.size());
        ref.Add(other);
      } else if (how == 1) {  // another array counted in between
        (void)w.CountWith(other.data(), other.size());
      }
      const KeyWindow::Counts again = w.Recount(keys.data(), keys.size());
      const KeyWindow::Counts direct = twin.CountWith(keys.data(), keys.size());
      ASSERT_EQ(again.window, ref.DistinctWith(keys)) << "step " << step << " how " << how;
      ASSERT_EQ(again.pass, ref.PassWith(keys)) << "step " << step;
      ASSERT_EQ(again.window, direct.window);
      ASSERT_EQ(again.pass, direct.pass);
      ASSERT_EQ(again.batch, direct.batch);
      ASSERT_EQ(again.window_weight, direct.window_weight);
      ASSERT_EQ(again.batch_weight, direct.batch_weight);
      if (rng.Below(3) == 0) continue;  // counted, not added
      w.AddCounted(keys.data(), keys.size());
      twin.AddCounted(keys.data(), keys.size());
      ref.Add(keys);
      ASSERT_EQ(w.distinct(), ref.distinct()) << "step " << step;
      ASSERT_EQ(w.current(), ref.current());
      ASSERT_EQ(twin.distinct(), ref.distinct());
    }
  }
}

// Without the map while the passes' sums stay within the limit (Exactness): against the
// reference and an exact twin, through many passes whose keys drift so that the sums cross the
// limit both ways (the map built from the passes' lists mid-pass, dropped at a pass's end),
// with recounts, counted and plain adds: the pass's and the batch's counts are exact always,
// the window's is at least the reference's, and exact (the twin's) whenever it passes the
// limit, so "does the window pass the limit?" gets the exact window's answer every time.
TEST(KeyWindowTest, WithoutTheMapBelowTheLimitAnswersAsTheExactWindow) {
  const std::vector<uint64_t> weights = {3, 10, 1};
  for (bool weighted : {false, true}) {
    for (uint32_t passes : {1u, 2u, 5u}) {
      for (uint64_t limit : {500u, 1500u}) {
        const uint64_t wlimit = 4 * limit;
        Random rng(passes * 100 + limit + weighted);
        const KeyWindow::Exactness exact = weighted ? KeyWindow::Exactness{UINT64_MAX, wlimit}
                                                    : KeyWindow::Exactness{limit, UINT64_MAX};
        KeyWindow lazy(passes, weighted ? weights : std::vector<uint64_t>{}, exact);
        KeyWindow twin(passes, weighted ? weights : std::vector<uint64_t>{});
        ReferenceWindow ref(passes);
        int built = 0, dropped = 0, exact_answers = 0;
        bool was_mapped = lazy.mapped();
        auto track = [&] {
          built += !was_mapped && lazy.mapped();
          dropped += was_mapped && !lazy.mapped();
          was_mapped = lazy.mapped();
        };
        for (int pass = 0; pass < 80; ++pass) {
          // Phases of small and large passes, so the window's sums rise past the limit and
          // fall back.
          const bool large = pass / 6 % 2 == 1;
          const uint64_t spread = large ? 3000 : 150;
          const int chunks = 1 + static_cast<int>(rng.Below(4));
          for (int c = 0; c < chunks; ++c) {
            std::vector<uint64_t> keys(rng.Below(large ? 1500 : 150));
            for (uint64_t& k : keys) {
              const uint64_t r = rng.Below(100);
              k = r < 40 ? rng.Below(100) : r < 90 ? pass * 97 + rng.Below(spread) : rng.Next();
              if (weighted) k = TableKey(k & 0xFFFFFFFFFFFull, static_cast<uint32_t>(rng.Below(3)));
            }
            const bool again = rng.Below(3) == 0;
            KeyWindow::Counts got = lazy.CountWith(keys.data(), keys.size());
            if (again) {  // judged again after a pass ended, as the pass reader does
              lazy.NextPass();
              twin.NextPass();
              ref.NextPass();
              track();
              got = lazy.Recount(keys.data(), keys.size());
            }
            track();
            const KeyWindow::Counts want = twin.CountWith(keys.data(), keys.size());
            const std::string where =
                testing::PrintToString(std::make_tuple(weighted, passes, limit, pass, c));
            ASSERT_EQ(got.batch, want.batch) << where;
            ASSERT_EQ(got.batch_weight, want.batch_weight) << where;
            ASSERT_EQ(got.pass, want.pass) << where;
            ASSERT_EQ(got.pass, ref.PassWith(keys)) << where;
            ASSERT_EQ(want.window, ref.DistinctWith(keys)) << where;
            ASSERT_GE(got.window, want.window) << where;
            ASSERT_GE(got.window_weight, want.window_weight) << where;
            const bool over = weighted ? got.window_weight > wlimit : got.window > limit;
            const bool want_over = weighted ? want.window_weight > wlimit : want.window > limit;
            ASSERT_EQ(over, want_over) << where;
            if (over) {
              ++exact_answers;
              ASSERT_TRUE(got.exact) << where;
              ASSERT_EQ(got.window, want.window) << where;
              ASSERT_EQ(got.window_weight, want.window_weight) << where;
            }
            if (rng.Below(4) == 0) continue;  // asked about, not added
            if (rng.Below(4) == 0) {
              lazy.Add(keys.data(), keys.size());
            } else {
              lazy.AddCounted(keys.data(), keys.size());
            }
            twin.Add(keys.data(), keys.size());
            ref.Add(keys);
            track();
            ASSERT_EQ(lazy.current(), ref.current()) << where;
            ASSERT_GE(lazy.distinct(), ref.distinct()) << where;
            if (weighted ? lazy.distinct_weight() > wlimit : lazy.distinct() > limit) {
              ASSERT_EQ(lazy.distinct(), twin.distinct()) << where;
              ASSERT_EQ(lazy.distinct_weight(), twin.distinct_weight()) << where;
            }
          }
          lazy.NextPass();
          twin.NextPass();
          ref.NextPass();
          track();
        }
        if (passes > 1) {  // (one pass: the sum is the count)
          EXPECT_GE(built, 3) << weighted << " " << passes << " " << limit;
          EXPECT_GE(dropped, 3) << weighted << " " << passes << " " << limit;
          EXPECT_GE(exact_answers, 5) << weighted << " " << passes << " " << limit;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ctrbox
