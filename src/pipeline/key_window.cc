#include "pipeline/key_window.h"

#include <algorithm>
#include <bit>

#include "util/hash.h"

namespace ctrbox {

KeyWindow::KeyWindow(uint32_t passes, std::vector<uint64_t> table_weights)
    : passes_(passes),
      per_pass_(passes, 0),
      per_pass_weight_(passes, 0),
      weights_(std::move(table_weights)) {
  if (!weights_.empty()) weights_.resize(uint64_t{1} << kTableKeyBits, 0);  // foreign tables 0
  Rebuild(1024);
}

size_t KeyWindow::Find(uint64_t key) const {
  const size_t mask = keys_.size() - 1;
  size_t i = Mix64(key) & mask;
  while (last_[i] != 0 && keys_[i] != key) i = (i + 1) & mask;
  return i;
}

void KeyWindow::Rebuild(size_t capacity) {
  ++generation_;
  std::vector<uint64_t> keys = std::move(keys_);
  std::vector<uint32_t> last = std::move(last_);
  keys_.assign(capacity, 0);
  last_.assign(capacity, 0);
  used_ = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!InWindow(last[i])) continue;  // left the window: dropped
    const size_t j = Find(keys[i]);
    keys_[j] = keys[i];
    last_[j] = last[i];
    ++used_;
  }
}

KeyWindow::Counts KeyWindow::CountWith(const uint64_t* keys, size_t n) {
  // Each key of this call counted once (a stamped set), then the distinct ones looked up in
  // the window's map, each bucket hinted to the cache a few keys ahead (the map is the size
  // of the window: its lookups miss the cache).
  const size_t cap = std::bit_ceil(2 * n + 2);
  if (scratch_keys_.size() < cap) {
    scratch_keys_.assign(cap, 0);
    scratch_mark_.assign(cap, 0);
    scratch_stamp_ = 0;
  }
  if (++scratch_stamp_ == 0) {  // wrapped: clear the marks
    std::fill(scratch_mark_.begin(), scratch_mark_.end(), 0);
    scratch_stamp_ = 1;
  }
  const size_t mask = scratch_keys_.size() - 1;
  counted_from_ = keys;
  counted_n_ = n;
  counted_keys_.clear();
  for (size_t k = 0; k < n; ++k) {
    const uint64_t key = keys[k];
    size_t i = Mix64(key) & mask;
    while (scratch_mark_[i] == scratch_stamp_ && scratch_keys_[i] != key) i = (i + 1) & mask;
    if (scratch_mark_[i] == scratch_stamp_) continue;
    scratch_mark_[i] = scratch_stamp_;
    scratch_keys_[i] = key;
    counted_keys_.push_back(key);
  }
  recountable_ = true;
  return CountCounted(false);
}

KeyWindow::Counts KeyWindow::Recount(const uint64_t* keys, size_t n) {
  if (!recountable_ || keys != counted_from_ || n != counted_n_) return CountWith(keys, n);
  return CountCounted(counted_generation_ == generation_);
}

KeyWindow::Counts KeyWindow::CountCounted(bool reuse) {
  constexpr size_t kAhead = 16;
  const size_t map_mask = keys_.size() - 1;
  const size_t d = counted_keys_.size();
  counted_buckets_.resize(d);
  counted_generation_ = generation_;
  Counts c;
  c.batch = d;
  uint64_t new_to_window = 0, new_to_pass = 0, new_weight = 0;
  for (size_t k = 0; k < d; ++k) {
    const uint64_t key = counted_keys_[k];
    const uint64_t w = Weight(key);
    c.batch_weight += w;
    uint32_t last = 0;
    if (reuse) {
      // Without adds a bucket keeps its key and an absent key stays absent.
      const size_t bucket = counted_buckets_[k];
      if (bucket != kAbsent) last = last_[bucket];
    } else {
      if (k + kAhead < d) {
        const size_t ahead = Mix64(counted_keys_[k + kAhead]) & map_mask;
        __builtin_prefetch(&last_[ahead]);
        __builtin_prefetch(&keys_[ahead]);
      }
      const size_t bucket = Find(key);
      last = last_[bucket];
      counted_buckets_[k] = last != 0 ? bucket : kAbsent;
    }
    new_to_pass += last != pass_;
    const bool fresh = last == 0 || !InWindow(last);
    new_to_window += fresh;
    new_weight += fresh ? w : 0;
  }
  c.window = distinct_ + new_to_window;
  c.window_weight = distinct_weight_ + new_weight;
  c.pass = current() + new_to_pass;
  return c;
}

void KeyWindow::AddAt(uint64_t key, size_t bucket) {
  const uint32_t last = last_[bucket];
  if (last == pass_) return;
  const uint64_t w = Weight(key);
  if (last != 0 && InWindow(last)) {
    --per_pass_[last % passes_];  // its last use moves to this pass
    per_pass_weight_[last % passes_] -= w;
  } else {
    ++distinct_;
    distinct_weight_ += w;
    if (last == 0) ++used_;
  }
  keys_[bucket] = key;
  last_[bucket] = pass_;
  const size_t cur = pass_ % passes_;
  ++per_pass_[cur];
  per_pass_weight_[cur] += w;
}

void KeyWindow::Add(const uint64_t* keys, size_t n) {
  recountable_ = false;
  for (size_t k = 0; k < n; ++k) {
    if (2 * (used_ + 1) > keys_.size()) Rebuild(2 * keys_.size());
    AddAt(keys[k], Find(keys[k]));
  }
}

void KeyWindow::AddCounted(const uint64_t* keys, size_t n) {
  if (keys != counted_from_ || n != counted_n_) {
    Add(keys, n);
    return;
  }
  recountable_ = false;
  for (size_t k = 0; k < counted_keys_.size(); ++k) {
    if (2 * (used_ + 1) > keys_.size()) Rebuild(2 * keys_.size());
    // A key the map held keeps its bucket until a rebuild; an absent one is looked up now
    // (an earlier key of this call may have taken the empty bucket CountWith saw).
    const size_t b = counted_buckets_[k];
    const uint64_t key = counted_keys_[k];
    AddAt(key, b != kAbsent && counted_generation_ == generation_ ? b : Find(key));
  }
}

void KeyWindow::NextPass() {
  ++pass_;
  // The pass that leaves the window takes the keys whose last use it was.
  uint64_t& leaving = per_pass_[pass_ % passes_];
  distinct_ -= leaving;
  leaving = 0;
  uint64_t& leaving_weight = per_pass_weight_[pass_ % passes_];
  distinct_weight_ -= leaving_weight;
  leaving_weight = 0;
  // Drop the stale entries once they are half the map (amortised O(1) per key).
  if (2 * (used_ - distinct_) > used_ && used_ > 1024) {
    size_t cap = 1024;
    while (cap < 4 * distinct_) cap *= 2;
    Rebuild(cap);
  }
}

uint64_t KeyWindow::current() const { return per_pass_[pass_ % passes_]; }

}  // namespace ctrbox
