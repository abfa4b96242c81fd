#include "pipeline/key_window.h"

#include <gtest/gtest.h>

#include <deque>
#include <set>

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
        w.Add(keys.data(), keys.size());
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

}  // namespace
}  // namespace ctrbox
