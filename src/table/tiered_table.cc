#include "table/tiered_table.h"

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

#include "util/coding.h"
#include "util/hash.h"

namespace ctrbox {

// A group record a pull has to read: the keys it wants from it and, once read, those rows.
struct TieredTable::Load {
  uint32_t group = 0;
  GroupEntry entry;  // the group's records when the pull looked
  // The files of its records, taken under the slot lock: kept alive.
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
    r.bytes = reads[i].bytes;
    r.have_base = false;
  }
}

void Pin(NodeMeta& m, uint16_t epoch) {
  ++m.pins;
  m.epoch = epoch;
}

// The LFU priority of an unpinned row (docs/storage.md): its show counter, halved for every
// kHalfLife passes since its last pull. Rows with the lowest priority are evicted first.
constexpr double kHalfLife = 16.0;
float AgeFactor(uint16_t age) {
  return static_cast<float>(std::exp2(-static_cast<double>(age) / kHalfLife));
}
// AgeFactor of the ages most rows have, computed once (the same values: an eviction round
// ranks every unpinned row of a slot, and exp2 was ~1 % of store_bench's CPU).
constexpr size_t kAgeTable = 256;
const std::array<float, kAgeTable>& AgeFactors() {
  static const std::array<float, kAgeTable> table = [] {
    std::array<float, kAgeTable> t;
    for (size_t a = 0; a < kAgeTable; ++a) t[a] = AgeFactor(static_cast<uint16_t>(a));
    return t;
  }();
  return table;
}
float Priority(const CacheSlot& slot, uint32_t node, uint16_t now) REQUIRES(slot) {
  const uint16_t age = static_cast<uint16_t>(now - slot.meta(node).epoch);
  return slot.show(node) * (age < kAgeTable ? AgeFactors()[age] : AgeFactor(age));
}

}  // namespace

// ---- PinnedRows -------------------------------------------------------------------------

PinnedRows& PinnedRows::operator=(PinnedRows&& o) noexcept {
  if (this != &o) {
    if (table_ != nullptr) table_->Release(this);
    table_ = o.table_;
    nodes_ = std::move(o.nodes_);
    o.table_ = nullptr;
    o.nodes_.clear();
  }
  return *this;
}

PinnedRows::~PinnedRows() {
  if (table_ != nullptr) table_->Release(this);
}

// ---- construction -----------------------------------------------------------------------

TieredTable::TieredTable(Env* env, TieredOptions options)
    : env_(env), options_(std::move(options)), counters_(std::make_unique<Counters>()) {
  for (size_t s = 0; s < (size_t{1} << options_.shard_bits); ++s) {
    slots_.push_back(std::make_unique<CacheSlot>(options_.layout));
  }
  accounted_.assign(slots_.size(), 0);
}

uint64_t TieredOptions::ResidentRowBytes() const { return CacheSlot::RowBytesFor(layout); }

uint64_t TieredOptions::BloomBudgetBytes() const {
  if (memory_budget == 0 || ssd.dir.empty()) return 0;
  return std::max<uint64_t>(
      1, static_cast<uint64_t>(bloom_share * static_cast<double>(memory_budget)));
}

uint64_t TieredOptions::RowBudgetBytes() const {
  if (memory_budget == 0 || ssd.dir.empty()) return 0;
  // The group index, the Bloom filters' share and the slots' least index.
  const uint64_t fixed = (uint64_t{1} << ssd.group_bits) * sizeof(GroupEntry) + BloomBudgetBytes() +
                         (uint64_t{1} << shard_bits) * CacheSlot::MinIndexBytes();
  return memory_budget > fixed ? memory_budget - fixed : 0;
}

Status TieredOptions::Validate() const {
  if (shard_bits > 12) return InvalidArgumentError("table.shard_bits must be <= 12");
  if (ssd.dir.empty()) {
    if (memory_budget == 0) return Status::OK();
    return InvalidArgumentError(
        "storage.memory_budget needs storage.ssd_dir: without a disk tier every row stays in "
        "memory, so the budget could not be kept");
  }
  if (memory_budget == 0)
    return InvalidArgumentError("storage.ssd_dir needs storage.memory_budget");
  if (ssd.group_bits < shard_bits + TableGroupBits(layout)) {
    return InvalidArgumentError(
        layout.multi() ? "storage.group_bits must be >= table.shard_bits + the bits that number "
                         "model.slot_dims' tables"
                       : "storage.group_bits must be >= table.shard_bits");
  }
  if (!(bloom_share > 0 && bloom_share <= 0.5)) {
    return InvalidArgumentError("storage.bloom_share must be in (0, 0.5]");
  }
  if (!(delta_share > 0 && delta_share <= 4)) {
    return InvalidArgumentError("storage.delta_share must be in (0, 4]");
  }
  if (evict_stop >= evict_start) {
    return InvalidArgumentError("storage.evict_stop must be below storage.evict_start");
  }
  return Status::OK();
}

StatusOr<std::unique_ptr<TieredTable>> TieredTable::Open(Env* env, const TieredOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<TieredTable> t(new TieredTable(env, options));
  for (size_t s = 0; s < t->slots_.size(); ++s) {
    const CacheSlot& slot = *t->slots_[s];
    CacheSlot::Lock l(slot);
    t->Account(slot, s);
  }
  if (options.ssd.dir.empty()) return t;
  SsdOptions ssd = options.ssd;
  ssd.bloom_budget = options.BloomBudgetBytes();
  if (options.reopen) {
    ASSIGN_OR_RETURN(t->ssd_, SsdStore::Reopen(env, ssd, options.layout));
  } else {
    ASSIGN_OR_RETURN(t->ssd_, SsdStore::Create(env, ssd, options.layout));
  }
  if (t->ssd_->group_bits() < options.shard_bits) {
    return InvalidArgumentError("the reopened store has fewer groups than the table has slots");
  }
  if (t->ssd_->MemoryBytes() >= options.memory_budget / 2) {
    return InvalidArgumentError(fmt::format(
        "storage.memory_budget ({}) is too small: the group index and Bloom filters alone take "
        "{}; lower storage.group_bits",
        options.memory_budget, t->ssd_->MemoryBytes()));
  }
  if (options.io_threads > 1) t->io_pool_ = std::make_unique<ThreadPool>(options.io_threads);
  if (options.evict_threads > 1)
    t->evict_pool_ = std::make_unique<ThreadPool>(options.evict_threads);
  t->worker_ = std::thread([p = t.get()] { p->WorkerLoop(); });
  return t;
}

TieredTable::~TieredTable() {
  {
    MutexLock l(&worker_mu_);
    stop_ = true;
  }
  worker_cv_.SignalAll();
  if (worker_.joinable()) worker_.join();
#ifndef NDEBUG
  for (const auto& s : slots_) {
    const CacheSlot& slot = *s;
    CacheSlot::Lock l(slot);
    slot.ForEachNode([&](uint32_t n) {
      slot.AssertLocked();
      assert(slot.meta(n).pins == 0 && "rows left pinned");
    });
  }
#endif
}

size_t TieredTable::SlotOf(uint64_t key) const {
  return options_.shard_bits == 0 ? 0 : Mix64(key) >> (64 - options_.shard_bits);
}

void TieredTable::GroupBySlot(const uint64_t* keys, size_t n, std::vector<uint32_t>* order,
                              std::vector<uint32_t>* begin) const {
  const size_t S = slots_.size();
  std::vector<uint16_t> slot_of(n);
  begin->assign(S + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    slot_of[i] = static_cast<uint16_t>(SlotOf(keys[i]));
    ++(*begin)[slot_of[i] + 1];
  }
  for (size_t s = 0; s < S; ++s) (*begin)[s + 1] += (*begin)[s];
  std::vector<uint32_t> fill(begin->begin(), begin->end() - 1);
  order->resize(n);
  for (size_t i = 0; i < n; ++i) (*order)[fill[slot_of[i]]++] = static_cast<uint32_t>(i);
}

void TieredTable::Account(const CacheSlot& slot, size_t s) {
  const size_t now = slot.MemoryBytes();
  used_.fetch_add(now - accounted_[s], std::memory_order_relaxed);  // wraps on decrease
  accounted_[s] = now;
  const uint64_t used = UsedBytes();
  uint64_t peak = peak_used_.load(std::memory_order_relaxed);
  while (used > peak && !peak_used_.compare_exchange_weak(peak, used)) {
  }
}

CacheMemory TieredTable::CacheBreakdown() const {
  CacheMemory m;
  for (const auto& slot : slots_) {
    CacheSlot::Lock l(*slot);
    m += slot->Memory();
  }
  return m;
}

uint64_t TieredTable::UsedBytes() const {
  return used_.load(std::memory_order_relaxed) + (ssd_ ? ssd_->MemoryBytes() : 0);
}

Status TieredTable::error() const {
  MutexLock l(&error_mu_);
  return error_;
}

void TieredTable::SetError(const Status& s) {
  {
    MutexLock l(&error_mu_);
    if (error_.ok()) error_ = s;
  }
  budget_cv_.SignalAll();
}

// ---- pull -------------------------------------------------------------------------------

void TieredTable::NewRow(CacheSlot& slot, size_t s, size_t i, uint64_t key,
                         const CtrAccessor* accessor, RowBlock* out, PinnedRows* pins) {
  if (accessor == nullptr) {
    out->ClearRow(i, key);
    counters_->lookup_misses.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const uint16_t epoch = epoch_.load(std::memory_order_relaxed);
  accessor->InitRow(out, i, key);
  const uint32_t node = slot.Insert(key);
  slot.WriteRow(node, *out, i);
  slot.set_state(node, kFresh);
  Pin(slot.meta(node), epoch);
  pins->nodes_[i] = {static_cast<uint32_t>(s), node};
  counters_->new_keys.fetch_add(1, std::memory_order_relaxed);
}

void TieredTable::PullResident(size_t s, const uint64_t* keys, const uint32_t* idx, size_t n,
                               const CtrAccessor* accessor, RowBlock* out, PinnedRows* pins,
                               std::vector<Load>* loads) {
  CacheSlot& slot = *slots_[s];
  const uint16_t epoch = epoch_.load(std::memory_order_relaxed);
  std::unordered_map<uint32_t, size_t> load_of;  // group -> index in *loads
  // Files resolved once per task (a lookup takes the store's file lock); a file named by a
  // group entry of this slot stays alive while we hold the slot's lock.
  std::vector<std::pair<uint32_t, std::shared_ptr<ParamFile>>> files;
  auto file_of = [&](const RecordLoc& loc) -> const std::shared_ptr<ParamFile>& {
    static const std::shared_ptr<ParamFile> kNone;
    if (!loc.exists()) return kNone;
    for (const auto& [id, f] : files) {
      if (id == loc.file) return f;
    }
    files.emplace_back(loc.file, ssd_->File(loc.file));
    return files.back().second;
  };
  auto may_hold = [&](const RecordLoc& loc, uint64_t key) {
    return SsdStore::MayHold(file_of(loc).get(), key);
  };
  uint64_t hits = 0, no_record = 0, pruned = 0;
  CacheSlot::Lock lock(slot);
  for (size_t k = 0; k < n; ++k) {
    const uint32_t i = idx[k];
    const uint64_t key = keys[i];
    const uint32_t node = slot.Find(key);
    if (node != kNoNode) {
      Pin(slot.meta(node), epoch);
      slot.ReadRow(node, out, i);
      pins->nodes_[i] = {static_cast<uint32_t>(s), node};
      ++hits;
      continue;
    }
    if (ssd_) {
      const uint32_t g = ssd_->GroupOf(key);
      const GroupEntry& e = ssd_->entry(g);
      if ((e.DeltaMayHold(key) && may_hold(e.delta, key)) ||
          (e.OlderMayHold(key) && may_hold(e.older, key)) || may_hold(e.base, key)) {
        auto [it, added] = load_of.emplace(g, loads->size());
        if (added) {
          loads->emplace_back();
          Load& l = loads->back();
          l.group = g;
          l.entry = e;
          l.base_file = file_of(e.base);
          l.delta_file = file_of(e.delta);
          l.older_file = file_of(e.older);
        }
        (*loads)[it->second].idx.push_back(i);
        continue;
      }
      ++(e.base.exists() ? pruned : no_record);
    }
    NewRow(slot, s, i, key, accessor, out, pins);
  }
  Account(slot, s);
  counters_->hits.fetch_add(hits, std::memory_order_relaxed);
  counters_->no_record.fetch_add(no_record, std::memory_order_relaxed);
  counters_->bloom_prunes.fetch_add(pruned, std::memory_order_relaxed);
}

namespace {

// Reads the newest disk versions of the keys keys[idx[w]] of group g: the delta first, then
// the older delta, each if its filter in the entry and its file's Bloom filter may hold one
// of the keys still missing, then the base for the rest (if its file's filter may hold one).
// The rest of each record is dropped.
Status ReadWanted(const SsdStore& ssd, const uint64_t* keys, RecordView* view, const GroupEntry& e,
                  const std::shared_ptr<ParamFile>& base_file,
                  const std::shared_ptr<ParamFile>& delta_file,
                  const std::shared_ptr<ParamFile>& older_file, uint32_t group,
                  const std::vector<uint32_t>& idx, RowBlock* rows, size_t first, uint8_t* found) {
  std::fill(found, found + idx.size(), 0);
  for (const RecordLoc* loc : e.records()) {
    if (!loc->exists()) continue;
    const std::shared_ptr<ParamFile>& file = loc == &e.delta   ? delta_file
                                             : loc == &e.older ? older_file
                                                               : base_file;
    if (!file)
      return InternalError(fmt::format("the file of a record of group {} disappeared", group));
    bool wanted = false;
    for (size_t w = 0; w < idx.size() && !wanted; ++w) {
      const uint64_t key = keys[idx[w]];
      const bool filter = loc == &e.delta   ? e.DeltaMayHold(key)
                          : loc == &e.older ? e.OlderMayHold(key)
                                            : true;
      wanted = !found[w] && filter && SsdStore::MayHold(file.get(), key);
    }
    if (!wanted) continue;
    RETURN_IF_ERROR(ssd.ReadRecord(*file, *loc, group, view));
    for (size_t w = 0; w < idx.size(); ++w) {
      if (found[w]) continue;
      for (size_t j = 0; j < view->rows(); ++j) {
        if (view->keys[j] != keys[idx[w]]) continue;
        RETURN_IF_ERROR(view->DecodeRow(j, rows, first + w));
        found[w] = 1;
        break;
      }
    }
  }
  return Status::OK();
}

}  // namespace

Status TieredTable::ReadLoads(const uint64_t* keys, std::vector<Load*>* loads, LoadedRows* loaded) {
  size_t rows = 0;
  for (Load* l : *loads) {
    l->first = static_cast<uint32_t>(rows);
    rows += l->idx.size();
  }
  loaded->rows.Resize(rows);
  loaded->found.resize(rows);
  const int threads = io_pool_ ? io_pool_->num_threads() : 1;
  std::vector<RecordView> views(threads);  // one read buffer per I/O thread
  auto read = [&](size_t j, int t) {
    Load& l = *(*loads)[j];
    l.status = ReadWanted(*ssd_, keys, &views[t], l.entry, l.base_file, l.delta_file, l.older_file,
                          l.group, l.idx, &loaded->rows, l.first, loaded->found.data() + l.first);
  };
  if (io_pool_ && loads->size() > 1) {
    io_pool_->ParallelFor(loads->size(), read);
  } else {
    for (size_t j = 0; j < loads->size(); ++j) read(j, 0);
  }
  for (Load* l : *loads) RETURN_IF_ERROR(l->status);
  return Status::OK();
}

Status TieredTable::InstallLoaded(size_t s, const uint64_t* keys, const CtrAccessor* accessor,
                                  RowBlock* out, PinnedRows* pins, std::vector<Load>* loads,
                                  LoadedRows* disk) {
  CacheSlot& slot = *slots_[s];
  const uint16_t epoch = epoch_.load(std::memory_order_relaxed);
  uint64_t loaded = 0, false_positives = 0, hits = 0;
  RecordView view;
  CacheSlot::Lock lock(slot);
  for (Load& l : *loads) {
    if (!(ssd_->entry(l.group) == l.entry)) {
      // The group was rewritten while we read (a concurrent pull made some of its keys
      // resident and the worker wrote them back): read its current records.
      l.entry = ssd_->entry(l.group);
      l.base_file = ssd_->File(l.entry.base.file);
      l.delta_file = ssd_->File(l.entry.delta.file);
      l.older_file = ssd_->File(l.entry.older.file);
      RETURN_IF_ERROR(ReadWanted(*ssd_, keys, &view, l.entry, l.base_file, l.delta_file,
                                 l.older_file, l.group, l.idx, &disk->rows, l.first,
                                 disk->found.data() + l.first));
    }
    for (size_t w = 0; w < l.idx.size(); ++w) {
      const uint32_t i = l.idx[w];
      const size_t r = l.first + w;  // its row in *disk
      const uint64_t key = keys[i];
      uint32_t node = slot.Find(key);
      if (node != kNoNode) {  // made resident meanwhile by a concurrent pull
        Pin(slot.meta(node), epoch);
        slot.ReadRow(node, out, i);
        pins->nodes_[i] = {static_cast<uint32_t>(s), node};
        ++hits;
        continue;
      }
      if (!disk->found[r]) {  // a Bloom filter false positive
        ++false_positives;
        NewRow(slot, s, i, key, accessor, out, pins);
        continue;
      }
      node = slot.Insert(key);
      slot.WriteRow(node, disk->rows, r);
      NodeMeta& m = slot.meta(node);
      slot.set_state(node, kOnDisk | (disk->rows.has_emb(r) ? kDiskEmb : 0));
      Pin(m, epoch);
      out->CopyRow(disk->rows, r, i);
      pins->nodes_[i] = {static_cast<uint32_t>(s), node};
      ++loaded;
    }
  }
  Account(slot, s);
  counters_->loaded.fetch_add(loaded, std::memory_order_relaxed);
  counters_->hits.fetch_add(hits, std::memory_order_relaxed);
  counters_->bloom_false_positives.fetch_add(false_positives, std::memory_order_relaxed);
  return Status::OK();
}

Status TieredTable::CheckKeys(const uint64_t* keys, size_t n) const {
  if (!options_.layout.multi()) return Status::OK();
  for (size_t i = 0; i < n; ++i) {
    if (!options_.layout.ValidKey(keys[i])) {
      return InvalidArgumentError(
          fmt::format("key {:#x} names table {} but the table has {} (model.slot_dims): keys of a "
                      "multi-table model carry their table in their top bits (TableKey)",
                      keys[i], keys[i] >> kTableShift, options_.layout.tables));
    }
  }
  return Status::OK();
}

StatusOr<PinnedRows> TieredTable::Pull(const uint64_t* keys, size_t n, const CtrAccessor* accessor,
                                       RowBlock* out, ThreadPool* pool) {
  assert(out->layout() == options_.layout);
  RETURN_IF_ERROR(error());
  RETURN_IF_ERROR(CheckKeys(keys, n));
  RETURN_IF_ERROR(WaitForBudget());
  epoch_.fetch_add(1, std::memory_order_relaxed);  // a pull is a pass: frequencies age
  const uint64_t used_before = used_.load(std::memory_order_relaxed);
  out->Resize(n);
  PinnedRows pins;
  pins.table_ = this;
  live_pulls_.fetch_add(1);
  pins.nodes_.assign(n, {kNotPinned, 0});
  std::vector<uint32_t> order, begin;
  GroupBySlot(keys, n, &order, &begin);
  const size_t S = slots_.size();
  std::vector<std::vector<Load>> loads(S);
  // Each slot task waits for the budget before inserting its share of the pass, so the cache
  // overshoots by at most a few slots' share of one pass.
  std::vector<Status> waited(S);
  RunParallel(pool, S, [&](size_t s, int) {
    waited[s] = WaitForBudget(/*own_pulls=*/1);
    if (!waited[s].ok()) return;
    PullResident(s, keys, order.data() + begin[s], begin[s + 1] - begin[s], accessor, out, &pins,
                 &loads[s]);
  });
  for (const Status& w : waited) RETURN_IF_ERROR(w);
  counters_->pulled.fetch_add(n, std::memory_order_relaxed);
  if (ssd_) {
    std::vector<Load*> all;
    for (auto& v : loads) {
      for (Load& l : v) all.push_back(&l);
    }
    LoadedRows loaded{RowBlock(options_.layout), {}};
    RETURN_IF_ERROR(ReadLoads(keys, &all, &loaded));  // pins releases what was pinned
    std::vector<Status> status(S);
    RunParallel(pool, S, [&](size_t s, int) {
      if (loads[s].empty()) return;
      status[s] = WaitForBudget(/*own_pulls=*/1);  // as above, for the rows read from disk
      if (status[s].ok()) {
        status[s] = InstallLoaded(s, keys, accessor, out, &pins, &loads[s], &loaded);
      }
    });
    for (const Status& st : status) RETURN_IF_ERROR(st);
  }
  const uint64_t used_after = used_.load(std::memory_order_relaxed);
  if (accessor != nullptr) headroom_.store(used_after > used_before ? used_after - used_before : 0);
  worker_cv_.Signal();  // make room for the next pass while this one trains
  RETURN_IF_ERROR(WaitForBudget(/*own_pulls=*/1));
  return pins;
}

// ---- push, release, insert ---------------------------------------------------------------

Status TieredTable::Push(PinnedRows* pins, const RowBlock& rows, ThreadPool* pool) {
  assert(pins->table_ == this && rows.size() == pins->nodes_.size());
  const size_t S = slots_.size();
  std::vector<std::vector<uint32_t>> by_slot(S);
  for (size_t i = 0; i < pins->nodes_.size(); ++i) {
    if (pins->nodes_[i].first != kNotPinned) by_slot[pins->nodes_[i].first].push_back(i);
  }
  RunParallel(pool, S, [&](size_t s, int) {
    if (by_slot[s].empty()) return;
    CacheSlot& slot = *slots_[s];
    CacheSlot::Lock lock(slot);
    for (uint32_t i : by_slot[s]) {
      const uint32_t node = pins->nodes_[i].second;
      assert(slot.key(node) == rows.key(i));
      slot.WriteRow(node, rows, i);
      NodeMeta& m = slot.meta(node);
      slot.set_state(node, (m.state | kDirty) & ~kFresh);
      --m.pins;
    }
    Account(slot, s);
  });
  pins->nodes_.clear();
  pins->table_ = nullptr;
  OnUnpinned();
  return error();
}

void TieredTable::Release(PinnedRows* pins) {
  const size_t S = slots_.size();
  std::vector<std::vector<uint32_t>> by_slot(S);
  for (const auto& [s, node] : pins->nodes_) {
    if (s != kNotPinned) by_slot[s].push_back(node);
  }
  for (size_t s = 0; s < S; ++s) {
    if (by_slot[s].empty()) continue;
    CacheSlot& slot = *slots_[s];
    CacheSlot::Lock lock(slot);
    for (uint32_t node : by_slot[s]) --slot.meta(node).pins;
  }
  pins->nodes_.clear();
  pins->table_ = nullptr;
  OnUnpinned();
}

void TieredTable::OnUnpinned() {
  live_pulls_.fetch_sub(1);
  unpin_events_.fetch_add(1);
  {
    MutexLock l(&budget_mu_);  // no lost wake-up of a waiting pull
  }
  budget_cv_.SignalAll();
  worker_cv_.Signal();  // the rows just unpinned may be evicted now
}

Status TieredTable::Insert(const RowBlock& rows, ThreadPool* pool) {
  RETURN_IF_ERROR(error());
  std::vector<uint64_t> keys(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) keys[i] = rows.key(i);
  RETURN_IF_ERROR(CheckKeys(keys.data(), keys.size()));
  // A key whose row is on disk but not in memory (written back since an earlier Insert: a
  // checkpoint's delta over its base) must come in as the newer version of that row, or the
  // counts (Stats, CountKeys, its group's unique rows) would take it for a second key. So the
  // keys are looked up first, as a pull without an accessor does, and stay pinned until they
  // are written. Loading is not training: the lookups stay out of the cache's counters.
  PinnedRows pins;
  if (ssd_) {
    Counters& c = *counters_;
    std::atomic<uint64_t>* looked[] = {
        &c.pulled,        &c.hits,      &c.loaded,       &c.new_keys,
        &c.lookup_misses, &c.no_record, &c.bloom_prunes, &c.bloom_false_positives};
    uint64_t before[std::size(looked)];
    for (size_t k = 0; k < std::size(looked); ++k) before[k] = looked[k]->load();
    RowBlock found(options_.layout);
    ASSIGN_OR_RETURN(pins, Pull(keys.data(), keys.size(), /*accessor=*/nullptr, &found, pool));
    for (size_t k = 0; k < std::size(looked); ++k) looked[k]->store(before[k]);
  } else {
    RETURN_IF_ERROR(WaitForBudget());
  }
  std::vector<uint32_t> order, begin;
  GroupBySlot(keys.data(), keys.size(), &order, &begin);
  RunParallel(pool, slots_.size(), [&](size_t s, int) {
    CacheSlot& slot = *slots_[s];
    CacheSlot::Lock lock(slot);
    for (uint32_t k = begin[s]; k < begin[s + 1]; ++k) {
      const uint32_t i = order[k];
      uint32_t node = kNoNode;
      if (ssd_ && pins.nodes_[i].first != kNotPinned) {  // in memory, or read from disk
        node = pins.nodes_[i].second;
        --slot.meta(node).pins;
      } else {
        node = slot.Find(keys[i]);
        if (node == kNoNode) node = slot.Insert(keys[i]);  // a new key
      }
      slot.WriteRow(node, rows, i);
      NodeMeta& m = slot.meta(node);
      slot.set_state(node, (m.state | kDirty) & ~kFresh);
    }
    Account(slot, s);
  });
  if (ssd_) {
    pins.nodes_.clear();
    pins.table_ = nullptr;
    OnUnpinned();
  }
  return WaitForBudget();
}

// ---- writing groups back -------------------------------------------------------------------

TieredTable::GroupFiles TieredTable::FilesOf(const CacheSlot& slot, uint32_t group) const {
  GroupFiles f;
  f.entry = ssd_->entry(group);
  if (f.entry.delta.exists()) f.delta_file = ssd_->File(f.entry.delta.file);
  if (f.entry.older.exists()) f.older_file = ssd_->File(f.entry.older.file);
  if (f.entry.base.exists()) f.base_file = ssd_->File(f.entry.base.file);
  return f;
}

Status TieredTable::ReadGroupRecords(const GroupFiles& f, GroupRead* r) const {
  const GroupEntry& e = f.entry;
  r->delta.keys.clear();
  r->delta.offsets.assign(1, 0);
  if (e.delta.exists()) {
    if (!f.delta_file) return InternalError("a group record's file disappeared");
    RETURN_IF_ERROR(ssd_->ReadRecord(*f.delta_file, e.delta, r->group, &r->delta));
  }
  r->older.keys.clear();
  r->older.offsets.assign(1, 0);
  r->have_base = r->want_base && e.base.exists();
  if (r->have_base) {
    if (!f.base_file) return InternalError("a group record's file disappeared");
    RETURN_IF_ERROR(ssd_->ReadRecord(*f.base_file, e.base, r->group, &r->base));
    if (e.older.exists()) {
      if (!f.older_file) return InternalError("a group record's file disappeared");
      RETURN_IF_ERROR(ssd_->ReadRecord(*f.older_file, e.older, r->group, &r->older));
    }
  }
  return Status::OK();
}

Status TieredTable::ReadGroups(const CacheSlot& slot, std::vector<GroupRead>* reads) {
  for (GroupRead& r : *reads) {
    GroupFiles f;
    {
      CacheSlot::Lock lock(slot);
      f = FilesOf(slot, r.group);
    }
    RETURN_IF_ERROR(ReadGroupRecords(f, &r));
  }
  return Status::OK();
}

Status TieredTable::ReadGroupsLocked(const CacheSlot& slot, std::vector<GroupRead>* reads) {
  for (GroupRead& r : *reads) RETURN_IF_ERROR(ReadGroupRecords(FilesOf(slot, r.group), &r));
  return Status::OK();
}

namespace {

bool Contains(const std::vector<uint64_t>& sorted, uint64_t key) {
  return std::binary_search(sorted.begin(), sorted.end(), key);
}

}  // namespace

TieredTable::GroupRead TieredTable::GroupReadFor(uint32_t g, uint32_t dirty_rows) const {
  const GroupEntry& e = ssd_->entry(g);
  GroupRead r;
  r.group = g;
  r.want_base =
      e.base.exists() && e.older.exists() && DeltaFull(e.delta_rows + dirty_rows, e.base_rows);
  r.bytes = e.delta.length + (r.want_base ? e.base.length + e.older.length : 0);
  return r;
}

namespace {

// Whether a write-back writes a row in this state: resident, not fresh, dirty or not on disk.
bool WritesBack(uint8_t st) { return !(st & kFresh) && ((st & kDirty) || !(st & kOnDisk)); }

}  // namespace

TieredTable::GroupKeys TieredTable::RowsToWrite(const CacheSlot& slot,
                                                const std::vector<GroupRead>& reads) const {
  GroupKeys rows;
  if (reads.empty()) return rows;
  // The slot's groups are [base, base + 2^shift): a bit per group marks those written, and the
  // rows are put in group order by counting (a binary search per row and a sort of the pairs
  // were 5 % of store_bench's CPU).
  const uint32_t shift = ssd_->group_bits() - options_.shard_bits;
  const uint32_t base = reads.front().group >> shift << shift;
  std::vector<uint64_t> written((size_t{1} << shift) / 64 + 1, 0);
  for (const GroupRead& r : reads) {
    assert(r.group - base < (uint32_t{1} << shift));
    written[(r.group - base) / 64] |= uint64_t{1} << ((r.group - base) % 64);
  }
  std::vector<uint32_t> count((size_t{1} << shift) + 1, 0);
  GroupKeys found;
  slot.ForEachNode([&](uint32_t node) {
    slot.AssertLocked();
    if (!WritesBack(slot.meta(node).state)) return;
    const uint64_t key = slot.key(node);
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

Status TieredTable::WriteGroups(CacheSlot& slot, std::vector<GroupRead>* reads,
                                const GroupKeys& rows) {
  assert(std::is_sorted(reads->begin(), reads->end(), GroupBefore<GroupRead>));
  // The rows to write, by group: the candidates of these groups that still qualify.
  std::vector<std::pair<uint32_t, uint32_t>> dirty;  // (group, node)
  for (const GroupRead& r : *reads) {
    // rows are in group order: (group, 0) is below every row of the group
    auto it = std::lower_bound(rows.begin(), rows.end(), std::make_pair(r.group, uint64_t{0}));
    for (; it != rows.end() && it->first == r.group; ++it) {
      const uint32_t node = slot.Find(it->second);
      if (node != kNoNode && WritesBack(slot.meta(node).state)) dirty.emplace_back(r.group, node);
    }
  }
  std::sort(dirty.begin(), dirty.end());
  RecordBuilder builder;
  std::vector<std::pair<uint32_t, GroupEntry>> updates;
  std::vector<uint64_t> dirty_keys, newer_keys;
  uint64_t new_deltas = 0, merges = 0;
  auto first = dirty.begin();
  for (GroupRead& r : *reads) {
    const uint32_t g = r.group;
    auto last = first;
    while (last != dirty.end() && last->first == g) ++last;
    if (first == last) continue;  // nothing of this group to write
    const GroupEntry e = ssd_->entry(g);
    dirty_keys.clear();
    for (auto it = first; it != last; ++it) dirty_keys.push_back(slot.key(it->second));
    std::sort(dirty_keys.begin(), dirty_keys.end());
    size_t carried = 0;  // old delta rows that stay
    for (size_t j = 0; j < r.delta.rows(); ++j) carried += !Contains(dirty_keys, r.delta.keys[j]);
    // Grow the delta; or, once full, move it aside as the older delta and start a new one of
    // the dirty rows; or, with an older delta there already, merge all into a new base.
    enum class Write { kDelta, kNewDelta, kMerge };
    const Write how = !e.base.exists()                                       ? Write::kMerge
                      : !DeltaFull(carried + dirty_keys.size(), e.base_rows) ? Write::kDelta
                      : !e.older.exists()                                    ? Write::kNewDelta
                                                                             : Write::kMerge;
    if (how == Write::kMerge && !r.have_base) {  // the guess was wrong: read them now
      RETURN_IF_ERROR(ssd_->Read(e.base, g, &r.base));
      RETURN_IF_ERROR(ssd_->Read(e.older, g, &r.older));
      r.have_base = true;
    }
    builder.Reset(g);
    if (how == Write::kMerge) {
      // The base's rows no delta overrides, the older delta's the delta does not override.
      newer_keys = r.delta.keys;
      newer_keys.insert(newer_keys.end(), dirty_keys.begin(), dirty_keys.end());
      std::sort(newer_keys.begin(), newer_keys.end());
      for (size_t j = 0; j < r.older.rows(); ++j) {
        if (!Contains(newer_keys, r.older.keys[j]))
          builder.AddEncoded(r.older.row(j), r.older.keys[j]);
      }
      newer_keys.insert(newer_keys.end(), r.older.keys.begin(), r.older.keys.end());
      std::sort(newer_keys.begin(), newer_keys.end());
      for (size_t j = 0; j < r.base.rows() && e.base.exists(); ++j) {
        if (!Contains(newer_keys, r.base.keys[j]))
          builder.AddEncoded(r.base.row(j), r.base.keys[j]);
      }
    }
    if (how != Write::kNewDelta) {
      for (size_t j = 0; j < r.delta.rows(); ++j) {
        if (!Contains(dirty_keys, r.delta.keys[j]))
          builder.AddEncoded(r.delta.row(j), r.delta.keys[j]);
      }
    }
    GroupEntry next = e;
    for (auto it = first; it != last; ++it) {
      const uint32_t node = it->second;
      builder.AddEncodedBy(slot.key(node), [&](std::string* out) {
        slot.AssertLocked();
        return slot.EncodeRow(node, out);
      });
      const uint8_t st = slot.meta(node).state;
      const uint32_t emb = slot.has_emb(node) ? 1 : 0;
      if (st & kOnDisk) {  // a newer version of a key the group holds
        next.unique_emb = next.unique_emb + emb - ((st & kDiskEmb) ? 1 : 0);
      } else {
        next.unique_rows += 1;
        next.unique_emb += emb;
      }
    }
    RecordLoc loc;
    const std::string_view record = builder.Finish();
    RETURN_IF_ERROR(ssd_->Append(g, record, builder.keys(), &loc));
    new_deltas += how == Write::kNewDelta;
    merges += how == Write::kMerge && e.base.exists();
    if (how == Write::kMerge) {
      next = GroupEntry{};
      next.base = loc;
      next.base_rows = next.unique_rows = static_cast<uint32_t>(builder.rows());
      next.unique_emb = builder.emb_rows();
    } else {
      if (how == Write::kNewDelta) {
        next.older = e.delta;
        next.older_rows = e.delta_rows;
        next.older_filter = e.delta_filter;
      }
      next.delta = loc;
      next.delta_rows = static_cast<uint32_t>(builder.rows());
      next.delta_filter = DeltaFilterOf(builder.keys());
    }
    updates.emplace_back(g, next);
    first = last;
  }
  RETURN_IF_ERROR(ssd_->FlushAppends());
  for (const auto& [g, e] : updates) ssd_->Replace(g, e);
  uint64_t persisted = 0;
  for (const auto& [g, node] : dirty) {
    NodeMeta& m = slot.meta(node);
    persisted += options_.layout.EncodedBytesOf(slot.key(node), slot.has_emb(node));
    slot.set_state(
        node, (m.state & ~(kDirty | kDiskEmb)) | kOnDisk | (slot.has_emb(node) ? kDiskEmb : 0));
  }
  counters_->groups_written.fetch_add(updates.size(), std::memory_order_relaxed);
  counters_->new_deltas.fetch_add(new_deltas, std::memory_order_relaxed);
  counters_->merges.fetch_add(merges, std::memory_order_relaxed);
  counters_->rows_persisted.fetch_add(dirty.size(), std::memory_order_relaxed);
  counters_->persisted_bytes.fetch_add(persisted, std::memory_order_relaxed);
  return Status::OK();
}

StatusOr<uint64_t> TieredTable::EvictSlot(size_t s, uint64_t share, bool all) {
  CacheSlot& slot = *slots_[s];
  std::vector<GroupRead> reads;
  GroupKeys rows;                 // the rows their write-back may write
  std::vector<uint64_t> victims;  // dirty rows to drop once their groups are written
  uint64_t dropped = 0;
  {
    CacheSlot::Lock lock(slot);
    const size_t bytes = slot.MemoryBytes();
    if (!all && bytes <= share) return 0;
    std::vector<uint32_t> candidates;
    slot.ForEachNode([&](uint32_t node) {
      slot.AssertLocked();
      if (slot.meta(node).pins == 0) candidates.push_back(node);
    });
    const uint16_t now = epoch_.load(std::memory_order_relaxed);
    size_t k = candidates.size();
    float threshold = std::numeric_limits<float>::infinity();
    std::vector<float> priority;
    if (!all && k > 0) {
      k = std::min<size_t>(
          k, std::max<size_t>(options_.min_evict_rows,
                              (bytes - share + slot.RowBytes() - 1) / slot.RowBytes()));
      std::vector<std::pair<float, uint32_t>> ranked;
      ranked.reserve(candidates.size());
      for (uint32_t node : candidates) ranked.emplace_back(Priority(slot, node, now), node);
      std::nth_element(ranked.begin(), ranked.begin() + (k - 1), ranked.end());
      threshold = ranked[k - 1].first;
      for (size_t v = 0; v < ranked.size(); ++v) {
        candidates[v] = ranked[v].second;
        priority.push_back(ranked[v].first);
      }
    }
    std::unordered_map<uint32_t, uint32_t> dirty_groups;  // group -> dirty victims
    auto take = [&](uint32_t node) {
      slot.AssertLocked();
      const NodeMeta m = slot.meta(node);
      if (m.state & kFresh) {  // a default never pushed: nothing to keep
        slot.Erase(node);
        counters_->dropped_fresh.fetch_add(1, std::memory_order_relaxed);
        ++dropped;
      } else if (!(m.state & kDirty) && (m.state & kOnDisk)) {  // its record has it
        slot.Erase(node);
        counters_->evicted_clean.fetch_add(1, std::memory_order_relaxed);
        ++dropped;
      } else {
        const uint64_t key = slot.key(node);
        victims.push_back(key);
        ++dirty_groups[ssd_->GroupOf(key)];
      }
    };
    for (size_t v = 0; v < k; ++v) take(candidates[v]);
    // A group with a dirty victim is rewritten anyway: its other unpinned rows that are used
    // no more often than the victims leave with it (fewer rewrites per row evicted). Letting
    // rows up to 1.5x the threshold go too wrote 9 % fewer groups on the 1 M-row benchmark at
    // 10 %, but cost 0.7 points of hit rate and grew RSS in the budget test by 5 MB.
    for (size_t v = k; v < priority.size(); ++v) {
      const uint32_t node = candidates[v];
      if (priority[v] <= threshold && dirty_groups.count(ssd_->GroupOf(slot.key(node)))) take(node);
    }
    for (const auto& [g, n] : dirty_groups) {
      reads.push_back(GroupReadFor(g, n));
    }
    SortByGroup(&reads);
    if (!reads.empty()) rows = RowsToWrite(slot, reads);
    Account(slot, s);
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
    RETURN_IF_ERROR(ReadGroups(slot, &batch));
    CacheSlot::Lock lock(slot);
    RETURN_IF_ERROR(WriteGroups(slot, &batch, rows));
    for (; v < victims.size() && ssd_->GroupOf(victims[v]) <= last_group; ++v) {
      const uint32_t node = slot.Find(victims[v]);
      if (node == kNoNode || slot.meta(node).pins > 0) continue;  // pinned again meanwhile
      slot.Erase(node);
      counters_->evicted_dirty.fetch_add(1, std::memory_order_relaxed);
      ++dropped;
    }
    Account(slot, s);
  }
  return dropped;
}

Status TieredTable::FlushSlot(size_t s) {
  CacheSlot& slot = *slots_[s];
  CacheSlot::Lock lock(slot);
  std::unordered_map<uint32_t, uint32_t> dirty;  // group -> rows to write
  slot.ForEachNode([&](uint32_t node) {
    slot.AssertLocked();
    const uint8_t st = slot.meta(node).state;
    if (WritesBack(st)) ++dirty[ssd_->GroupOf(slot.key(node))];
  });
  if (dirty.empty()) return Status::OK();
  std::vector<GroupRead> reads;
  for (const auto& [g, n] : dirty) {
    reads.push_back(GroupReadFor(g, n));
  }
  SortByGroup(&reads);
  const GroupKeys rows = RowsToWrite(slot, reads);
  std::vector<GroupRead> batch;
  for (size_t b = 0, end; b < reads.size(); b = end) {
    end = BatchEnd(reads, b);
    TakeBatch(reads, b, end, &batch);
    RETURN_IF_ERROR(ReadGroupsLocked(slot, &batch));
    RETURN_IF_ERROR(WriteGroups(slot, &batch, rows));
  }
  Account(slot, s);
  return Status::OK();
}

Status TieredTable::CompactFile(const std::shared_ptr<ParamFile>& file) {
  // Walk the file's record headers; read and move only the records the index still names
  // (stale ones are skipped unread), one at a time, so memory stays small.
  const uint64_t size = ssd_->FileBytes(*file);
  struct Rec {
    uint32_t group, offset, length;
  };
  std::vector<std::vector<Rec>> by_slot(slots_.size());
  char header[kRecordHeaderBytes];
  uint64_t off = kParamFileHeaderBytes;
  while (off + kRecordHeaderBytes <= size) {
    size_t got = 0;
    RETURN_IF_ERROR(file->reader->Read(off, kRecordHeaderBytes, header, &got));
    if (got != kRecordHeaderBytes) break;
    const uint32_t group = GetFixed<uint32_t>(header + 4);
    const uint32_t len =
        static_cast<uint32_t>(kRecordHeaderBytes + GetFixed<uint32_t>(header + 12));
    if (std::memcmp(header, "GREC", 4) != 0 || group >= (uint64_t{1} << ssd_->group_bits()) ||
        off + len > size) {
      return CorruptionError(fmt::format("{}: record at offset {}: bad header", file->path, off));
    }
    by_slot[SlotOfGroup(group)].push_back(Rec{group, static_cast<uint32_t>(off), len});
    off += len;
  }
  uint64_t moved = 0;
  RecordView view;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (by_slot[s].empty()) continue;
    CacheSlot::Lock lock(*slots_[s]);  // guards the entries of its groups
    std::vector<std::pair<uint32_t, GroupEntry>> relocated;
    std::unordered_map<uint32_t, size_t> relocated_at;  // group -> its entry in relocated
    for (const Rec& r : by_slot[s]) {
      const RecordLoc here{file->id, r.offset, r.length};
      // A group with several records in this file is relocated once, with all of them.
      auto at = relocated_at.find(r.group);
      GroupEntry e = at == relocated_at.end() ? ssd_->entry(r.group) : relocated[at->second].second;
      RecordLoc* place = e.base == here    ? &e.base
                         : e.delta == here ? &e.delta
                         : e.older == here ? &e.older
                                           : nullptr;
      if (place == nullptr) continue;  // stale
      RETURN_IF_ERROR(ssd_->ReadRecord(*file, here, r.group, &view));
      RecordLoc loc;
      RETURN_IF_ERROR(ssd_->Append(r.group, view.bytes, view.keys, &loc));
      *place = loc;
      if (at == relocated_at.end()) {
        relocated_at.emplace(r.group, relocated.size());
        relocated.emplace_back(r.group, e);
      } else {
        relocated[at->second].second = e;
      }
      moved += r.length;
    }
    RETURN_IF_ERROR(ssd_->FlushAppends());
    for (const auto& [g, e] : relocated) ssd_->Replace(g, e);
  }
  counters_->compactions.fetch_add(1, std::memory_order_relaxed);
  counters_->compaction_bytes.fetch_add(moved, std::memory_order_relaxed);
  return Status::OK();
}

// ---- the background worker ---------------------------------------------------------------

bool TieredTable::NeedsEviction() const {
  return options_.memory_budget > 0 &&
         static_cast<double>(UsedBytes()) >
             options_.evict_start * static_cast<double>(options_.memory_budget);
}

Status TieredTable::Maintain() {
  MutexLock writer(&writer_mu_);
  if (NeedsEviction()) {
    const uint64_t fixed = ssd_->MemoryBytes();
    const uint64_t target =
        static_cast<uint64_t>(options_.evict_stop * static_cast<double>(options_.memory_budget));
    const uint64_t share = target > fixed ? (target - fixed) / slots_.size() : 0;
    // Every slot over its share, in parallel (each slot under its own lock; appends to the
    // files are serialised inside the store), starting where the last round stopped.
    const size_t S = slots_.size(), start = next_evict_slot_;
    next_evict_slot_ = (start + 1) % S;
    auto evict_all = [&](uint64_t slot_share, bool all) -> StatusOr<uint64_t> {
      std::vector<StatusOr<uint64_t>> freed(S, uint64_t{0});
      RunParallel(evict_pool_.get(), S, [&](size_t k, int) {
        writer_mu_.AssertHeld();  // by Maintain, for the whole loop
        const size_t s = (start + k) % S;
        if (all || UsedBytes() > target) freed[k] = EvictSlot(s, slot_share, all);
      });
      uint64_t total = 0;
      for (auto& f : freed) {
        RETURN_IF_ERROR(f.status());
        total += *f;
      }
      return total;
    };
    ASSIGN_OR_RETURN(uint64_t freed, evict_all(share, false));
    if (freed == 0 && UsedBytes() > options_.memory_budget) {
      // Every slot is within its share, yet the budget is exceeded (fixed costs, skew): take
      // every unpinned row before concluding that nothing can go.
      ASSIGN_OR_RETURN(freed, evict_all(0, true));
    }
    last_round_freed_.store(freed);
    counters_->evict_rounds.fetch_add(1, std::memory_order_relaxed);
    const uint64_t round = rounds_done_.fetch_add(1) + 1;
    if (freed == 0 && UsedBytes() > options_.memory_budget) last_stuck_round_.store(round);
  }
  return CompactIfOver();
}

Status TieredTable::CompactIfOver() {
  // Compaction is lazy: only once the files exceed compact_trigger x the live bytes, then the
  // most stale eligible files first until compact_target. Every eligible file is more than
  // compact_stale stale, so total file bytes stay <= live / (1 - compact_stale) + one file.
  DiskStats d = ssd_->Stats();
  const auto over = [&](double ratio) {
    return static_cast<double>(d.file_bytes) > ratio * static_cast<double>(d.live_bytes) +
                                                   static_cast<double>(ssd_->options().file_bytes);
  };
  if (over(options_.compact_trigger)) {
    for (const auto& f : ssd_->CompactionCandidates(options_.compact_stale)) {
      RETURN_IF_ERROR(CompactFile(f));
      d = ssd_->Stats();
      if (!over(options_.compact_target)) break;
    }
  }
  return Status::OK();
}

void TieredTable::WorkerLoop() {
  // After a round that freed nothing (every row left is pinned by passes in flight), the next
  // one waits for an unpin (or the periodic tick): rescanning pinned rows frees nothing and
  // takes slot locks and CPU from the pulls and the trainer.
  bool blocked = false;
  uint64_t blocked_unpins = 0;
  worker_mu_.Lock();
  while (!stop_) {
    // Up to 50 ms for work (or stop), then a round in any case.
    const auto tick = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    while (!stop_ && !(NeedsEviction() && !(blocked && unpin_events_.load() == blocked_unpins))) {
      if (!worker_cv_.WaitUntil(&worker_mu_, tick)) break;
    }
    if (stop_) break;
    worker_mu_.Unlock();
    const uint64_t unpins = unpin_events_.load();
    const uint64_t rounds = rounds_done_.load();
    Status s = Maintain();
    blocked = rounds_done_.load() != rounds && last_round_freed_.load() == 0;
    blocked_unpins = unpins;
    if (!s.ok()) SetError(s.WithContext("SSD-PS maintenance"));
    budget_cv_.SignalAll();
    worker_mu_.Lock();
  }
  worker_mu_.Unlock();
}

Status TieredTable::WaitForBudget(int own_pulls) {
  if (options_.memory_budget == 0 || !ssd_) return Status::OK();
  // Stuck means: a maintenance round that began after this wait (or after the last unpin)
  // found nothing to evict; the round in progress now may have begun before, hence the + 1.
  uint64_t start_round = rounds_done_.load() + 1;
  uint64_t unpins = unpin_events_.load();
  MutexLock l(&budget_mu_);
  while (UsedBytes() > options_.memory_budget) {
    RETURN_IF_ERROR(error());
    if (unpin_events_.load() != unpins) {
      // Rows were unpinned: judge stuckness again from the next maintenance round on.
      unpins = unpin_events_.load();
      start_round = rounds_done_.load() + 1;
    } else if (last_stuck_round_.load() > start_round && live_pulls_.load() <= own_pulls) {
      // Nothing is evictable and no other pass in flight will unpin anything.
      const CacheMemory m = CacheBreakdown();
      const uint64_t ssd_bytes = ssd_->MemoryBytes();
      return ResourceExhaustedError(fmt::format(
          "the rows in use do not fit storage.memory_budget ({} used of {}: rows {}, their "
          "index {}, metadata {}, SSD group index and Bloom filters {}): every row left in "
          "memory is pinned by a pass in flight; lower pipeline.pass_examples or raise the budget",
          UsedBytes(), options_.memory_budget, m.rows, m.index, m.meta, ssd_bytes));
    }
    worker_cv_.Signal();
    budget_cv_.WaitFor(&budget_mu_, std::chrono::milliseconds(20));
  }
  return Status::OK();
}

// ---- whole-table operations ------------------------------------------------------------------

namespace {

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

StatusOr<uint64_t> TieredTable::Shrink(const CtrAccessor& accessor, ThreadPool* pool) {
  RETURN_IF_ERROR(error());
  MutexLock writer(&writer_mu_);
  std::vector<uint64_t> deleted(slots_.size(), 0);
  std::vector<Status> status(slots_.size());
  auto shrink_slot = [&](size_t s, int) {
    CacheSlot& slot = *slots_[s];
    CacheSlot::Lock lock(slot);
    RowBlock row(options_.layout);
    row.Resize(1);
    // Shrinks a resident row; erases it (if unpinned) when the accessor rejects it. Returns
    // whether it is still there.
    auto shrink_resident = [&](uint32_t node) {
      slot.AssertLocked();
      slot.ReadRow(node, &row, 0);
      if (accessor.ShrinkRow(&row.show(0), &row.click(0), &row.unseen(0))) {
        slot.WriteRow(node, row, 0);
        slot.set_state(node, slot.meta(node).state | kDirty);
        return true;
      }
      if (slot.meta(node).pins > 0) return true;
      slot.Erase(node);
      ++deleted[s];
      return false;
    };
    std::unordered_map<uint32_t, std::vector<uint32_t>> resident;  // group -> nodes
    slot.ForEachNode([&](uint32_t node) {
      slot.AssertLocked();
      if (slot.meta(node).state & kFresh) return;
      resident[ssd_ ? ssd_->GroupOf(slot.key(node)) : 0].push_back(node);
    });
    if (!ssd_) {
      for (const auto& [g, nodes] : resident) {
        for (uint32_t node : nodes) shrink_resident(node);
      }
      Account(slot, s);
      return;
    }
    // Every row changes: every group of the slot gets a new base holding its surviving rows
    // (disk rows not in memory, shrunk here, and the resident rows, shrunk in memory).
    const uint32_t shift = ssd_->group_bits() - options_.shard_bits;
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
        slot.AssertLocked();
        if (!status[s].ok() || slot.Find(v.keys[j]) != kNoNode) return;  // resident: newer
        status[s] = v.DecodeRow(j, &row, 0);
        if (!status[s].ok()) return;
        if (accessor.ShrinkRow(&row.show(0), &row.click(0), &row.unseen(0))) {
          builder.AddRow(row, 0);
        } else {
          ++deleted[s];
        }
      });
      if (!status[s].ok()) return;
      if (it != resident.end()) {
        for (uint32_t node : it->second) {
          if (!shrink_resident(node)) continue;
          slot.ReadRow(node, &row, 0);
          builder.AddRow(row, 0);
          written.push_back(node);
        }
      }
      GroupEntry next;
      if (builder.rows() > 0) {
        const std::string_view record = builder.Finish();
        status[s] = ssd_->Append(g, record, builder.keys(), &next.base);
        if (!status[s].ok()) return;
        next.base_rows = next.unique_rows = static_cast<uint32_t>(builder.rows());
        next.unique_emb = builder.emb_rows();
      }
      updates.emplace_back(g, next);
    }
    status[s] = ssd_->FlushAppends();
    if (!status[s].ok()) return;
    for (const auto& [g, e] : updates) ssd_->Replace(g, e);
    for (uint32_t node : written) {
      NodeMeta& m = slot.meta(node);
      slot.set_state(
          node, (m.state & ~(kDirty | kDiskEmb)) | kOnDisk | (slot.has_emb(node) ? kDiskEmb : 0));
    }
    Account(slot, s);
  };
  if (ssd_) {
    for (size_t s = 0; s < slots_.size(); ++s) shrink_slot(s, 0);  // one writer at a time
  } else {
    RunParallel(pool, slots_.size(), shrink_slot);
  }
  uint64_t total = 0;
  for (size_t s = 0; s < slots_.size(); ++s) {
    RETURN_IF_ERROR(status[s]);
    total += deleted[s];
  }
  return total;
}

Status TieredTable::ExportShard(size_t s, RowBlock* out) {
  RETURN_IF_ERROR(error());
  CacheSlot& slot = *slots_[s];
  out->Resize(0);
  CacheSlot::Lock lock(slot);
  if (ssd_) {
    const uint32_t shift = ssd_->group_bits() - options_.shard_bits;
    RecordView base, older, delta;
    Status st;
    for (uint32_t g = static_cast<uint32_t>(s) << shift;
         g < (static_cast<uint32_t>(s) + 1) << shift; ++g) {
      const GroupEntry e = ssd_->entry(g);
      if (!e.base.exists() && !e.delta.exists() && !e.older.exists()) continue;
      RETURN_IF_ERROR(ssd_->Read(e.base, g, &base));
      RETURN_IF_ERROR(ssd_->Read(e.older, g, &older));
      RETURN_IF_ERROR(ssd_->Read(e.delta, g, &delta));
      ForEachDiskRow(base, older, delta, [&](const RecordView& v, size_t j) {
        slot.AssertLocked();
        if (!st.ok() || slot.Find(v.keys[j]) != kNoNode) return;
        const size_t r = out->size();
        out->Resize(r + 1);
        st = v.DecodeRow(j, out, r);
      });
      RETURN_IF_ERROR(st);
    }
  }
  slot.ForEachNode([&](uint32_t node) {
    slot.AssertLocked();
    if (slot.meta(node).state & kFresh) return;
    const size_t r = out->size();
    out->Resize(r + 1);
    slot.ReadRow(node, out, r);
  });
  return Status::OK();
}

StatusOr<uint64_t> TieredTable::SparseDigest(ThreadPool* pool) {
  std::vector<uint64_t> sums(slots_.size(), 0);
  std::vector<Status> status(slots_.size());
  RunParallel(pool, slots_.size(), [&](size_t s, int) {
    RowBlock rows(options_.layout);
    status[s] = ExportShard(s, &rows);
    std::string enc;
    for (size_t i = 0; i < rows.size(); ++i) {
      enc.clear();
      rows.EncodeRow(i, &enc);
      sums[s] += Checksum64(enc);
    }
  });
  uint64_t total = 0;
  for (size_t s = 0; s < slots_.size(); ++s) {
    RETURN_IF_ERROR(status[s]);
    total += sums[s];
  }
  return total;
}

uint64_t TieredTable::CountKeys() const {
  // Each slot's rows only memory holds, and the distinct keys of its groups' records, read
  // under the slot's lock: a write-back moves a row from one count to the other under that
  // lock, so nothing is counted twice or missed.
  uint64_t keys = 0;
  const uint32_t per_slot = ssd_ ? 1u << (ssd_->group_bits() - options_.shard_bits) : 0;
  for (size_t s = 0; s < slots_.size(); ++s) {
    const CacheSlot& slot = *slots_[s];
    CacheSlot::Lock l(slot);
    keys += slot.memory_only_rows();
    for (uint32_t g = static_cast<uint32_t>(s) * per_slot; g < (s + 1) * per_slot; ++g) {
      keys += ssd_->entry(g).unique_rows;
    }
  }
  return keys;
}

TableStats TieredTable::Stats() const {
  // A row written back between counting its slot and counting the files would count twice.
  MutexLock writer(&writer_mu_);
  const ValueLayout& l = options_.layout;
  TableStats st;
  int64_t value = 0, emb = 0, keys = 0;
  uint64_t allocated = 0;
  for (const auto& sp : slots_) {
    const CacheSlot& slot = *sp;
    CacheSlot::Lock lock(slot);
    allocated += slot.AllocatedBytes();
    [[maybe_unused]] const int64_t keys_before = keys;
    slot.ForEachNode([&](uint32_t node) {
      slot.AssertLocked();
      const uint8_t state = slot.meta(node).state;
      if (state & kFresh) return;
      ++st.keys_in_memory;
      const bool has = slot.has_emb(node);
      const uint64_t key = slot.key(node);
      // Count the row's memory version instead of its disk version (if any).
      keys += (state & kOnDisk) ? 0 : 1;
      emb += (has ? 1 : 0) - ((state & kDiskEmb) ? 1 : 0);
      value += static_cast<int64_t>(l.EncodedBytesOf(key, has) - 8) -
               ((state & kOnDisk)
                    ? static_cast<int64_t>(l.EncodedBytesOf(key, (state & kDiskEmb) != 0) - 8)
                    : 0);
    });
    // The slot's running count (CountKeys) agrees with the scan.
    assert(keys - keys_before == static_cast<int64_t>(slot.memory_only_rows()));
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
  r.pulled_keys = c.pulled.load();
  r.hits = c.hits.load();
  r.loaded_from_ssd = c.loaded.load();
  r.new_keys = c.new_keys.load();
  r.lookup_misses = c.lookup_misses.load();
  const CacheMemory m = CacheBreakdown();
  r.cache_row_bytes = m.rows;
  r.cache_index_bytes = m.index;
  r.cache_meta_bytes = m.meta;
  if (!ssd_) return r;
  const DiskStats d = ssd_->Stats();
  r.group_bits = ssd_->group_bits();
  r.no_record = c.no_record.load();
  r.bloom_prunes = c.bloom_prunes.load();
  r.bloom_false_positives = c.bloom_false_positives.load();
  r.records_read = d.records_read;
  r.read_retries = d.read_retries;
  r.ssd_bytes_read = d.bytes_read;
  r.records_written = d.records_written;
  r.ssd_bytes_written = d.bytes_written;
  r.groups_written = c.groups_written.load();
  r.new_deltas = c.new_deltas.load();
  r.merges = c.merges.load();
  r.rows_persisted = c.rows_persisted.load();
  r.persisted_bytes = c.persisted_bytes.load();
  r.evicted_dirty = c.evicted_dirty.load();
  r.evicted_clean = c.evicted_clean.load();
  r.dropped_fresh = c.dropped_fresh.load();
  r.evict_rounds = c.evict_rounds.load();
  r.compactions = c.compactions.load();
  r.compaction_bytes = c.compaction_bytes.load();
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
  for (size_t s = 0; s < slots_.size(); ++s) RETURN_IF_ERROR(FlushSlot(s));
  return Status::OK();
}

Status TieredTable::EvictAll() {
  if (!ssd_) return Status::OK();
  MutexLock writer(&writer_mu_);
  for (size_t s = 0; s < slots_.size(); ++s) RETURN_IF_ERROR(EvictSlot(s, 0, true).status());
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
  for (const auto& sp : slots_) {
    const CacheSlot& slot = *sp;
    CacheSlot::Lock l(slot);
    bool pinned = false;
    slot.ForEachNode([&](uint32_t n) {
      slot.AssertLocked();
      pinned |= slot.meta(n).pins > 0;
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
