// TieredTable (table/tiered_table.h): writing groups back to the SSD files (base and delta
// records), eviction by LFU priority and flushes.
#include <fmt/format.h>

#include <algorithm>
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
namespace {

// A write-back batch holds at most this many groups and, past its first group, this many
// bytes of old records: it bounds the records held in memory per evicting thread.
constexpr size_t kGroupsPerBatch = 256;
constexpr uint64_t kBatchBytes = 1 << 20;

// The end of the batch of reads that starts at b.
template <typename Read>
size_t BatchEnd(const std::vector<Read>& reads, size_t b) {
  size_t e = b + 1;
  uint64_t bytes = reads[b].bytes;
  while (e < reads.size() && e - b < kGroupsPerBatch && bytes + reads[e].bytes <= kBatchBytes) {
    bytes += reads[e++].bytes;
  }
  return e;
}

// Orders write-back reads by group (RowsToWrite and WriteGroups take them so).
template <typename Read>
bool GroupBefore(const Read& a, const Read& b) {
  return a.group < b.group;
}
template <typename Read>
void SortByGroup(std::vector<Read>* reads) {
  std::sort(reads->begin(), reads->end(), GroupBefore<Read>);
}

// Makes *batch the reads [b, end): what to read of each group. The elements already there are
// reused, so the record buffers a batch read into keep their capacity for the next one (a
// fresh batch allocated and freed ~8 KB per record read). Whether a base was read is set by
// each read (ReadGroupRecords), and a record not read is not used.
template <typename Read>
void TakeBatch(const std::vector<Read>& reads, size_t b, size_t end, std::vector<Read>* batch) {
  batch->resize(end - b);
  for (size_t i = b; i < end; ++i) {
    Read& r = (*batch)[i - b];
    r.group = reads[i].group;
    r.want_base = reads[i].want_base;
    r.want_delta = reads[i].want_delta;
    r.bytes = reads[i].bytes;
    r.have_base = false;
  }
}

// The LFU priority of an unpinned row (docs/storage.md): its show counter, halved for every
// options.lfu_half_life passes since its last pull, and multiplied by options.dirty_weight if
// evicting it writes it back (a clean row leaves for free). Rows with the lowest priority are
// evicted first. factors holds 2^(-age / half_life) for the ages most rows have (an eviction
// round ranks every unpinned row of a stripe, and exp2 was ~1 % of store_bench's CPU).
float Priority(const CacheStripe& stripe, uint32_t node, uint16_t now,
               const std::vector<float>& factors, const TieredOptions& options) REQUIRES(stripe) {
  const NodeMeta& m = stripe.meta(node);
  const uint16_t age = static_cast<uint16_t>(now - m.epoch);
  const float p = stripe.show(node) *
                  (age < factors.size() ? factors[age] : AgeFactor(age, options.lfu_half_life));
  return WritesBack(m.state) ? p * static_cast<float>(options.dirty_weight) : p;
}

}  // namespace

// Whether a write-back writes a row in this state: resident, not fresh, dirty or not on disk.
bool WritesBack(uint8_t st) { return !(st & kFresh) && ((st & kDirty) || !(st & kOnDisk)); }

// ---- writing groups back -------------------------------------------------------------------

TieredTable::GroupFiles TieredTable::FilesOf(const CacheStripe& stripe, uint32_t group) const {
  GroupFiles f;
  f.entry = ssd_->entry(group);
  if (f.entry.delta.exists()) f.delta_file = ssd_->File(f.entry.delta.file);
  if (f.entry.older.exists()) f.older_file = ssd_->File(f.entry.older.file);
  if (f.entry.base.exists()) f.base_file = ssd_->File(f.entry.base.file);
  return f;
}

Status TieredTable::ReadGroupRecords(const GroupFiles& f, GroupRead* r) const {
  const GroupEntry& e = f.entry;
  r->delta.Clear();
  if (e.delta.exists() && r->want_delta) {
    if (!f.delta_file) return InternalError("a group record's file disappeared");
    RETURN_IF_ERROR(ssd_->ReadRecord(*f.delta_file, e.delta, r->group, &r->delta));
    counters_->writeback_reads.fetch_add(1, std::memory_order_relaxed);
  }
  r->older.Clear();
  r->have_base = r->want_base && e.base.exists();
  if (r->have_base) {
    if (!f.base_file) return InternalError("a group record's file disappeared");
    RETURN_IF_ERROR(ssd_->ReadRecord(*f.base_file, e.base, r->group, &r->base));
    counters_->writeback_reads.fetch_add(1, std::memory_order_relaxed);
    if (e.older.exists()) {
      if (!f.older_file) return InternalError("a group record's file disappeared");
      RETURN_IF_ERROR(ssd_->ReadRecord(*f.older_file, e.older, r->group, &r->older));
      counters_->writeback_reads.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return Status::OK();
}

Status TieredTable::ReadGroups(const CacheStripe& stripe, std::vector<GroupRead>* reads) {
  const NanosInto timed(&counters_->writeback_read_nanos);
  std::vector<GroupFiles> files(reads->size());
  {
    CacheStripe::Lock lock(stripe);
    for (size_t i = 0; i < reads->size(); ++i) files[i] = FilesOf(stripe, (*reads)[i].group);
  }
  // The batch's groups are read one at a time while the reads come from the page cache (a few
  // µs each: handing them to a pool's threads cost more than it saved on 2 cores); once the
  // batch's reads so far average more than options_.parallel_read_us, they come from the
  // device, and the rest are read storage.device_io_threads at a time (a write-back reading one
  // record at a time there kept the pulls waiting for room).
  const auto start = std::chrono::steady_clock::now();
  const double slow_nanos = options_.parallel_read_us * 1e3;
  size_t i = 0;
  while (i < reads->size()) {
    RETURN_IF_ERROR(ReadGroupRecords(files[i], &(*reads)[i]));
    ++i;
    const auto spent = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - start)
                           .count();
    if (writeback_io_pool_ && static_cast<double>(spent) >= slow_nanos * static_cast<double>(i))
      break;
  }
  if (i == reads->size()) return Status::OK();
  const size_t first = i;
  const bool parallel = reads->size() - first > 1;  // one read left: the caller reads it
  if (parallel) counters_->parallel_writeback_batches.fetch_add(1, std::memory_order_relaxed);
  std::vector<Status> status(reads->size() - first);
  RunParallel(parallel ? writeback_io_pool_.get() : nullptr, status.size(), [&](size_t j, int) {
    status[j] = ReadGroupRecords(files[first + j], &(*reads)[first + j]);
  });
  for (const Status& st : status) RETURN_IF_ERROR(st);
  return Status::OK();
}

Status TieredTable::ReadGroupsLocked(const CacheStripe& stripe, std::vector<GroupRead>* reads) {
  const NanosInto timed(&counters_->writeback_read_nanos);
  for (GroupRead& r : *reads) RETURN_IF_ERROR(ReadGroupRecords(FilesOf(stripe, r.group), &r));
  return Status::OK();
}

namespace {

bool Contains(const std::vector<uint64_t>& sorted, uint64_t key) {
  return std::binary_search(sorted.begin(), sorted.end(), key);
}

// How a group write lays out its new record (docs/storage.md, "Base and delta records"): grow
// the delta; or, once full, move it aside as the older delta and start a new one of the dirty
// rows; or, with an older delta there already, merge all into a new base.
enum class GroupWrite { kDelta, kNewDelta, kMerge };

// Adds to `builder` the rows of the old records that a write `how` keeps: for a merge, the
// base's rows no delta overrides (base: null without one) and the older delta's the delta does
// not override; unless it starts a new delta, the delta's rows the dirty ones do not override.
// dirty_keys: sorted; newer_keys: scratch.
void AddKeptRows(GroupWrite how, const RecordView& delta, const RecordView& older,
                 const RecordView* base, const std::vector<uint64_t>& dirty_keys,
                 std::vector<uint64_t>* newer_keys, RecordBuilder* builder) {
  if (how == GroupWrite::kMerge) {
    *newer_keys = delta.keys;
    newer_keys->insert(newer_keys->end(), dirty_keys.begin(), dirty_keys.end());
    std::sort(newer_keys->begin(), newer_keys->end());
    for (size_t j = 0; j < older.rows(); ++j) {
      if (!Contains(*newer_keys, older.keys[j])) builder->AddEncoded(older.row(j), older.keys[j]);
    }
    newer_keys->insert(newer_keys->end(), older.keys.begin(), older.keys.end());
    std::sort(newer_keys->begin(), newer_keys->end());
    for (size_t j = 0; base != nullptr && j < base->rows(); ++j) {
      if (!Contains(*newer_keys, base->keys[j])) builder->AddEncoded(base->row(j), base->keys[j]);
    }
  }
  if (how != GroupWrite::kNewDelta) {
    for (size_t j = 0; j < delta.rows(); ++j) {
      if (!Contains(dirty_keys, delta.keys[j])) builder->AddEncoded(delta.row(j), delta.keys[j]);
    }
  }
}

// The group's entry once the record `builder` laid out is at `loc`: a merge's new base alone,
// or the old entry (`counted`: its unique row and embedding counts updated for the dirty rows)
// with the new delta, the old delta moved aside as the older one if the write started a new one.
GroupEntry EntryAfter(GroupWrite how, const GroupEntry& old, GroupEntry counted,
                      const RecordLoc& loc, const Fences& fences, const RecordBuilder& builder) {
  if (how == GroupWrite::kMerge) {
    GroupEntry next;
    next.base = loc;
    next.base_fences = fences;
    next.base_rows = next.unique_rows = static_cast<uint32_t>(builder.rows());
    next.unique_emb = builder.emb_rows();
    return next;
  }
  if (how == GroupWrite::kNewDelta) {
    counted.older = old.delta;
    counted.older_rows = old.delta_rows;
    counted.older_filter = old.delta_filter;
  }
  counted.delta = loc;
  counted.delta_rows = static_cast<uint32_t>(builder.rows());
  counted.delta_filter = DeltaFilterOf(builder.keys());
  return counted;
}

}  // namespace

TieredTable::GroupRead TieredTable::GroupReadFor(uint32_t g, uint32_t dirty_rows) const {
  const GroupEntry& e = ssd_->entry(g);
  GroupRead r;
  r.group = g;
  r.want_base =
      e.base.exists() && e.older.exists() && DeltaFull(e.delta_rows + dirty_rows, e.base_rows);
  r.want_delta = !NewDeltaCertain(e);
  r.bytes =
      (r.want_delta ? e.delta.length : 0) + (r.want_base ? e.base.length + e.older.length : 0);
  return r;
}

TieredTable::GroupKeys TieredTable::RowsToWrite(const CacheStripe& stripe,
                                                const std::vector<GroupRead>& reads) const {
  GroupKeys rows;
  if (reads.empty()) return rows;
  // The stripe's groups are [base, base + 2^shift): a bit per group marks those written, and the
  // rows are put in group order by counting (a binary search per row and a sort of the pairs
  // were 5 % of store_bench's CPU).
  const uint32_t shift = ssd_->group_bits() - options_.stripe_bits;
  const uint32_t base = reads.front().group >> shift << shift;
  std::vector<uint64_t> written((size_t{1} << shift) / 64 + 1, 0);
  for (const GroupRead& r : reads) {
    assert(r.group - base < (uint32_t{1} << shift));
    written[(r.group - base) / 64] |= uint64_t{1} << ((r.group - base) % 64);
  }
  std::vector<uint32_t> count((size_t{1} << shift) + 1, 0);
  GroupKeys found;
  stripe.ForEachNodeById([&](uint32_t node) {
    stripe.AssertLocked();
    if (!WritesBack(stripe.meta(node).state)) return;
    const uint64_t key = stripe.key(node);
    const uint32_t i = ssd_->GroupOf(key) - base;
    if (!(written[i / 64] >> (i % 64) & 1)) return;
    found.emplace_back(i, key);
    ++count[i + 1];
  });
  for (size_t i = 1; i < count.size(); ++i) count[i] += count[i - 1];
  rows.resize(found.size());
  for (const auto& [i, key] : found) rows[count[i]++] = {base + i, key};
  return rows;
}

std::vector<std::pair<uint32_t, uint32_t>> TieredTable::StillToWrite(
    const CacheStripe& stripe, const std::vector<GroupRead>& reads, const GroupKeys& rows) {
  // The rows found first (each one's index slot fetched a few rows ahead), then their
  // metadata checked (fetched as each was found): the lookups' misses overlap.
  constexpr ptrdiff_t kSlotsAhead = 8;
  std::vector<std::pair<uint32_t, uint32_t>> found;  // (group, node)
  for (const GroupRead& r : reads) {
    // rows are in group order: (group, 0) is below every row of the group
    auto it = std::lower_bound(rows.begin(), rows.end(), std::make_pair(r.group, uint64_t{0}));
    for (; it != rows.end() && it->first == r.group; ++it) {
      if (rows.end() - it > kSlotsAhead) stripe.PrefetchSlot(it[kSlotsAhead].second);
      const uint32_t node = stripe.Find(it->second);
      if (node == kNoNode) continue;
      stripe.PrefetchNode(node, /*write=*/false);
      found.emplace_back(r.group, node);
    }
  }
  std::vector<std::pair<uint32_t, uint32_t>> dirty;
  dirty.reserve(found.size());
  for (const auto& gn : found) {
    if (WritesBack(stripe.meta(gn.second).state)) dirty.push_back(gn);
  }
  std::sort(dirty.begin(), dirty.end());
  return dirty;
}

Status TieredTable::WriteGroups(CacheStripe& stripe, std::vector<GroupRead>* reads,
                                const GroupKeys& rows) {
  assert(std::is_sorted(reads->begin(), reads->end(), GroupBefore<GroupRead>));
  // The rows to write, by group: the candidates of these groups that still qualify.
  const std::vector<std::pair<uint32_t, uint32_t>> dirty = StillToWrite(stripe, *reads, rows);
  RecordBuilder builder;
  std::vector<std::pair<uint32_t, GroupEntry>> updates;
  std::vector<uint64_t> dirty_keys, newer_keys;
  uint64_t new_deltas = 0, merges = 0, kept_rows = 0;
  constexpr int kFirstBase = 3;  // bytes[] past the GroupWrite kinds: a group's first record
  uint64_t bytes[kFirstBase + 1] = {};
  // The dirty rows lie scattered in the stripe's slabs and are read once each (their keys,
  // then EncodeRow): their headers and metadata are fetched kNodesAhead rows ahead, their
  // embedding records (whose place the header names) kEmbsAhead rows ahead, so that the misses
  // of the next groups' rows overlap this group's work instead of each stalling in turn.
  constexpr ptrdiff_t kNodesAhead = 24, kEmbsAhead = 8;
  auto node_ahead = dirty.begin(), emb_ahead = dirty.begin();
  auto first = dirty.begin();
  for (GroupRead& r : *reads) {
    const uint32_t g = r.group;
    auto last = first;
    while (last != dirty.end() && last->first == g) ++last;
    if (first == last) continue;  // nothing of this group to write
    for (; node_ahead != dirty.end() && node_ahead - last < kNodesAhead; ++node_ahead) {
      stripe.PrefetchNode(node_ahead->second, /*write=*/true);
    }
    for (; emb_ahead != node_ahead && emb_ahead - last < kEmbsAhead; ++emb_ahead) {
      stripe.PrefetchEmb(emb_ahead->second, /*write=*/false);
    }
    const GroupEntry e = ssd_->entry(g);
    dirty_keys.clear();
    for (auto it = first; it != last; ++it) dirty_keys.push_back(stripe.key(it->second));
    std::sort(dirty_keys.begin(), dirty_keys.end());
    if (e.delta.exists() && !r.want_delta && !NewDeltaCertain(e)) {
      // Left unread for a new delta, but the entry changed since: read it now.
      RETURN_IF_ERROR(ssd_->Read(e.delta, g, &r.delta));
      r.want_delta = true;
    }
    size_t carried = 0;  // old delta rows that stay
    for (size_t j = 0; j < r.delta.rows(); ++j) carried += !Contains(dirty_keys, r.delta.keys[j]);
    // (An unread delta is moved aside: NewDeltaCertain held, and holds, for this entry.)
    const bool unread = e.delta.exists() && !r.want_delta;
    GroupWrite how;
    if (!e.base.exists()) {
      how = GroupWrite::kMerge;  // the group's first base
    } else if (unread) {
      how = GroupWrite::kNewDelta;
    } else if (!DeltaFull(carried + dirty_keys.size(), e.base_rows)) {
      how = GroupWrite::kDelta;
    } else {
      how = e.older.exists() ? GroupWrite::kMerge : GroupWrite::kNewDelta;
    }
    if (how == GroupWrite::kMerge && !r.have_base) {  // the guess was wrong: read them now
      RETURN_IF_ERROR(ssd_->Read(e.base, g, &r.base));
      RETURN_IF_ERROR(ssd_->Read(e.older, g, &r.older));
      r.have_base = true;
    }
    builder.Reset(g);
    AddKeptRows(how, r.delta, r.older, e.base.exists() ? &r.base : nullptr, dirty_keys, &newer_keys,
                &builder);
    GroupEntry next = e;
    for (auto it = first; it != last; ++it) {
      const uint32_t node = it->second;
      builder.AddEncodedBy(stripe.key(node), [&](std::string* out) {
        stripe.AssertLocked();
        return stripe.EncodeRow(node, out);
      });
      const uint8_t st = stripe.meta(node).state;
      const uint32_t emb = stripe.has_emb(node) ? 1 : 0;
      if (st & kOnDisk) {  // a newer version of a key the group holds
        next.unique_emb = next.unique_emb + emb - ((st & kDiskEmb) ? 1 : 0);
      } else {
        next.unique_rows += 1;
        next.unique_emb += emb;
      }
    }
    RecordLoc loc;
    Fences fences;
    RETURN_IF_ERROR(ssd_->Append(&builder, &loc, &fences));
    new_deltas += how == GroupWrite::kNewDelta;
    merges += how == GroupWrite::kMerge && e.base.exists();
    bytes[e.base.exists() ? static_cast<int>(how) : kFirstBase] += loc.length;
    kept_rows += builder.rows() - static_cast<size_t>(last - first);
    updates.emplace_back(g, EntryAfter(how, e, next, loc, fences, builder));
    first = last;
  }
  RETURN_IF_ERROR(ssd_->FlushAppends());
  for (const auto& [g, e] : updates) ssd_->Replace(g, e);
  uint64_t persisted = 0;
  for (const auto& [g, node] : dirty) {
    NodeMeta& m = stripe.meta(node);
    persisted += options_.layout.EncodedBytesOf(stripe.key(node), stripe.has_emb(node));
    stripe.set_state(
        node, (m.state & ~(kDirty | kDiskEmb)) | kOnDisk | (stripe.has_emb(node) ? kDiskEmb : 0));
  }
  counters_->groups_written.fetch_add(updates.size(), std::memory_order_relaxed);
  counters_->new_deltas.fetch_add(new_deltas, std::memory_order_relaxed);
  counters_->merges.fetch_add(merges, std::memory_order_relaxed);
  counters_->delta_bytes.fetch_add(bytes[static_cast<int>(GroupWrite::kDelta)],
                                   std::memory_order_relaxed);
  counters_->new_delta_bytes.fetch_add(bytes[static_cast<int>(GroupWrite::kNewDelta)],
                                       std::memory_order_relaxed);
  counters_->merge_bytes.fetch_add(bytes[static_cast<int>(GroupWrite::kMerge)],
                                   std::memory_order_relaxed);
  counters_->first_base_bytes.fetch_add(bytes[kFirstBase], std::memory_order_relaxed);
  counters_->kept_rows.fetch_add(kept_rows, std::memory_order_relaxed);
  counters_->rows_persisted.fetch_add(dirty.size(), std::memory_order_relaxed);
  counters_->persisted_bytes.fetch_add(persisted, std::memory_order_relaxed);
  return Status::OK();
}

StatusOr<uint64_t> TieredTable::EvictStripe(size_t s, uint64_t share, bool all) {
  CacheStripe& stripe = *stripes_[s];
  std::vector<GroupRead> reads;
  GroupKeys rows;                 // the rows their write-back may write
  std::vector<uint64_t> victims;  // dirty rows to drop once their groups are written
  uint64_t dropped = 0;
  constexpr size_t kNodesAhead = 16, kRowsAhead = 8;  // prefetch distances (below)
  {
    CacheStripe::Lock lock(stripe);
    const size_t bytes = stripe.MemoryBytes();
    if (!all && bytes <= share) return 0;
    stripe.NoteHighWater();  // what it holds at its top, for ShrinkArenas after the round
    std::vector<uint32_t> candidates;
    stripe.ForEachNodeById([&](uint32_t node) {
      stripe.AssertLocked();
      if (stripe.meta(node).pins == 0) candidates.push_back(node);
    });
    const uint16_t now = epoch_.load(std::memory_order_relaxed);
    size_t k = candidates.size();
    float threshold = std::numeric_limits<float>::infinity();
    std::vector<float> priority;
    if (!all && k > 0) {
      k = std::min<size_t>(
          k, std::max<size_t>(options_.min_evict_rows,
                              (bytes - share + stripe.RowBytes() - 1) / stripe.RowBytes()));
      std::vector<std::pair<float, uint32_t>> ranked;
      ranked.reserve(candidates.size());
      for (uint32_t node : candidates) {
        ranked.emplace_back(Priority(stripe, node, now, age_factors_, options_), node);
      }
      std::nth_element(ranked.begin(), ranked.begin() + (k - 1), ranked.end());
      threshold = ranked[k - 1].first;
      for (size_t v = 0; v < ranked.size(); ++v) {
        candidates[v] = ranked[v].second;
        priority.push_back(ranked[v].first);
      }
    }
    std::unordered_map<uint32_t, uint32_t> dirty_groups;  // group -> dirty victims
    auto take = [&](uint32_t node) {
      stripe.AssertLocked();
      const NodeMeta m = stripe.meta(node);
      if (m.state & kFresh) {  // a default never pushed: nothing to keep
        stripe.Erase(node);
        counters_->dropped_fresh.fetch_add(1, std::memory_order_relaxed);
        ++dropped;
      } else if (!(m.state & kDirty) && (m.state & kOnDisk)) {  // its record has it
        stripe.Erase(node);
        counters_->evicted_clean.fetch_add(1, std::memory_order_relaxed);
        ++dropped;
      } else {
        const uint64_t key = stripe.key(node);
        victims.push_back(key);
        ++dirty_groups[ssd_->GroupOf(key)];
      }
    };
    // The victims come in ranking order, scattered over the slabs: each one's header and
    // metadata are fetched kNodesAhead victims ahead, then (with the header there to name
    // it) its index slot, which Erase searches. (Not its embedding record: Erase does not
    // read it, it only returns the record's id to a free list.)
    for (size_t v = 0; v < k; ++v) {
      if (v + kNodesAhead < k) stripe.PrefetchNode(candidates[v + kNodesAhead], /*write=*/true);
      if (v + kRowsAhead < k) stripe.PrefetchSlot(stripe.key(candidates[v + kRowsAhead]));
      take(candidates[v]);
    }
    std::vector<uint8_t> taken;  // of candidates[k..]: taken as a stand-in (below)
    if (!all && options_.min_group_victims > 1 && !victims.empty()) {
      const size_t spared = SpareLoneVictims(
          stripe, [&](uint64_t key) { return ssd_->GroupOf(key); }, options_.min_group_victims,
          candidates, priority, k, threshold, &victims, &dirty_groups, &taken, take);
      counters_->spared_victims.fetch_add(spared, std::memory_order_relaxed);
    }
    // A group with a dirty victim is rewritten anyway: its other unpinned rows that are used
    // no more often than the victims leave with it (fewer rewrites per row evicted). Letting
    // rows up to 1.5x the threshold go too wrote 9 % fewer groups on the 1 M-row benchmark at
    // 10 %, but cost 0.7 points of hit rate and grew RSS in the budget test by 5 MB.
    for (size_t v = k; v < priority.size(); ++v) {
      if (!taken.empty() && taken[v - k]) continue;  // erased
      const uint32_t node = candidates[v];
      if (priority[v] <= threshold && dirty_groups.count(ssd_->GroupOf(stripe.key(node))))
        take(node);
    }
    for (const auto& [g, n] : dirty_groups) {
      reads.push_back(GroupReadFor(g, n));
    }
    SortByGroup(&reads);
    if (!reads.empty()) rows = RowsToWrite(stripe, reads);
    Account(stripe, s);
  }
  if (reads.empty()) return dropped;
  // Write back in batches of groups, so the old records held in memory stay bounded.
  std::sort(victims.begin(), victims.end(),
            [&](uint64_t a, uint64_t b) { return ssd_->GroupOf(a) < ssd_->GroupOf(b); });
  size_t v = 0;
  std::vector<GroupRead> batch;  // reused: its records' buffers keep their capacity
  for (size_t b = 0, end; b < reads.size(); b = end) {
    end = BatchEnd(reads, b);
    TakeBatch(reads, b, end, &batch);
    const uint32_t last_group = batch.back().group;
    RETURN_IF_ERROR(ReadGroups(stripe, &batch));
    CacheStripe::Lock lock(stripe);
    RETURN_IF_ERROR(WriteGroups(stripe, &batch, rows));
    for (; v < victims.size() && ssd_->GroupOf(victims[v]) <= last_group; ++v) {
      if (v + kRowsAhead < victims.size()) stripe.PrefetchSlot(victims[v + kRowsAhead]);
      const uint32_t node = stripe.Find(victims[v]);
      if (node == kNoNode || stripe.meta(node).pins > 0) continue;  // pinned again meanwhile
      stripe.Erase(node);
      counters_->evicted_dirty.fetch_add(1, std::memory_order_relaxed);
      ++dropped;
    }
    Account(stripe, s);
  }
  return dropped;
}

Status TieredTable::FlushStripe(size_t s) {
  CacheStripe& stripe = *stripes_[s];
  CacheStripe::Lock lock(stripe);
  std::unordered_map<uint32_t, uint32_t> dirty;  // group -> rows to write
  stripe.ForEachNode([&](uint32_t node) {
    stripe.AssertLocked();
    const uint8_t st = stripe.meta(node).state;
    if (WritesBack(st)) ++dirty[ssd_->GroupOf(stripe.key(node))];
  });
  if (dirty.empty()) return Status::OK();
  std::vector<GroupRead> reads;
  for (const auto& [g, n] : dirty) {
    reads.push_back(GroupReadFor(g, n));
  }
  SortByGroup(&reads);
  const GroupKeys rows = RowsToWrite(stripe, reads);
  std::vector<GroupRead> batch;
  for (size_t b = 0, end; b < reads.size(); b = end) {
    end = BatchEnd(reads, b);
    TakeBatch(reads, b, end, &batch);
    RETURN_IF_ERROR(ReadGroupsLocked(stripe, &batch));
    RETURN_IF_ERROR(WriteGroups(stripe, &batch, rows));
  }
  Account(stripe, s);
  return Status::OK();
}

}  // namespace ctrbox
