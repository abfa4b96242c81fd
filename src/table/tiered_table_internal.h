// TieredTable's internals shared by its source files (table/tiered_table.h declares the class;
// its code is split by concern: tiered_table.cc opening, options and accounting,
// tiered_table_pull.cc pull, push and insert, tiered_table_writeback.cc writing groups back,
// eviction and compaction, tiered_table_worker.cc the background worker, tiered_table_scan.cc
// whole-table operations). Include only from those files.
#ifndef CTRBOX_TABLE_TIERED_TABLE_INTERNAL_H_
#define CTRBOX_TABLE_TIERED_TABLE_INTERNAL_H_

#include <atomic>
#include <memory>
#include <vector>

#include "table/tiered_table.h"

namespace ctrbox {

// A group record a pull has to read: the keys it wants from it and, once read, those rows.
struct TieredTable::Load {
  uint32_t group = 0;
  GroupEntry entry;  // the group's records when the pull looked
  // The files of its records, taken under the stripe lock: kept alive.
  std::shared_ptr<ParamFile> base_file, delta_file, older_file;
  std::vector<uint32_t> idx;  // positions in the pull of the keys wanted from this group
  // Row first + w of the pull's LoadedRows: the newest disk version of key idx[w], if found.
  uint32_t first = 0;
  Status status;
};

struct TieredTable::Counters {
  std::atomic<uint64_t> pulled{0}, hits{0}, loaded{0}, new_keys{0}, lookup_misses{0};
  std::atomic<uint64_t> no_record{0}, bloom_prunes{0}, bloom_false_positives{0};
  std::atomic<uint64_t> evicted_dirty{0}, evicted_clean{0}, dropped_fresh{0};
  std::atomic<uint64_t> evict_rounds{0}, groups_written{0}, compactions{0}, compaction_bytes{0};
  std::atomic<uint64_t> new_deltas{0}, merges{0};
  std::atomic<uint64_t> rows_persisted{0}, persisted_bytes{0};  // dirty rows written back
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_TIERED_TABLE_INTERNAL_H_
