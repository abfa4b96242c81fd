// A pass: a fixed share of the example stream with its working set, working table and pins,
// as it moves through the stages read -> pull -> train -> push (docs/pipeline.md), and the
// clocks each stage keeps on it.
#ifndef CTRBOX_PIPELINE_PASS_H_
#define CTRBOX_PIPELINE_PASS_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/batch.h"
#include "metrics/metrics.h"
#include "pipeline/in_flight.h"
#include "pipeline/pass_reader.h"
#include "pipeline/rank_pass.h"
#include "table/sparse_table.h"
#include "util/memory_gauge.h"
#include "util/sys.h"
#include "working/working_set.h"
#include "working/working_table.h"

namespace ctrbox {

enum class StageId : int { kRead = 0, kPull = 1, kTrain = 2, kPush = 3 };
constexpr int kNumStages = 4;
constexpr std::array<StageId, kNumStages> kStages = {StageId::kRead, StageId::kPull,
                                                     StageId::kTrain, StageId::kPush};
// "read", "pull", "train", "push": the names in reports.
constexpr const char* StageName(StageId stage) {
  constexpr const char* kNames[kNumStages] = {"read", "pull", "train", "push"};
  return kNames[static_cast<int>(stage)];
}

// A stage's time: busy (working on a pass), stalled (done, blocked on a full output queue, or
// pull waiting at the shrink barrier) and idle (waiting for a pass to arrive).
struct StageClock {
  double busy = 0, stalled = 0, idle = 0;
  void Add(const StageClock& o) {
    busy += o.busy;
    stalled += o.stalled;
    idle += o.idle;
  }
};

// One clock per stage.
class StageClocks {
 public:
  StageClock& operator[](StageId s) { return c_[static_cast<int>(s)]; }
  const StageClock& operator[](StageId s) const { return c_[static_cast<int>(s)]; }
  void Add(const StageClocks& o) {
    for (StageId s : kStages) (*this)[s].Add(o[s]);
  }

 private:
  std::array<StageClock, kNumStages> c_;
};

// Working tables of passes done, kept for their memory (one at most) for the read stage's next
// pass. A table comes back when its last holder lets it go (the deleter of the shared_ptr
// Take returns runs after every holder's reads), so no one can still read a table reused.
// Counted in the gauge while kept. Passes sized by memory keep none: the bytes of the passes
// alive are bounded without it. Thread safety: thread-safe.
class TableRecycler : public std::enable_shared_from_this<TableRecycler> {
 public:
  TableRecycler(std::shared_ptr<MemoryGauge> gauge, bool keep)
      : gauge_(std::move(gauge)), keep_(keep) {}
  // A kept table (to be rebuilt: WorkingTable::Build) or a new one.
  std::shared_ptr<WorkingTable> Take(const ValueLayout& layout) EXCLUDES(mu_);

 private:
  void Keep(WorkingTable* table) EXCLUDES(mu_);
  static int64_t Bytes(const WorkingTable& t) {
    return static_cast<int64_t>(t.MemoryBytes() + t.rows().MemoryBytes());
  }
  const std::shared_ptr<MemoryGauge> gauge_;
  const bool keep_;
  Mutex mu_;
  std::unique_ptr<WorkingTable> kept_ GUARDED_BY(mu_);
};

inline std::shared_ptr<WorkingTable> TableRecycler::Take(const ValueLayout& layout) {
  std::unique_ptr<WorkingTable> t;
  {
    MutexLock l(&mu_);
    t = std::move(kept_);
  }
  if (t != nullptr) {
    gauge_->Add(-Bytes(*t));
  } else {
    t = std::make_unique<WorkingTable>(layout);
  }
  return std::shared_ptr<WorkingTable>(
      t.release(), [self = shared_from_this()](WorkingTable* w) { self->Keep(w); });
}

inline void TableRecycler::Keep(WorkingTable* table) {
  std::unique_ptr<WorkingTable> t(table);
  if (!keep_) return;
  const int64_t bytes = Bytes(*t);
  MutexLock l(&mu_);
  if (kept_ != nullptr) return;  // one is enough: this one is freed
  gauge_->Add(bytes);
  kept_ = std::move(t);
}

// Thread safety: a pass is owned by one stage at a time (it moves through the queues); its
// working table is shared read-only with the later passes pulled while it is in flight.
struct Pass {
  explicit Pass(const ValueLayout& layout) : table(std::make_shared<WorkingTable>(layout)) {}
  // A pass destroyed while registered in flight was discarded: the barrier is cancelled.
  ~Pass() {
    if (registry != nullptr) registry->Remove(index, /*pushed=*/false);
    if (gauge != nullptr) gauge->Add(-gauged);
  }
  // Tells the gauge (if any) the bytes the pass holds now: its examples, working set and
  // working table.
  void Gauge() {
    if (gauge == nullptr) return;
    const auto bytes = static_cast<int64_t>(examples.MemoryBytes() + ws.MemoryBytes() +
                                            table->MemoryBytes() + table->rows().MemoryBytes());
    gauge->Add(bytes - gauged);
    gauged = bytes;
  }
  Pass(const Pass&) = delete;
  Pass& operator=(const Pass&) = delete;

  uint64_t index = 0;  // passes of the job before this one
  PassPlace place;     // its place among the passes of pipeline.pass_examples (grid passes)
  Batch examples;
  WorkingSet ws;
  // The pass's rows; shared with later passes pulled while this one is in flight.
  std::shared_ptr<WorkingTable> table;
  PinnedRows pins;
  // A distributed job's pass: its routes and the rows this rank serves (else null).
  std::unique_ptr<RankPass> ranked;
  InFlight* registry = nullptr;  // set while registered as in flight
  // Rows to take from passes ahead of this one before training, ascending; each row from one
  // pass only, the newest in flight that holds it (TakeFromNewest, stages.cc).
  std::vector<std::pair<std::shared_ptr<const WorkingTable>, SharedRows>> ahead;
  uint64_t patched_rows = 0;
  // This pass's time in each stage (stalled: written as the pass enters the next queue; with
  // pipeline.queue_depth 0 the next stage adds the wait until it took the pass, timed by
  // handed_on from that moment).
  StageClocks clock;
  Stopwatch handed_on;
  // With a feature graph: the extract stage's worker time spent since the pass before was
  // read (the reader's workers extract ahead of the read stage; docs/features.md).
  double extract_busy = -1;
  MetricSummary metrics;
  uint64_t embeddings_created = 0;
  // The dense state right after this pass trained, when a checkpoint is due after its push
  // (the train stage goes on with later passes meanwhile).
  std::string dense_snapshot;
  MemoryGauge* gauge = nullptr;  // the passes' gauge (the train report's memory by owner)
  int64_t gauged = 0;            // what Gauge last told it
};
using PassPtr = std::unique_ptr<Pass>;

}  // namespace ctrbox

#endif  // CTRBOX_PIPELINE_PASS_H_
