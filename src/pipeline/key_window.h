// KeyWindow: the distinct keys of the last W passes, the current one included, counted as a
// pass is cut. The pipeline pins the rows of up to W consecutive passes at once (pull to push),
// so this count times a row's bytes is what the memory budget must hold; the pass reader
// closes a pass before it would exceed its share (docs/storage.md, "Pass sizing").
//
// A hash map holds each key seen in the window with the last pass that used it, and a count
// per pass of the keys whose last use it is; when a pass leaves the window its count leaves
// the total and its keys are dropped from the map at the next rebuild, so the map stays the
// size of the window, not of the model.
//
// With model.slot_dims the rows of the tables cost different bytes: given a weight per table
// (the key's top bits, util/hash.h TableKey), the window also sums its keys' weights, which
// the pass reader compares with the budget's bytes.
//
// The map is kept only while the window is near its limit (`exact_above`): the pass reader
// asks "does the window pass the limit?", and the sum of the window's passes' distinct counts
// bounds the window's own count from above, so while that sum is at or below the limit the
// answer is no without the map. Each pass's distinct keys are kept (a set for the current
// pass, a list for each pass of the window), so the map is built from them when the sum
// passes the limit, kept while it stays above 3/4 of it, and dropped at a pass's end below
// that. On the 12 M-key job at a 10 % budget the window's sum stays under a third of the
// limit, and the map's lookups, adds and rebuilds were ~2 % of the job's CPU.
//
// Thread safety: not thread-safe.
#ifndef CTRBOX_PIPELINE_KEY_WINDOW_H_
#define CTRBOX_PIPELINE_KEY_WINDOW_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "util/hash.h"

namespace ctrbox {

class KeyWindow {
 public:
  // The window's counts are exact whenever the sum of its passes' distinct keys passes `keys`
  // or their summed weight passes `weight`; at or below both they may be that sum (an upper
  // bound). {0, 0} (the default): exact always. UINT64_MAX: the window's own count is not
  // wanted (only the pass's and the batch's, which are exact always).
  struct Exactness {
    uint64_t keys = 0, weight = 0;
  };
  // REQUIRES: passes >= 1. table_weights: key k weighs table_weights[k >> 60] (empty: 1).
  KeyWindow(uint32_t passes, std::vector<uint64_t> table_weights, Exactness exact_above);
  // Exact always.
  explicit KeyWindow(uint32_t passes, std::vector<uint64_t> table_weights = {});

  // What adding keys[0, n) to the current pass would make: the window's distinct keys, the
  // current pass's distinct keys, and the distinct keys of keys[0, n) alone; and the summed
  // weights of the window's and of keys[0, n)'s distinct keys. `window` and `window_weight`
  // are at least the window's and exact where `exact` (always where either passes its
  // Exactness); the others are exact always.
  struct Counts {
    uint64_t window = 0, pass = 0, batch = 0;
    uint64_t window_weight = 0, batch_weight = 0;
    bool exact = true;
  };
  // Does not change the window.
  Counts CountWith(const uint64_t* keys, size_t n);
  // CountWith(keys, n).window.
  uint64_t DistinctWith(const uint64_t* keys, size_t n) { return CountWith(keys, n).window; }
  // Adds keys[0, n) to the current pass.
  void Add(const uint64_t* keys, size_t n);
  // Add(keys, n). When keys[0, n) is the array the last CountWith counted, unchanged since
  // (a NextPass in between is fine), it adds that call's distinct keys through the map
  // entries it found, so that a minibatch counted and then added is looked up once.
  void AddCounted(const uint64_t* keys, size_t n);
  // CountWith(keys, n) again. When keys[0, n) is the array the last CountWith counted,
  // unchanged since, and nothing was added since (NextPass is fine), that call's distinct keys
  // and the map buckets it found are reused: a minibatch judged again (it would have overfilled
  // the pass before, and now starts the next one) is neither deduplicated nor looked up twice.
  Counts Recount(const uint64_t* keys, size_t n);
  // Ends the current pass and begins the next; the oldest pass leaves the window.
  void NextPass();

  // Distinct keys of the passes in the window, and their summed weight (where the map is not
  // kept, the sums of each pass's: upper bounds).
  uint64_t distinct() const { return mapped_ ? distinct_ : bound_; }
  uint64_t distinct_weight() const { return mapped_ ? distinct_weight_ : bound_weight_; }
  // Distinct keys of the current pass alone.
  uint64_t current() const;
  // Whether the window's map is kept now (its counts exact).
  bool mapped() const { return mapped_; }

 private:
  // Bucket of `key` in the map: its entry, or the empty bucket where it would go.
  size_t Find(uint64_t key) const;
  void Rebuild(size_t capacity);
  // Records a use of `key` by `pass` (the current one, or an older one while BuildMap replays
  // the window) in the map; bucket: Find(key) of the current map. Returns whether the key is
  // new to that pass.
  bool AddAt(uint64_t key, size_t bucket, uint32_t pass);
  // Builds the map from the window's passes' key lists, oldest first.
  void BuildMap();
  bool NeedExact(uint64_t keys, uint64_t weight) const {
    return keys > exact_above_.keys || weight > exact_above_.weight;
  }
  // The current pass's set (without the map): the bucket of `key`, its own or the empty one.
  size_t SetFind(uint64_t key) const;
  // Adds `key` to the current pass's set and list (and to the bounds) unless it is there.
  void SetAdd(uint64_t key);
  // Adds one key the map's bucket holds or awaits to the current pass, and to its list.
  void MapAdd(uint64_t key, size_t bucket);
  // Appends a key new to the current pass to its list, and to the bounds.
  void ListAdd(uint64_t key);
  // The counts of counted_keys_ against the window, each key found in the map, or (reuse) at
  // its bucket in counted_buckets_ (found then by a CountWith in this map generation, with
  // nothing added since); counted_buckets_ becomes what was found.
  Counts CountCounted(bool reuse);
  bool InWindow(uint32_t pass) const { return pass != 0 && pass + passes_ > pass_; }
  uint64_t Weight(uint64_t key) const {
    return weights_.empty() ? 1 : weights_[key >> kTableShift];
  }

  const uint32_t passes_;
  const Exactness exact_above_;
  bool mapped_ = false;  // the map (keys_, last_, per_pass_, distinct_) is kept
  uint32_t pass_ = 1;    // the current pass (0 marks an empty map bucket)
  // Always kept: each pass's distinct keys (a ring of passes_ lists) and their summed weight,
  // and the sums over the window (the bounds).
  std::vector<std::vector<uint64_t>> pass_keys_;
  std::vector<uint64_t> pass_weight_;
  uint64_t bound_ = 0, bound_weight_ = 0;
  // The current pass's set where the map is not kept: a bucket holds a key of this pass when
  // its pass is pass_ (so a new pass starts empty without a clear).
  struct SetSlot {
    uint64_t key = 0;
    uint32_t pass = 0;
  };
  std::vector<SetSlot> set_;
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> last_;      // per map bucket: the last pass that used the key; 0: empty
  size_t used_ = 0;                 // map buckets in use (window keys and stale ones)
  std::vector<uint64_t> per_pass_;  // ring of passes_: keys whose last use is that pass
  std::vector<uint64_t> per_pass_weight_;  // ... and their summed weight
  uint64_t distinct_ = 0, distinct_weight_ = 0;
  std::vector<uint64_t> weights_;  // per table (empty: every key 1)
  std::vector<SetSlot> scratch_;   // CountWith's own dedup: a slot is used if its pass is the stamp
  uint32_t scratch_stamp_ = 0;
  // The last CountWith's distinct keys and the map bucket each was found in (kAbsent: none),
  // valid while the map's generation is the one they were found in (a rebuild moves them).
  static constexpr size_t kAbsent = ~size_t{0};
  const uint64_t* counted_from_ = nullptr;  // the array and size the last CountWith counted
  size_t counted_n_ = 0;
  std::vector<uint64_t> counted_keys_;
  std::vector<size_t> counted_buckets_;
  uint64_t counted_generation_ = ~uint64_t{0};  // (none: the last count had no map)
  bool recountable_ = false;                    // nothing was added since the last CountWith
  uint64_t generation_ = 0;                     // map rebuilds (and builds and drops) so far
};

}  // namespace ctrbox

#endif  // CTRBOX_PIPELINE_KEY_WINDOW_H_
