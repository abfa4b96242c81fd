// TieredTable (table/tiered_table.h): opening, options and the memory accounting; PinnedRows.
// The rest of the class by concern: tiered_table_pull.cc, tiered_table_writeback.cc,
// tiered_table_worker.cc, tiered_table_scan.cc (tiered_table_internal.h: what they share).
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

#include "table/tiered_table_internal.h"
#include "util/coding.h"
#include "util/hash.h"

namespace ctrbox {

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
  for (size_t s = 0; s < (size_t{1} << options_.stripe_bits); ++s) {
    stripes_.push_back(std::make_unique<CacheStripe>(options_.layout));
  }
  accounted_.assign(stripes_.size(), 0);
  age_factors_.resize(256);
  for (size_t a = 0; a < age_factors_.size(); ++a) {
    age_factors_[a] = AgeFactor(static_cast<uint16_t>(a), options_.lfu_half_life);
  }
}

float AgeFactor(uint16_t age, double half_life) {
  return static_cast<float>(std::exp2(-static_cast<double>(age) / half_life));
}

uint64_t TieredOptions::ResidentRowBytes() const { return CacheStripe::RowBytesFor(layout); }

uint64_t TieredOptions::BloomBudgetBytes() const {
  if (memory_budget == 0 || ssd.dir.empty()) return 0;
  return std::max<uint64_t>(
      1, static_cast<uint64_t>(bloom_share * static_cast<double>(memory_budget)));
}

uint64_t TieredOptions::RowBudgetBytes() const {
  if (memory_budget == 0 || ssd.dir.empty()) return 0;
  // The group index, the Bloom filters' share and the stripes' least index.
  const uint64_t fixed = (uint64_t{1} << ssd.group_bits) * sizeof(GroupEntry) + BloomBudgetBytes() +
                         (uint64_t{1} << stripe_bits) * CacheStripe::MinIndexBytes();
  return memory_budget > fixed ? memory_budget - fixed : 0;
}

Status TieredOptions::Validate() const {
  if (stripe_bits > 12) return InvalidArgumentError("table.stripe_bits must be <= 12");
  if (ssd.dir.empty()) {
    if (memory_budget == 0) return Status::OK();
    return InvalidArgumentError(
        "storage.memory_budget needs storage.ssd_dir: without a disk tier every row stays in "
        "memory, so the budget could not be kept");
  }
  if (memory_budget == 0)
    return InvalidArgumentError("storage.ssd_dir needs storage.memory_budget");
  if (ssd.group_bits < stripe_bits + TableGroupBits(layout)) {
    return InvalidArgumentError(
        layout.multi() ? "storage.group_bits must be >= table.stripe_bits + the bits that number "
                         "model.slot_dims' tables"
                       : "storage.group_bits must be >= table.stripe_bits");
  }
  if (ssd.direct_reads && ssd.mapped_reads == MappedReads::kOn) {
    return InvalidArgumentError(
        "storage.direct_reads and storage.mapped_reads: the files are read one way, not both");
  }
  if (!(bloom_share > 0 && bloom_share <= 0.5)) {
    return InvalidArgumentError("storage.bloom_share must be in (0, 0.5]");
  }
  if (!(lfu_half_life > 0 && lfu_half_life <= 1e6)) {
    return InvalidArgumentError("storage.lfu_half_life must be in (0, 1e6]");
  }
  if (!(dirty_weight >= 1 && dirty_weight <= 1e6)) {
    return InvalidArgumentError("storage.dirty_weight must be in [1, 1e6]");
  }
  if (!(delta_share > 0 && delta_share <= 4)) {
    return InvalidArgumentError("storage.delta_share must be in (0, 4]");
  }
  if (io_threads < 1 || io_threads > 256) {
    return InvalidArgumentError("storage.io_threads must be in [1, 256]");
  }
  if (device_io_threads < 0 || device_io_threads > 256) {
    return InvalidArgumentError("storage.device_io_threads must be in [0, 256]");
  }
  if (evict_stop >= evict_start) {
    return InvalidArgumentError("storage.evict_stop must be below storage.evict_start");
  }
  return Status::OK();
}

StatusOr<std::unique_ptr<TieredTable>> TieredTable::Open(Env* env, const TieredOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<TieredTable> t(new TieredTable(env, options));
  for (size_t s = 0; s < t->stripes_.size(); ++s) {
    const CacheStripe& stripe = *t->stripes_[s];
    CacheStripe::Lock l(stripe);
    t->Account(stripe, s);
  }
  if (options.ssd.dir.empty()) return t;
  if (!options.dir_held) {
    ASSIGN_OR_RETURN(t->dir_lock_, DirLock::Acquire(env, options.ssd.dir, "storage.ssd_dir"));
  }
  SsdOptions ssd = options.ssd;
  ssd.bloom_budget = options.BloomBudgetBytes();
  ssd.stripe_bits = options.stripe_bits;
  if (options.reopen) {
    ASSIGN_OR_RETURN(t->ssd_, SsdStore::Reopen(env, ssd, options.layout));
  } else {
    ASSIGN_OR_RETURN(t->ssd_, SsdStore::Create(env, ssd, options.layout));
  }
  if (t->ssd_->group_bits() < options.stripe_bits) {
    return InvalidArgumentError("the reopened store has fewer groups than the table has stripes");
  }
  if (t->ssd_->MemoryBytes() >= options.memory_budget / 2) {
    return InvalidArgumentError(fmt::format(
        "storage.memory_budget ({}) is too small: the group index and Bloom filters alone take "
        "{}; lower storage.group_bits",
        options.memory_budget, t->ssd_->MemoryBytes()));
  }
  // One loop a pull and one a write-back batch, far apart: no spinning between them. The
  // pools are made by the job's own thread, and run at its background threads' priority.
  const auto pool = [](int threads, const char* name) {
    return threads > 1 ? std::make_unique<ThreadPool>(threads, name, ThreadPool::Wait::kSleep,
                                                      ThreadPool::Priority::kBackground)
                       : nullptr;
  };
  t->io_pool_ = pool(options.io_threads, "ctrbox-ssd-io");
  if (options.DeviceIoThreads() != options.io_threads)
    t->device_io_pool_ = pool(options.DeviceIoThreads(), "ctrbox-dev-io");
  t->writeback_io_pool_ = pool(options.DeviceIoThreads(), "ctrbox-wb-io");
  if (options.evict_threads > 1)
    t->evict_pool_ = std::make_unique<ThreadPool>(options.evict_threads, "ctrbox-evict",
                                                  ThreadPool::Wait::kSpinThenSleep,
                                                  ThreadPool::Priority::kBackground);
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
  for (const auto& s : stripes_) {
    const CacheStripe& stripe = *s;
    CacheStripe::Lock l(stripe);
    stripe.ForEachNode([&](uint32_t n) {
      stripe.AssertLocked();
      assert(stripe.meta(n).pins == 0 && "rows left pinned");
    });
  }
#endif
}

size_t TieredTable::StripeOf(uint64_t key) const {
  return options_.stripe_bits == 0 ? 0 : Mix64(key) >> (64 - options_.stripe_bits);
}

void TieredTable::GroupByStripe(const uint64_t* keys, size_t n, std::vector<uint32_t>* order,
                                std::vector<uint32_t>* begin) const {
  const size_t S = stripes_.size();
  std::vector<uint16_t> stripe_of(n);
  begin->assign(S + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    stripe_of[i] = static_cast<uint16_t>(StripeOf(keys[i]));
    ++(*begin)[stripe_of[i] + 1];
  }
  for (size_t s = 0; s < S; ++s) (*begin)[s + 1] += (*begin)[s];
  std::vector<uint32_t> fill(begin->begin(), begin->end() - 1);
  order->resize(n);
  for (size_t i = 0; i < n; ++i) (*order)[fill[stripe_of[i]]++] = static_cast<uint32_t>(i);
}

void TieredTable::Account(const CacheStripe& stripe, size_t s) {
  const size_t now = stripe.MemoryBytes();
  used_.fetch_add(now - accounted_[s], std::memory_order_relaxed);  // wraps on decrease
  accounted_[s] = now;
  const uint64_t used = UsedBytes();
  uint64_t peak = peak_used_.load(std::memory_order_relaxed);
  while (used > peak && !peak_used_.compare_exchange_weak(peak, used)) {
  }
}

CacheMemory TieredTable::CacheBreakdown() const {
  CacheMemory m;
  for (const auto& stripe : stripes_) {
    CacheStripe::Lock l(*stripe);
    m += stripe->Memory();
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

}  // namespace ctrbox
