// TieredTable (table/tiered_table.h): whole-table operations: shrink, export, digest, counts,
// statistics, flush, evict and compact everything, close.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "table/tiered_table.h"
#include "table/tiered_table_internal.h"
#include "util/coding.h"
#include "util/hash.h"

namespace ctrbox {

// ---- whole-table operations ------------------------------------------------------------------

namespace {

// Rows a digesting thread holds at once (the digest sums each row's checksum: any block works).
constexpr size_t kDigestBlockRows = 4096;

// Calls f(view, j) for the newest disk version of every key of a group: the delta's rows,
// then the older delta's rows the delta does not override, then the base rows neither
// overrides.
template <typename F>
void ForEachDiskRow(const RecordView& base, const RecordView& older, const RecordView& delta, F f) {
  std::vector<uint64_t> delta_keys = delta.keys;
  std::sort(delta_keys.begin(), delta_keys.end());
  for (size_t j = 0; j < delta.rows(); ++j) f(delta, j);
  for (size_t j = 0; j < older.rows(); ++j) {
    if (!std::binary_search(delta_keys.begin(), delta_keys.end(), older.keys[j])) f(older, j);
  }
  delta_keys.insert(delta_keys.end(), older.keys.begin(), older.keys.end());
  std::sort(delta_keys.begin(), delta_keys.end());
  for (size_t j = 0; j < base.rows(); ++j) {
    if (!std::binary_search(delta_keys.begin(), delta_keys.end(), base.keys[j])) f(base, j);
  }
}

}  // namespace

StatusOr<uint64_t> TieredTable::Shrink(const CtrAccessor& accessor, ThreadPool* pool,
                                       std::vector<uint64_t>* deleted_keys) {
  RETURN_IF_ERROR(error());
  MutexLock writer(&writer_mu_);
  std::vector<uint64_t> deleted(stripes_.size(), 0);
  std::vector<std::vector<uint64_t>> keys(deleted_keys != nullptr ? stripes_.size() : 0);
  std::vector<Status> status(stripes_.size());
  auto shrink_stripe = [&](size_t s, int) {
    CacheStripe& stripe = *stripes_[s];
    CacheStripe::Lock lock(stripe);
    RowBlock row(options_.layout);
    row.Resize(1);
    // Shrinks a resident row; erases it (if unpinned) when the accessor rejects it. Returns
    // whether it is still there.
    auto shrink_resident = [&](uint32_t node) {
      stripe.AssertLocked();
      stripe.ReadRow(node, &row, 0);
      if (accessor.ShrinkRow(&row.show(0), &row.click(0), &row.unseen(0))) {
        stripe.WriteRow(node, row, 0);
        stripe.set_state(node, stripe.meta(node).state | kDirty);
        return true;
      }
      if (stripe.meta(node).pins > 0) return true;
      if (deleted_keys != nullptr) keys[s].push_back(stripe.key(node));
      stripe.Erase(node);
      ++deleted[s];
      return false;
    };
    std::unordered_map<uint32_t, std::vector<uint32_t>> resident;  // group -> nodes
    stripe.ForEachNode([&](uint32_t node) {
      stripe.AssertLocked();
      if (stripe.meta(node).state & kFresh) return;
      resident[ssd_ ? ssd_->GroupOf(stripe.key(node)) : 0].push_back(node);
    });
    if (!ssd_) {
      for (const auto& [g, nodes] : resident) {
        for (uint32_t node : nodes) shrink_resident(node);
      }
      Account(stripe, s);
      return;
    }
    // Every row changes: every group of the stripe gets a new base holding its surviving rows
    // (disk rows not in memory, shrunk here, and the resident rows, shrunk in memory).
    const uint32_t shift = ssd_->group_bits() - options_.stripe_bits;
    const uint32_t first = static_cast<uint32_t>(s) << shift, last = (static_cast<uint32_t>(s) + 1)
                                                                     << shift;
    RecordView base, older, delta;
    RecordBuilder builder;
    std::vector<std::pair<uint32_t, GroupEntry>> updates;
    std::vector<uint32_t> written;
    for (uint32_t g = first; g < last; ++g) {
      const GroupEntry e = ssd_->entry(g);
      auto it = resident.find(g);
      if (!e.base.exists() && !e.delta.exists() && !e.older.exists() && it == resident.end())
        continue;
      status[s] = ssd_->Read(e.base, g, &base);
      if (status[s].ok()) status[s] = ssd_->Read(e.older, g, &older);
      if (status[s].ok()) status[s] = ssd_->Read(e.delta, g, &delta);
      if (!status[s].ok()) return;
      builder.Reset(g);
      ForEachDiskRow(base, older, delta, [&](const RecordView& v, size_t j) {
        stripe.AssertLocked();
        if (!status[s].ok() || stripe.Find(v.keys[j]) != kNoNode) return;  // resident: newer
        status[s] = v.DecodeRow(j, &row, 0);
        if (!status[s].ok()) return;
        if (accessor.ShrinkRow(&row.show(0), &row.click(0), &row.unseen(0))) {
          builder.AddRow(row, 0);
        } else {
          if (deleted_keys != nullptr) keys[s].push_back(v.keys[j]);
          ++deleted[s];
        }
      });
      if (!status[s].ok()) return;
      if (it != resident.end()) {
        for (uint32_t node : it->second) {
          if (!shrink_resident(node)) continue;
          stripe.ReadRow(node, &row, 0);
          builder.AddRow(row, 0);
          written.push_back(node);
        }
      }
      GroupEntry next;
      if (builder.rows() > 0) {
        status[s] = ssd_->Append(&builder, &next.base, &next.base_fences);
        if (!status[s].ok()) return;
        counters_->shrink_bytes.fetch_add(next.base.length, std::memory_order_relaxed);
        next.base_rows = next.unique_rows = static_cast<uint32_t>(builder.rows());
        next.unique_emb = builder.emb_rows();
      }
      updates.emplace_back(g, next);
    }
    status[s] = ssd_->FlushAppends();
    if (!status[s].ok()) return;
    for (const auto& [g, e] : updates) ssd_->Replace(g, e);
    for (uint32_t node : written) {
      NodeMeta& m = stripe.meta(node);
      stripe.set_state(
          node, (m.state & ~(kDirty | kDiskEmb)) | kOnDisk | (stripe.has_emb(node) ? kDiskEmb : 0));
    }
    Account(stripe, s);
  };
  if (ssd_) {
    for (size_t s = 0; s < stripes_.size(); ++s) shrink_stripe(s, 0);  // one writer at a time
  } else {
    RunParallel(pool, stripes_.size(), shrink_stripe);
  }
  uint64_t total = 0;
  for (size_t s = 0; s < stripes_.size(); ++s) {
    RETURN_IF_ERROR(status[s]);
    total += deleted[s];
    if (deleted_keys != nullptr)
      deleted_keys->insert(deleted_keys->end(), keys[s].begin(), keys[s].end());
  }
  return total;
}

Status TieredTable::ExportStripeBlocks(size_t s, size_t block_rows, RowBlock* buf,
                                       const std::function<Status(RowBlock&)>& sink) {
  assert(block_rows > 0);
  RETURN_IF_ERROR(error());
  CacheStripe& stripe = *stripes_[s];
  buf->Resize(0);
  Status st;
  // Row r of the block is filled by fill(r); a full block goes to the sink.
  auto add = [&](const auto& fill) {
    if (!st.ok()) return;
    const size_t r = buf->size();
    buf->Resize(r + 1);
    st = fill(r);
    if (st.ok() && buf->size() == block_rows) {
      st = sink(*buf);
      buf->Resize(0);
    }
  };
  CacheStripe::Lock lock(stripe);
  if (ssd_) {
    const uint32_t shift = ssd_->group_bits() - options_.stripe_bits;
    RecordView base, older, delta;
    for (uint32_t g = static_cast<uint32_t>(s) << shift;
         g < (static_cast<uint32_t>(s) + 1) << shift; ++g) {
      const GroupEntry e = ssd_->entry(g);
      if (!e.base.exists() && !e.delta.exists() && !e.older.exists()) continue;
      RETURN_IF_ERROR(ssd_->Read(e.base, g, &base));
      RETURN_IF_ERROR(ssd_->Read(e.older, g, &older));
      RETURN_IF_ERROR(ssd_->Read(e.delta, g, &delta));
      ForEachDiskRow(base, older, delta, [&](const RecordView& v, size_t j) {
        stripe.AssertLocked();
        if (stripe.Find(v.keys[j]) != kNoNode) return;  // the resident row is newer
        add([&](size_t r) { return v.DecodeRow(j, buf, r); });
      });
      RETURN_IF_ERROR(st);
    }
  }
  stripe.ForEachNode([&](uint32_t node) {
    stripe.AssertLocked();
    if (stripe.meta(node).state & kFresh) return;
    add([&](size_t r) {
      stripe.AssertLocked();
      stripe.ReadRow(node, buf, r);
      return Status::OK();
    });
  });
  RETURN_IF_ERROR(st);
  if (buf->size() > 0) RETURN_IF_ERROR(sink(*buf));
  buf->Resize(0);
  return Status::OK();
}

StatusOr<uint64_t> TieredTable::SparseDigest(ThreadPool* pool) {
  std::vector<uint64_t> sums(stripes_.size(), 0);
  std::vector<Status> status(stripes_.size());
  RunParallel(pool, stripes_.size(), [&](size_t s, int) {
    RowBlock rows(options_.layout);
    std::string enc;
    status[s] = ExportStripeBlocks(s, kDigestBlockRows, &rows, [&](RowBlock& block) {
      for (size_t i = 0; i < block.size(); ++i) {
        enc.clear();
        block.EncodeRow(i, &enc);
        sums[s] += Checksum64(enc);
      }
      return Status::OK();
    });
  });
  uint64_t total = 0;
  for (size_t s = 0; s < stripes_.size(); ++s) {
    RETURN_IF_ERROR(status[s]);
    total += sums[s];
  }
  return total;
}

uint64_t TieredTable::CountKeys() const {
  // Each stripe's rows only memory holds, and the distinct keys of its groups' records, read
  // under the stripe's lock: a write-back moves a row from one count to the other under that
  // lock, so nothing is counted twice or missed.
  // (The store keeps each stripe's sum: walking the group index per pass, 11 MB at 2^17
  // groups, took 1.2 CPU-s of the 12 M-key 10 % job and its memory bandwidth.)
  uint64_t keys = 0;
  for (size_t s = 0; s < stripes_.size(); ++s) {
    const CacheStripe& stripe = *stripes_[s];
    CacheStripe::Lock l(stripe);
    keys += stripe.memory_only_rows();
    if (ssd_) keys += ssd_->UniqueRowsOfStripe(s);
  }
  return keys;
}

TableStats TieredTable::Stats() const {
  // A row written back between counting its stripe and counting the files would count twice.
  MutexLock writer(&writer_mu_);
  const ValueLayout& l = options_.layout;
  TableStats st;
  int64_t value = 0, emb = 0, keys = 0;
  uint64_t allocated = 0;
  for (const auto& sp : stripes_) {
    const CacheStripe& stripe = *sp;
    CacheStripe::Lock lock(stripe);
    allocated += stripe.AllocatedBytes();
    [[maybe_unused]] const int64_t keys_before = keys;
    stripe.ForEachNode([&](uint32_t node) {
      stripe.AssertLocked();
      const uint8_t state = stripe.meta(node).state;
      if (state & kFresh) return;
      ++st.keys_in_memory;
      const bool has = stripe.has_emb(node);
      const uint64_t key = stripe.key(node);
      // Count the row's memory version instead of its disk version (if any).
      keys += (state & kOnDisk) ? 0 : 1;
      emb += (has ? 1 : 0) - ((state & kDiskEmb) ? 1 : 0);
      value += static_cast<int64_t>(l.EncodedBytesOf(key, has) - 8) -
               ((state & kOnDisk)
                    ? static_cast<int64_t>(l.EncodedBytesOf(key, (state & kDiskEmb) != 0) - 8)
                    : 0);
    });
    // The stripe's running count (CountKeys) agrees with the scan.
    assert(keys - keys_before == static_cast<int64_t>(stripe.memory_only_rows()));
  }
  if (ssd_) {
    const DiskStats d = ssd_->Stats();
    st.keys_on_disk = d.rows;
    keys += static_cast<int64_t>(d.rows);
    emb += static_cast<int64_t>(d.emb_rows);
    value += static_cast<int64_t>(d.value_bytes);
  }
  st.keys = static_cast<uint64_t>(keys);
  st.keys_with_emb = static_cast<uint64_t>(emb);
  st.value_bytes = static_cast<uint64_t>(value);
  st.memory_bytes = allocated + (ssd_ ? ssd_->MemoryBytes() : 0);
  return st;
}

StorageStats TieredTable::Storage() const {
  const Counters& c = *counters_;
  StorageStats r;
  r.has_disk = ssd_ != nullptr;
  r.memory_budget = options_.memory_budget;
  r.memory_bytes = UsedBytes();
  r.peak_memory_bytes = peak_used_.load();
#define CTRBOX_LOAD_COUNTER(name, in_pass_lines) r.name = c.name.load();
  CTRBOX_CACHE_COUNTERS(CTRBOX_LOAD_COUNTER)
  const CacheMemory m = CacheBreakdown();
  r.cache_row_bytes = m.rows;
  r.cache_index_bytes = m.index;
  r.cache_meta_bytes = m.meta;
  if (!ssd_) return r;
  const DiskStats d = ssd_->Stats();
  r.group_bits = ssd_->group_bits();
  r.direct_reads = d.direct_reads;
  r.mapped_reads = d.mapped_reads;
  CTRBOX_SSD_COUNTERS(CTRBOX_LOAD_COUNTER)
#undef CTRBOX_LOAD_COUNTER
  r.records_read = d.records_read;
  r.read_retries = d.read_retries;
  r.ssd_bytes_read = d.bytes_read;
  r.ssd_read_nanos = d.read_nanos;
  r.records_written = d.records_written;
  r.ssd_bytes_written = d.bytes_written;
  r.files_recycled = d.files_recycled;
  r.mapped_records_read = d.mapped_records_read;
  r.read_path_switches = d.read_path_switches;
  r.device_read_switches = d.device_read_switches;
  r.free_file_bytes = d.free_file_bytes;
  r.files = d.files;
  r.file_bytes = d.file_bytes;
  r.live_bytes = d.live_bytes;
  r.keys_on_disk = d.rows;
  r.index_bytes = d.index_bytes;
  r.bloom_bytes = d.bloom_bytes;
  return r;
}

Status TieredTable::FlushAll() {
  if (!ssd_) return Status::OK();
  MutexLock writer(&writer_mu_);
  for (size_t s = 0; s < stripes_.size(); ++s) RETURN_IF_ERROR(FlushStripe(s));
  return Status::OK();
}

Status TieredTable::EvictAll() {
  if (!ssd_) return Status::OK();
  MutexLock writer(&writer_mu_);
  for (size_t s = 0; s < stripes_.size(); ++s) RETURN_IF_ERROR(EvictStripe(s, 0, true).status());
  return Status::OK();
}

Status TieredTable::Compact(double stale_fraction) {
  if (!ssd_) return Status::OK();
  MutexLock writer(&writer_mu_);
  for (const auto& f : ssd_->CompactionCandidates(stale_fraction)) RETURN_IF_ERROR(CompactFile(f));
  return Status::OK();
}

Status TieredTable::Close() {
  {
    MutexLock l(&worker_mu_);
    stop_ = true;
  }
  worker_cv_.SignalAll();
  if (worker_.joinable()) worker_.join();
  RETURN_IF_ERROR(error());
  if (!ssd_ || closed_) return Status::OK();
  for (const auto& sp : stripes_) {
    const CacheStripe& stripe = *sp;
    CacheStripe::Lock l(stripe);
    bool pinned = false;
    stripe.ForEachNode([&](uint32_t n) {
      stripe.AssertLocked();
      pinned |= stripe.meta(n).pins > 0;
    });
    if (pinned) return FailedPreconditionError("closing a table with rows still pinned");
  }
  RETURN_IF_ERROR(FlushAll());
  MutexLock writer(&writer_mu_);
  // The final write-back leaves stale records behind: keep the file-size bound on disk too.
  RETURN_IF_ERROR(CompactIfOver());
  RETURN_IF_ERROR(ssd_->WriteIndex());
  closed_ = true;
  return Status::OK();
}

}  // namespace ctrbox
