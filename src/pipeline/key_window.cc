#include "pipeline/key_window.h"

#include <algorithm>
#include <bit>

#include "util/hash.h"

namespace ctrbox {

KeyWindow::KeyWindow(uint32_t passes, std::vector<uint64_t> table_weights, Exactness exact_above)
    : passes_(passes),
      exact_above_(exact_above),
      pass_keys_(passes),
      pass_weight_(passes, 0),
      per_pass_(passes, 0),
      per_pass_weight_(passes, 0),
      weights_(std::move(table_weights)) {
  if (!weights_.empty()) weights_.resize(uint64_t{1} << kTableKeyBits, 0);  // foreign tables 0
}

KeyWindow::KeyWindow(uint32_t passes, std::vector<uint64_t> table_weights)
    : KeyWindow(passes, std::move(table_weights), Exactness{0, 0}) {}

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

void KeyWindow::BuildMap() {
  ++generation_;
  size_t cap = 1024;
  while (cap < 4 * bound_) cap *= 2;
  keys_.assign(cap, 0);
  last_.assign(cap, 0);
  used_ = 0;
  distinct_ = distinct_weight_ = 0;
  std::fill(per_pass_.begin(), per_pass_.end(), 0);
  std::fill(per_pass_weight_.begin(), per_pass_weight_.end(), 0);
  // Oldest first, so that a key's entry ends with its last use.
  const uint32_t oldest = pass_ >= passes_ ? pass_ - passes_ + 1 : 1;
  for (uint32_t p = oldest; p != pass_ + 1; ++p) {
    for (uint64_t key : pass_keys_[p % passes_]) AddAt(key, Find(key), p);
  }
  mapped_ = true;
}

size_t KeyWindow::SetFind(uint64_t key) const {
  const size_t mask = set_.size() - 1;
  size_t i = Mix64(key) & mask;
  while (set_[i].pass == pass_ && set_[i].key != key) i = (i + 1) & mask;
  return i;
}

void KeyWindow::SetAdd(uint64_t key) {
  std::vector<uint64_t>& list = pass_keys_[pass_ % passes_];
  if (2 * (list.size() + 1) > set_.size()) {
    // Grow: the current pass's keys are its list's.
    set_.assign(std::max<size_t>(1024, 2 * set_.size()), SetSlot{});
    for (uint64_t k : list) set_[SetFind(k)] = {k, pass_};
  }
  SetSlot& slot = set_[SetFind(key)];
  if (slot.pass == pass_) return;
  slot = {key, pass_};
  ListAdd(key);
}

void KeyWindow::MapAdd(uint64_t key, size_t bucket) {
  if (AddAt(key, bucket, pass_)) ListAdd(key);
}

void KeyWindow::ListAdd(uint64_t key) {
  pass_keys_[pass_ % passes_].push_back(key);
  const uint64_t w = Weight(key);
  pass_weight_[pass_ % passes_] += w;
  ++bound_;
  bound_weight_ += w;
}

KeyWindow::Counts KeyWindow::CountWith(const uint64_t* keys, size_t n) {
  // Each key of this call counted once (a stamped set), then the distinct ones looked up in
  // the window's map or the current pass's set.
  const size_t cap = std::bit_ceil(2 * n + 2);
  if (scratch_.size() < cap) {
    scratch_.assign(cap, SetSlot{});
    scratch_stamp_ = 0;
  }
  if (++scratch_stamp_ == 0) {  // wrapped: clear the marks
    std::fill(scratch_.begin(), scratch_.end(), SetSlot{});
    scratch_stamp_ = 1;
  }
  const size_t mask = scratch_.size() - 1;
  counted_from_ = keys;
  counted_n_ = n;
  counted_keys_.clear();
  constexpr size_t kAhead = 8;
  for (size_t k = 0; k < n; ++k) {
    if (k + kAhead < n) __builtin_prefetch(&scratch_[Mix64(keys[k + kAhead]) & mask]);
    const uint64_t key = keys[k];
    size_t i = Mix64(key) & mask;
    while (scratch_[i].pass == scratch_stamp_ && scratch_[i].key != key) i = (i + 1) & mask;
    if (scratch_[i].pass == scratch_stamp_) continue;
    scratch_[i] = {key, scratch_stamp_};
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
  const size_t d = counted_keys_.size();
  Counts c;
  c.batch = d;
  for (size_t k = 0; k < d; ++k) c.batch_weight += Weight(counted_keys_[k]);
  if (!mapped_) {
    // The current pass's set says which keys are new to the pass; the window's count is
    // bounded by the passes' sums, exact only if that passes the limit.
    uint64_t new_to_pass = 0, new_weight = 0;
    if (current() > 0) {
      constexpr size_t kAhead = 8;
      const size_t mask = set_.size() - 1;
      for (size_t k = 0; k < d; ++k) {
        if (k + kAhead < d) __builtin_prefetch(&set_[Mix64(counted_keys_[k + kAhead]) & mask]);
        const uint64_t key = counted_keys_[k];
        if (set_[SetFind(key)].pass != pass_) {
          ++new_to_pass;
          new_weight += Weight(key);
        }
      }
    } else {  // (a pass's first minibatch: every key is new to it)
      new_to_pass = d;
      new_weight = c.batch_weight;
    }
    c.pass = current() + new_to_pass;
    c.window = bound_ + new_to_pass;
    c.window_weight = bound_weight_ + new_weight;
    c.exact = false;
    counted_generation_ = ~uint64_t{0};
    if (!NeedExact(c.window, c.window_weight)) return c;
    BuildMap();
    reuse = false;
  }
  // The distinct keys looked up in the window's map, each bucket hinted to the cache a few
  // keys ahead (the map is the size of the window: its lookups miss the cache).
  constexpr size_t kAhead = 16;
  const size_t map_mask = keys_.size() - 1;
  counted_buckets_.resize(d);
  counted_generation_ = generation_;
  uint64_t new_to_window = 0, new_to_pass = 0, new_weight = 0;
  for (size_t k = 0; k < d; ++k) {
    const uint64_t key = counted_keys_[k];
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
    new_weight += fresh ? Weight(key) : 0;
  }
  c.window = distinct_ + new_to_window;
  c.window_weight = distinct_weight_ + new_weight;
  c.pass = current() + new_to_pass;
  c.exact = true;
  return c;
}

bool KeyWindow::AddAt(uint64_t key, size_t bucket, uint32_t pass) {
  const uint32_t last = last_[bucket];
  if (last == pass) return false;
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
  last_[bucket] = pass;
  const size_t cur = pass % passes_;
  ++per_pass_[cur];
  per_pass_weight_[cur] += w;
  return true;
}

void KeyWindow::Add(const uint64_t* keys, size_t n) {
  recountable_ = false;
  if (!mapped_) {
    for (size_t k = 0; k < n; ++k) SetAdd(keys[k]);
    // Without the map the sums stay within the limit (so distinct() is exact above it).
    if (NeedExact(bound_, bound_weight_)) BuildMap();
    return;
  }
  for (size_t k = 0; k < n; ++k) {
    if (2 * (used_ + 1) > keys_.size()) Rebuild(2 * keys_.size());
    MapAdd(keys[k], Find(keys[k]));
  }
}

void KeyWindow::AddCounted(const uint64_t* keys, size_t n) {
  if (keys != counted_from_ || n != counted_n_) {
    Add(keys, n);
    return;
  }
  recountable_ = false;
  if (!mapped_) {
    constexpr size_t kAhead = 8;
    const size_t d = counted_keys_.size();
    for (size_t k = 0; k < d; ++k) {
      if (k + kAhead < d && !set_.empty()) {  // (a hint: a growth in between moves the slots)
        __builtin_prefetch(&set_[Mix64(counted_keys_[k + kAhead]) & (set_.size() - 1)]);
      }
      SetAdd(counted_keys_[k]);
    }
    if (NeedExact(bound_, bound_weight_)) BuildMap();
    return;
  }
  for (size_t k = 0; k < counted_keys_.size(); ++k) {
    const uint64_t key = counted_keys_[k];
    if (2 * (used_ + 1) > keys_.size()) Rebuild(2 * keys_.size());
    // A key the map held keeps its bucket until a rebuild; an absent one is looked up now
    // (an earlier key of this call may have taken the empty bucket CountWith saw). The
    // buckets are this count's only if it looked them up in this map generation.
    const size_t b = counted_generation_ == generation_ ? counted_buckets_[k] : kAbsent;
    MapAdd(key, b != kAbsent ? b : Find(key));
  }
}

void KeyWindow::NextPass() {
  ++pass_;
  // The pass that leaves the window takes its keys off the bounds, and (with the map) the
  // keys whose last use it was off the count.
  const size_t slot = pass_ % passes_;
  bound_ -= pass_keys_[slot].size();
  bound_weight_ -= pass_weight_[slot];
  pass_keys_[slot].clear();
  pass_weight_[slot] = 0;
  if (!mapped_) return;
  uint64_t& leaving = per_pass_[slot];
  distinct_ -= leaving;
  leaving = 0;
  uint64_t& leaving_weight = per_pass_weight_[slot];
  distinct_weight_ -= leaving_weight;
  leaving_weight = 0;
  if (bound_ <= exact_above_.keys - exact_above_.keys / 4 &&
      bound_weight_ <= exact_above_.weight - exact_above_.weight / 4) {
    // Well below the limit: the map goes until the sums near it again.
    mapped_ = false;
    keys_ = {};
    last_ = {};
    used_ = 0;
    ++generation_;
    return;
  }
  // Drop the stale entries once they are half the map (amortised O(1) per key).
  if (2 * (used_ - distinct_) > used_ && used_ > 1024) {
    size_t cap = 1024;
    while (cap < 4 * distinct_) cap *= 2;
    Rebuild(cap);
  }
}

uint64_t KeyWindow::current() const { return pass_keys_[pass_ % passes_].size(); }

}  // namespace ctrbox
