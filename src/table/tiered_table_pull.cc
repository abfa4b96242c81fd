// TieredTable (table/tiered_table.h): pulls (rows made resident and pinned, loaded from the SSD
// files where they are not in memory), pushes, releases and inserts.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <utility>

#include "table/tiered_table.h"
#include "table/tiered_table_internal.h"
#include "util/coding.h"
#include "util/hash.h"

namespace ctrbox {
namespace {

// The keys a pull or a push fetches into the CPU cache together (PullResident): enough for
// their misses to overlap, few enough that their lines stay cached until used.
constexpr size_t kChunk = 64;

void Pin(NodeMeta& m, uint16_t epoch) {
  ++m.pins;
  m.epoch = epoch;
}

// A pull task's map of groups to their loads: open addressing over buffers each thread keeps
// (not a node-based map, which allocated per group, per stripe, per pull), emptied when the
// task ends by clearing the slots it used. One at a time per thread.
class LoadIndex {
 public:
  LoadIndex() : slots_(Buffers().slots), used_(Buffers().used) {}
  ~LoadIndex() {
    for (const uint32_t at : used_) slots_[at] = kEmpty;
    used_.clear();
  }
  LoadIndex(const LoadIndex&) = delete;
  LoadIndex& operator=(const LoadIndex&) = delete;

  // The index in the task's loads of group g's load, and whether it is new (then `next`, the
  // loads' size). `groups`: a bound of the task's groups (the same at every call).
  std::pair<size_t, bool> Find(uint32_t g, size_t next, size_t groups) {
    if (slots_.size() < 2 * groups) Grow(2 * groups);
    const size_t mask = slots_.size() - 1;
    for (size_t at = (g * 0x9E3779B1u) & mask;; at = (at + 1) & mask) {
      const uint64_t slot = slots_[at];
      if (slot == kEmpty) {
        slots_[at] = uint64_t{g} << 32 | next;
        used_.push_back(static_cast<uint32_t>(at));
        return {next, true};
      }
      if (slot >> 32 == g) return {static_cast<uint32_t>(slot), false};
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Scratch {
    std::vector<uint64_t> slots;  // group << 32 | load, or kEmpty
    std::vector<uint32_t> used;   // the slots set since the last clear
  };
  static Scratch& Buffers() {
    thread_local Scratch scratch;
    return scratch;
  }
  // At a task's first Find only (its bound is the same after), when no slot is in use.
  void Grow(size_t at_least) {
    assert(used_.empty());
    size_t size = 64;
    while (size < at_least) size *= 2;
    slots_.assign(size, kEmpty);
  }
  std::vector<uint64_t>& slots_;
  std::vector<uint32_t>& used_;
};

}  // namespace

// ---- pull -------------------------------------------------------------------------------

void TieredTable::NewRow(CacheStripe& stripe, size_t s, size_t i, uint64_t key,
                         const CtrAccessor* accessor, RowBlock* out, PinnedRows* pins) {
  if (accessor == nullptr) {
    out->ClearRow(i, key);
    counters_->lookup_misses.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const uint16_t epoch = epoch_.load(std::memory_order_relaxed);
  accessor->InitRow(out, i, key);
  const uint32_t node = stripe.Insert(key);
  stripe.WriteRow(node, *out, i);
  stripe.set_state(node, kFresh);
  Pin(stripe.meta(node), epoch);
  pins->nodes_[i] = {static_cast<uint32_t>(s), node};
  counters_->new_keys.fetch_add(1, std::memory_order_relaxed);
}

void TieredTable::PullResident(size_t s, const uint64_t* keys, const uint32_t* idx, size_t n,
                               const CtrAccessor* accessor, const uint8_t* overwritten,
                               RowBlock* out, PinnedRows* pins, std::vector<Load>* loads) {
  CacheStripe& stripe = *stripes_[s];
  const uint16_t epoch = epoch_.load(std::memory_order_relaxed);
  LoadIndex load_of;  // group -> index in *loads
  // The task's keys, or the stripe's groups if fewer: a bound of the groups it loads from.
  const size_t group_bound =
      ssd_ ? std::min<size_t>(n, size_t{1} << (ssd_->group_bits() - options_.stripe_bits)) : n;
  // Files resolved once per task (a lookup takes the store's file lock); a file named by a
  // group entry of this stripe stays alive while we hold the stripe's lock.
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
  // The keys go in chunks of kChunk, and each chunk in phases that fetch into the CPU cache
  // what the next phase reads, so that the cache misses (and TLB misses) of a chunk's keys
  // overlap instead of coming one after another: their index slots, then (Find) their rows'
  // headers and metadata, or for a key not in memory its group entry, then their embedding
  // records (whose place the header names), or the Bloom filter block of the group's base
  // file, then the work. The prefetches are hints: nothing read depends on them. The keys
  // are distinct (Pull's contract), so a row created for one key changes no other's Find.
  uint32_t nodes[kChunk], groups[kChunk];  // groups: of the keys not in memory (with files)
  CacheStripe::Lock lock(stripe);
  for (size_t c = 0; c < n; c += kChunk) {
    const size_t m = std::min(kChunk, n - c);
    const uint32_t* ix = idx + c;
    for (size_t k = 0; k < m; ++k) stripe.PrefetchSlot(keys[ix[k]]);
    for (size_t k = 0; k < m; ++k) nodes[k] = stripe.Find(keys[ix[k]]);
    for (size_t k = 0; k < m; ++k) {
      if (nodes[k] != kNoNode) {
        stripe.PrefetchNode(nodes[k], /*write=*/false);
      } else if (ssd_) {
        groups[k] = ssd_->GroupOf(keys[ix[k]]);
        const GroupEntry& e = ssd_->entry(groups[k]);
        __builtin_prefetch(&e);
        __builtin_prefetch(reinterpret_cast<const char*>(&e) + sizeof(GroupEntry) - 1);
      }
    }
    for (size_t k = 0; k < m; ++k) {
      if (nodes[k] != kNoNode) {
        if (overwritten == nullptr || !overwritten[ix[k]]) {
          stripe.PrefetchEmb(nodes[k], /*write=*/false);
        }
      } else if (ssd_) {
        if (const ParamFile* f = file_of(ssd_->entry(groups[k]).base).get()) {
          f->bloom->Prefetch(keys[ix[k]]);
        }
      }
    }
    for (size_t k = 0; k < m; ++k) {
      const uint32_t i = ix[k];
      const uint64_t key = keys[i];
      const uint32_t node = nodes[k];
      if (node != kNoNode) {
        Pin(stripe.meta(node), epoch);
        if (overwritten != nullptr && overwritten[i]) {
          out->key(i) = key;  // the caller copies the rest in (Pull's contract)
        } else {
          stripe.ReadRow(node, out, i);
        }
        pins->nodes_[i] = {static_cast<uint32_t>(s), node};
        ++hits;
        continue;
      }
      if (ssd_) {
        const uint32_t g = groups[k];
        const GroupEntry& e = ssd_->entry(g);
        const uint8_t first = e.DeltaMayHold(key) && may_hold(e.delta, key)   ? 0
                              : e.OlderMayHold(key) && may_hold(e.older, key) ? 1
                              : may_hold(e.base, key)                         ? 2
                                                                              : 3;
        if (first < 3) {
          const auto [at, added] = load_of.Find(g, loads->size(), group_bound);
          if (added) {
            loads->emplace_back();
            Load& l = loads->back();
            l.group = g;
            l.entry = e;
            l.base_file = file_of(e.base);
            l.delta_file = file_of(e.delta);
            l.older_file = file_of(e.older);
          }
          (*loads)[at].idx.push_back({i, first});
          continue;
        }
        ++(e.base.exists() ? pruned : no_record);
      }
      NewRow(stripe, s, i, key, accessor, out, pins);
    }
  }
  Account(stripe, s);
  counters_->hits.fetch_add(hits, std::memory_order_relaxed);
  counters_->no_record.fetch_add(no_record, std::memory_order_relaxed);
  counters_->bloom_prunes.fetch_add(pruned, std::memory_order_relaxed);
}

namespace {

// Reads the newest disk versions of the keys keys[idx[w].i] of group g: the delta first, then
// the older delta, each if its filter in the entry and its file's Bloom filter may hold one
// of the keys still missing, then the base for the rest (if its file's filter may hold one):
// of the base, only the pieces its fences say may hold them. The rest is dropped.
// With `asked` (the entry is the one the pull asked the filters for), each WantedKey's
// first_maybe says what they answered: record r < first_maybe may not hold the key, record
// first_maybe may; only the records after it (where it was not found) are asked again.
Status ReadWanted(const SsdStore& ssd, const uint64_t* keys, RecordView* view, const GroupEntry& e,
                  const std::shared_ptr<ParamFile>& base_file,
                  const std::shared_ptr<ParamFile>& delta_file,
                  const std::shared_ptr<ParamFile>& older_file, uint32_t group,
                  const std::vector<WantedKey>& idx, bool asked, RowBlock* rows, size_t first,
                  uint8_t* found) {
  std::fill(found, found + idx.size(), 0);
  uint32_t rank = 0;  // of *loc among the entry's records, newest first
  for (const RecordLoc* loc : e.records()) {
    const uint32_t at = rank++;
    if (!loc->exists()) continue;
    const std::shared_ptr<ParamFile>& file = loc == &e.delta   ? delta_file
                                             : loc == &e.older ? older_file
                                                               : base_file;
    if (!file)
      return InternalError(fmt::format("the file of a record of group {} disappeared", group));
    const bool base = loc == &e.base;
    const size_t pieces = base ? RecordPieces(loc->offset, loc->length, ssd.page_bytes()) : 1;
    PieceRange range{pieces, 0};  // of the base: the pieces its wanted keys may be in
    bool wanted = false;
    for (size_t w = 0; w < idx.size() && (base || !wanted); ++w) {
      if (found[w]) continue;
      const uint64_t key = keys[idx[w].i];
      if (asked && at <= idx[w].first_maybe) {
        if (at < idx[w].first_maybe) continue;  // its filters said no
      } else {
        const bool filter = loc == &e.delta   ? e.DeltaMayHold(key)
                            : loc == &e.older ? e.OlderMayHold(key)
                                              : true;
        if (!filter || !SsdStore::MayHold(file.get(), key)) continue;
      }
      wanted = true;
      if (base) {
        const PieceRange r = PiecesFor(e.base_fences, pieces, RowFingerprint(key));
        range.first = std::min(range.first, r.first);
        range.last = std::max(range.last, r.last);
      }
    }
    if (!wanted) continue;
    if (base) {  // only the pieces that may hold the keys
      RETURN_IF_ERROR(ssd.ReadPieces(*file, *loc, group, range, view));
    } else {
      RETURN_IF_ERROR(ssd.ReadRecord(*file, *loc, group, view));
    }
    for (size_t w = 0; w < idx.size(); ++w) {
      if (found[w]) continue;
      for (size_t j = 0; j < view->rows(); ++j) {
        if (view->keys[j] != keys[idx[w].i]) continue;
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
  ThreadPool* pool = io_pool_.get();
  if (!loads->empty() && ssd_->ReadsFromDevice()) {
    counters_->device_pulls.fetch_add(1, std::memory_order_relaxed);
    if (device_io_pool_) pool = device_io_pool_.get();
  }
  const int threads = pool ? pool->num_threads() : 1;
  std::vector<RecordView> views(threads);  // one read buffer per I/O thread
  auto read = [&](size_t j, int t) {
    Load& l = *(*loads)[j];
    l.status = ReadWanted(*ssd_, keys, &views[t], l.entry, l.base_file, l.delta_file, l.older_file,
                          l.group, l.idx, /*asked=*/true, &loaded->rows, l.first,
                          loaded->found.data() + l.first);
  };
  if (pool && loads->size() > 1) {
    pool->ParallelFor(loads->size(), read);
  } else {
    for (size_t j = 0; j < loads->size(); ++j) read(j, 0);
  }
  for (Load* l : *loads) RETURN_IF_ERROR(l->status);
  return Status::OK();
}

Status TieredTable::InstallLoaded(size_t s, const uint64_t* keys, const CtrAccessor* accessor,
                                  RowBlock* out, PinnedRows* pins, std::vector<Load>* loads,
                                  LoadedRows* disk) {
  CacheStripe& stripe = *stripes_[s];
  const uint16_t epoch = epoch_.load(std::memory_order_relaxed);
  uint64_t loaded = 0, false_positives = 0, hits = 0;
  RecordView view;
  CacheStripe::Lock lock(stripe);
  for (Load& l : *loads) {
    if (!(ssd_->entry(l.group) == l.entry)) {
      // The group was rewritten while we read (a concurrent pull made some of its keys
      // resident and the worker wrote them back): read its current records.
      l.entry = ssd_->entry(l.group);
      l.base_file = ssd_->File(l.entry.base.file);
      l.delta_file = ssd_->File(l.entry.delta.file);
      l.older_file = ssd_->File(l.entry.older.file);
      RETURN_IF_ERROR(ReadWanted(*ssd_, keys, &view, l.entry, l.base_file, l.delta_file,
                                 l.older_file, l.group, l.idx, /*asked=*/false, &disk->rows,
                                 l.first, disk->found.data() + l.first));
    }
    for (size_t w = 0; w < l.idx.size(); ++w) {
      const uint32_t i = l.idx[w].i;
      const size_t r = l.first + w;  // its row in *disk
      const uint64_t key = keys[i];
      uint32_t node = stripe.Find(key);
      if (node != kNoNode) {  // made resident meanwhile by a concurrent pull
        Pin(stripe.meta(node), epoch);
        stripe.ReadRow(node, out, i);
        pins->nodes_[i] = {static_cast<uint32_t>(s), node};
        ++hits;
        continue;
      }
      if (!disk->found[r]) {  // a Bloom filter false positive
        ++false_positives;
        NewRow(stripe, s, i, key, accessor, out, pins);
        continue;
      }
      node = stripe.Insert(key);
      stripe.WriteRow(node, disk->rows, r);
      NodeMeta& m = stripe.meta(node);
      stripe.set_state(node, kOnDisk | (disk->rows.has_emb(r) ? kDiskEmb : 0));
      Pin(m, epoch);
      out->CopyRow(disk->rows, r, i);
      pins->nodes_[i] = {static_cast<uint32_t>(s), node};
      ++loaded;
    }
  }
  Account(stripe, s);
  counters_->loaded_from_ssd.fetch_add(loaded, std::memory_order_relaxed);
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
                                       RowBlock* out, ThreadPool* pool,
                                       const uint8_t* overwritten) {
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
  GroupByStripe(keys, n, &order, &begin);
  const size_t S = stripes_.size();
  std::vector<std::vector<Load>> loads(S);
  // Each stripe task waits for the budget before inserting its share of the pass, so the cache
  // overshoots by at most a few stripes' share of one pass.
  std::vector<Status> waited(S);
  RunParallel(pool, S, [&](size_t s, int) {
    waited[s] = WaitForBudget(/*own_pulls=*/1);
    if (!waited[s].ok()) return;
    PullResident(s, keys, order.data() + begin[s], begin[s + 1] - begin[s], accessor, overwritten,
                 out, &pins, &loads[s]);
  });
  for (const Status& w : waited) RETURN_IF_ERROR(w);
  counters_->pulled_keys.fetch_add(n, std::memory_order_relaxed);
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
  const size_t S = stripes_.size();
  std::vector<std::vector<uint32_t>> by_stripe(S);
  for (size_t i = 0; i < pins->nodes_.size(); ++i) {
    if (pins->nodes_[i].first != kNotPinned) by_stripe[pins->nodes_[i].first].push_back(i);
  }
  RunParallel(pool, S, [&](size_t s, int) {
    if (by_stripe[s].empty()) return;
    CacheStripe& stripe = *stripes_[s];
    CacheStripe::Lock lock(stripe);
    const std::vector<uint32_t>& rows_of = by_stripe[s];
    for (size_t c = 0; c < rows_of.size(); c += kChunk) {  // in chunks, as a pull does
      const size_t end = std::min(rows_of.size(), c + kChunk);
      for (size_t k = c; k < end; ++k) {
        stripe.PrefetchNode(pins->nodes_[rows_of[k]].second, /*write=*/true);
      }
      for (size_t k = c; k < end; ++k) {
        stripe.PrefetchEmb(pins->nodes_[rows_of[k]].second, /*write=*/true);
      }
      for (size_t k = c; k < end; ++k) {
        const uint32_t i = rows_of[k];
        const uint32_t node = pins->nodes_[i].second;
        assert(stripe.key(node) == rows.key(i));
        stripe.WriteRow(node, rows, i);
        NodeMeta& m = stripe.meta(node);
        stripe.set_state(node, (m.state | kDirty) & ~kFresh);
        --m.pins;
      }
    }
    Account(stripe, s);
  });
  pins->nodes_.clear();
  pins->table_ = nullptr;
  OnUnpinned();
  return error();
}

void TieredTable::Release(PinnedRows* pins) {
  const size_t S = stripes_.size();
  std::vector<std::vector<uint32_t>> by_stripe(S);
  for (const auto& [s, node] : pins->nodes_) {
    if (s != kNotPinned) by_stripe[s].push_back(node);
  }
  for (size_t s = 0; s < S; ++s) {
    if (by_stripe[s].empty()) continue;
    CacheStripe& stripe = *stripes_[s];
    CacheStripe::Lock lock(stripe);
    for (uint32_t node : by_stripe[s]) --stripe.meta(node).pins;
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
        &c.pulled_keys,   &c.hits,      &c.loaded_from_ssd, &c.new_keys,
        &c.lookup_misses, &c.no_record, &c.bloom_prunes,    &c.bloom_false_positives};
    uint64_t before[std::size(looked)];
    for (size_t k = 0; k < std::size(looked); ++k) before[k] = looked[k]->load();
    RowBlock found(options_.layout);
    ASSIGN_OR_RETURN(pins, Pull(keys.data(), keys.size(), /*accessor=*/nullptr, &found, pool));
    for (size_t k = 0; k < std::size(looked); ++k) looked[k]->store(before[k]);
  } else {
    RETURN_IF_ERROR(WaitForBudget());
  }
  std::vector<uint32_t> order, begin;
  GroupByStripe(keys.data(), keys.size(), &order, &begin);
  RunParallel(pool, stripes_.size(), [&](size_t s, int) {
    CacheStripe& stripe = *stripes_[s];
    CacheStripe::Lock lock(stripe);
    for (uint32_t k = begin[s]; k < begin[s + 1]; ++k) {
      const uint32_t i = order[k];
      uint32_t node = kNoNode;
      if (ssd_ && pins.nodes_[i].first != kNotPinned) {  // in memory, or read from disk
        node = pins.nodes_[i].second;
        --stripe.meta(node).pins;
      } else {
        node = stripe.Find(keys[i]);
        if (node == kNoNode) node = stripe.Insert(keys[i]);  // a new key
      }
      stripe.WriteRow(node, rows, i);
      NodeMeta& m = stripe.meta(node);
      stripe.set_state(node, (m.state | kDirty) & ~kFresh);
    }
    Account(stripe, s);
  });
  if (ssd_) {
    pins.nodes_.clear();
    pins.table_ = nullptr;
    OnUnpinned();
  }
  return WaitForBudget();
}

}  // namespace ctrbox
