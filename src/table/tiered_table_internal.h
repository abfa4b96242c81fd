// TieredTable's internals shared by its source files (table/tiered_table.h declares the class;
// its code is split by concern: tiered_table.cc opening, options and accounting,
// tiered_table_pull.cc pull, push and insert, tiered_table_writeback.cc writing groups back,
// eviction and compaction, tiered_table_worker.cc the background worker, tiered_table_scan.cc
// whole-table operations). Include only from those files.
#ifndef CTRBOX_TABLE_TIERED_TABLE_INTERNAL_H_
#define CTRBOX_TABLE_TIERED_TABLE_INTERNAL_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "table/tiered_table.h"

namespace ctrbox {

// A key a pull wants from a group's records: its position in the pull, and the first of the
// group entry's records (0 delta, 1 older, 2 base: newest first) whose filters said it may
// hold the key when the pull asked (the newer ones said no), so that the read need not ask
// them again while the entry is that one.
struct WantedKey {
  uint32_t i = 0;
  uint32_t first_maybe = 0;
};

// A group record a pull has to read: the keys it wants from it and, once read, those rows.
struct TieredTable::Load {
  uint32_t group = 0;
  GroupEntry entry;  // the group's records when the pull looked
  // The files of its records, taken under the stripe lock: kept alive.
  std::shared_ptr<ParamFile> base_file, delta_file, older_file;
  std::vector<WantedKey> idx;  // the keys wanted from this group
  // Row first + w of the pull's LoadedRows: the newest disk version of key idx[w], if found.
  uint32_t first = 0;
  Status status;
};

// The table's counters (sparse_table.h's lists), bumped by any thread.
struct TieredTable::Counters {
#define CTRBOX_ATOMIC_COUNTER(name, in_pass_lines) std::atomic<uint64_t> name{0};
  CTRBOX_CACHE_COUNTERS(CTRBOX_ATOMIC_COUNTER)
  CTRBOX_SSD_COUNTERS(CTRBOX_ATOMIC_COUNTER)
#undef CTRBOX_ATOMIC_COUNTER
};

// 2^(-age / half_life): the ageing of the LFU priority by the pulls (passes) since a row's
// last one (docs/storage.md, "The LFU chain"; TieredOptions::lfu_half_life).
float AgeFactor(uint16_t age, double half_life);

// Whether evicting a row in this state writes it back (dirty, or pushed and never written).
bool WritesBack(uint8_t state);

// An eviction round's lone victims (TieredOptions::min_group_victims; docs/storage.md, "Lone
// victims spared"): a group whose dirty victims number fewer than min_victims would be
// rewritten (its old delta read, a record written) for one or two rows. Spares them while
// clean rows ranked next, with a priority at most twice the round's threshold, can leave in
// their place (a clean row leaves without a write): those are taken (`take`) and marked in
// *taken (indexed from candidates[k]); the spared victims leave *victims and *dirty_groups
// (victim keys; group -> its dirty victims, by group_of). candidates[0, k) are the round's
// victims (ranked), priority[v] is candidates[v]'s. Returns the victims spared.
size_t SpareLoneVictims(const CacheStripe& stripe,
                        const std::function<uint32_t(uint64_t)>& group_of, uint32_t min_victims,
                        const std::vector<uint32_t>& candidates, const std::vector<float>& priority,
                        size_t k, float threshold, std::vector<uint64_t>* victims,
                        std::unordered_map<uint32_t, uint32_t>* dirty_groups,
                        std::vector<uint8_t>* taken, const std::function<void(uint32_t)>& take)
    REQUIRES(stripe);

// Adds the nanoseconds of its lifetime to a counter (a wait's, or a phase's, however it ends).
class NanosInto {
 public:
  explicit NanosInto(std::atomic<uint64_t>* sum) : sum_(sum) {}
  NanosInto(const NanosInto&) = delete;
  NanosInto& operator=(const NanosInto&) = delete;
  ~NanosInto() {
    sum_->fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::steady_clock::now() - start_)
                                              .count()),
                    std::memory_order_relaxed);
  }

 private:
  std::atomic<uint64_t>* sum_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_TIERED_TABLE_INTERNAL_H_
