#include "table/sparse_table.h"

#include <fmt/format.h>

namespace ctrbox {

Status SparseTable::ExportStripe(size_t s, RowBlock* out) {
  out->Resize(0);
  RowBlock block(layout());
  constexpr size_t kBlockRows = 65536;
  return ExportStripeBlocks(s, kBlockRows, &block, [&](RowBlock& rows) {
    for (size_t i = 0; i < rows.size(); ++i) out->AppendRow(rows, i);
    return Status::OK();
  });
}

std::string StorageStats::DebugString() const {
  std::string s = fmt::format("disk={} budget={} memory={} peak={}", has_disk, memory_budget,
                              memory_bytes, peak_memory_bytes);
#define CTRBOX_STORAGE_DEBUG(name, in_pass_lines) s += fmt::format(" " #name "={}", name);
  CTRBOX_CACHE_COUNTERS(CTRBOX_STORAGE_DEBUG)
  s += fmt::format(" group_bits={}", group_bits);
  CTRBOX_SSD_COUNTERS(CTRBOX_STORAGE_DEBUG)
  CTRBOX_DISK_COUNTERS(CTRBOX_STORAGE_DEBUG)
#undef CTRBOX_STORAGE_DEBUG
  return s + fmt::format(
                 " files={} file_bytes={} free_file_bytes={} live_bytes={} keys_on_disk={} "
                 "index_bytes={} bloom_bytes={}",
                 files, file_bytes, free_file_bytes, live_bytes, keys_on_disk, index_bytes,
                 bloom_bytes);
}

}  // namespace ctrbox
