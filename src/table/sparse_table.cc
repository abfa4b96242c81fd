#include "table/sparse_table.h"

#include <fmt/format.h>

namespace ctrbox {

std::string StorageStats::DebugString() const {
  return fmt::format(
      "disk={} budget={} memory={} peak={} pulled={} hits={} loaded={} new={} lookup_misses={} "
      "group_bits={} no_record={} bloom_prunes={} bloom_fp={} records_read={} read_retries={} "
      "bytes_read={} records_written={} bytes_written={} groups_written={} new_deltas={} merges={} "
      "evicted_dirty={} "
      "evicted_clean={} dropped_fresh={} evict_rounds={} compactions={} compaction_bytes={} "
      "files={} file_bytes={} live_bytes={} keys_on_disk={} index_bytes={} bloom_bytes={}",
      has_disk, memory_budget, memory_bytes, peak_memory_bytes, pulled_keys, hits, loaded_from_ssd,
      new_keys, lookup_misses, group_bits, no_record, bloom_prunes, bloom_false_positives,
      records_read, read_retries, ssd_bytes_read, records_written, ssd_bytes_written,
      groups_written, new_deltas, merges, evicted_dirty, evicted_clean, dropped_fresh, evict_rounds,
      compactions, compaction_bytes, files, file_bytes, live_bytes, keys_on_disk, index_bytes,
      bloom_bytes);
}

}  // namespace ctrbox
