// TieredTable (table/tiered_table.h): the background worker (eviction rounds, compaction when
// the files grow stale, and the compaction of a file) and pulls waiting for the budget.
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
#include "util/sys.h"

namespace ctrbox {

// ---- lone victims --------------------------------------------------------------------------

size_t SpareLoneVictims(const CacheStripe& stripe,
                        const std::function<uint32_t(uint64_t)>& group_of, uint32_t min_victims,
                        const std::vector<uint32_t>& candidates, const std::vector<float>& priority,
                        size_t k, float threshold, std::vector<uint64_t>* victims,
                        std::unordered_map<uint32_t, uint32_t>* dirty_groups,
                        std::vector<uint8_t>* taken, const std::function<void(uint32_t)>& take) {
  size_t lone = 0;
  for (uint64_t key : *victims) lone += dirty_groups->at(group_of(key)) < min_victims;
  if (lone == 0) return 0;
  // The stand-ins: clean rows beyond the victims, the least used first.
  std::vector<std::pair<float, size_t>> clean;
  for (size_t v = k; v < candidates.size(); ++v) {
    if (priority[v] <= 2 * threshold && !WritesBack(stripe.meta(candidates[v]).state)) {
      clean.emplace_back(priority[v], v);
    }
  }
  const size_t n = std::min(lone, clean.size());
  if (n == 0) return 0;
  if (n < clean.size()) std::nth_element(clean.begin(), clean.begin() + (n - 1), clean.end());
  taken->assign(candidates.size() - k, 0);
  for (size_t c = 0; c < n; ++c) {
    take(candidates[clean[c].second]);
    (*taken)[clean[c].second - k] = 1;
  }
  // Spare n lone victims, in victim order (a group's victims together only if n allows).
  size_t spared = 0, out = 0;
  for (uint64_t key : *victims) {
    auto it = dirty_groups->find(group_of(key));
    if (spared < n && it != dirty_groups->end() && it->second < min_victims) {
      ++spared;
      if (--it->second == 0) dirty_groups->erase(it);
    } else {
      (*victims)[out++] = key;
    }
  }
  victims->resize(out);
  return spared;
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
    const uint64_t share = target > fixed ? (target - fixed) / stripes_.size() : 0;
    // Every stripe over its share, in parallel (each stripe under its own lock; appends to the
    // files are serialised inside the store), starting where the last round stopped.
    const size_t S = stripes_.size(), start = next_evict_stripe_;
    next_evict_stripe_ = (start + 1) % S;
    auto evict_all = [&](uint64_t stripe_share, bool all) -> StatusOr<uint64_t> {
      std::vector<StatusOr<uint64_t>> freed(S, uint64_t{0});
      RunParallel(evict_pool_.get(), S, [&](size_t k, int) {
        writer_mu_.AssertHeld();  // by Maintain, for the whole loop
        const size_t s = (start + k) % S;
        if (all || UsedBytes() > target) {
          freed[k] = EvictStripe(s, stripe_share, all);
          if (freed[k].ok() && *freed[k] > 0) {
            // A stripe that held many more rows than now gives their memory back: all of it
            // when none is pinned, else its embedding slabs (which the budget's falling share
            // for the cache leaves free as the files' filters and index grow).
            CacheStripe& stripe = *stripes_[s];
            CacheStripe::Lock lock(stripe);
            if (stripe.CompactArenas()) {
              counters_->arena_compactions.fetch_add(1, std::memory_order_relaxed);
              Account(stripe, s);
            } else if (const size_t bytes = stripe.ShrinkArenas(); bytes > 0) {
              counters_->arena_shrinks.fetch_add(1, std::memory_order_relaxed);
              counters_->arena_freed_bytes.fetch_add(bytes, std::memory_order_relaxed);
            }
          }
        }
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
      // Every stripe is within its share, yet the budget is exceeded (fixed costs, skew): take
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
  SetThreadName("ctrbox-tier");
  EnterBackground();
  // After a round that freed nothing (every row left is pinned by passes in flight), the next
  // one waits for an unpin (or the periodic tick): rescanning pinned rows frees nothing and
  // takes stripe locks and CPU from the pulls and the trainer.
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
    // A failed table (an I/O error the maintenance could not get past) does no more rounds:
    // each would fail again with writer_mu_ held most of the time, starving the stages that
    // must take it to see the error and stop (found as a hang of a fault-injection test).
    if (!error().ok()) {
      worker_cv_.WaitUntil(&worker_mu_, tick);
      continue;
    }
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
  if (UsedBytes() <= options_.memory_budget) return Status::OK();
  const NanosInto waited(&counters_->budget_wait_nanos);  // however the wait ends
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

Status TieredTable::CompactFile(const std::shared_ptr<ParamFile>& file) {
  // Walk the file's record headers; read and move only the records the index still names
  // (stale ones are skipped unread), one at a time, so memory stays small.
  const uint64_t size = ssd_->FileBytes(*file);
  struct Rec {
    uint32_t group, offset, length;
  };
  std::vector<std::vector<Rec>> by_stripe(stripes_.size());
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
    by_stripe[StripeOfGroup(group)].push_back(Rec{group, static_cast<uint32_t>(off), len});
    off += len;
  }
  uint64_t moved = 0;
  RecordView view;
  RecordBuilder builder;
  for (size_t s = 0; s < stripes_.size(); ++s) {
    if (by_stripe[s].empty()) continue;
    CacheStripe::Lock lock(*stripes_[s]);  // guards the entries of its groups
    std::vector<std::pair<uint32_t, GroupEntry>> relocated;
    std::unordered_map<uint32_t, size_t> relocated_at;  // group -> its entry in relocated
    for (const Rec& r : by_stripe[s]) {
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
      // Laid out again for its new place: its pieces are cut at the new offset's pages.
      builder.Reset(r.group);
      for (size_t j = 0; j < view.rows(); ++j) builder.AddEncoded(view.row(j), view.keys[j]);
      RETURN_IF_ERROR(ssd_->Append(&builder, place, place == &e.base ? &e.base_fences : nullptr));
      if (at == relocated_at.end()) {
        relocated_at.emplace(r.group, relocated.size());
        relocated.emplace_back(r.group, e);
      } else {
        relocated[at->second].second = e;
      }
      moved += place->length;  // (its new length: cut at other pages, it may differ)
    }
    RETURN_IF_ERROR(ssd_->FlushAppends());
    for (const auto& [g, e] : relocated) ssd_->Replace(g, e);
  }
  counters_->compactions.fetch_add(1, std::memory_order_relaxed);
  counters_->compaction_bytes.fetch_add(moved, std::memory_order_relaxed);
  return Status::OK();
}

}  // namespace ctrbox
