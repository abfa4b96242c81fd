// GpuTrainer: the train stage on GPUs (`device: gpu`; docs/gpu.md). The pass's working
// parameters live in GPU memory, partitioned over the GPUs by key (the HBM-PS of HPS §4),
// the MLP runs on cuBLAS with dense parameters replicated per GPU, and the CPU tiers feed it
// through the pipeline: Stage in the pull stage, Train in the train stage.
//
// Two implementations of one step (gpu/step.h): CUDA (built when nvcc is found), and
// a host emulation that runs the same kernel bodies on CPU threads (gpu.emulate), which the
// tests use on machines without a GPU. The host CtrModel stays the source of truth between
// passes: Train writes the trained dense state back into it, so checkpoints, export and
// evaluation are unchanged.
//
// Thread safety: Stage and Train may run concurrently on two threads for different passes.
#ifndef CTRBOX_GPU_TRAINER_H_
#define CTRBOX_GPU_TRAINER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "exec/exec.h"
#include "exec/options.h"
#include "io/batch.h"
#include "model/ctr_model.h"
#include "table/accessor.h"
#include "table/value.h"
#include "util/status.h"
#include "util/thread_pool.h"
#include "working/working_set.h"

namespace ctrbox {

// The other ranks of a distributed job, as the GPU step meets them (docs/distributed.md,
// "GPUs across ranks"). Per global minibatch of the pass, after this rank's GPUs summed their
// dense gradient and each key's gradient records: the dense gradient is summed over the
// ranks, and the records go to the keys' owners, which update their rows on the host and send
// back the changed rows of the keys this rank uses in its next minibatch. Implemented by the
// pipeline (pipeline/rank_pass.h) over the ranks' transport.
class RankExchange {
 public:
  virtual ~RankExchange() = default;
  // The pass's global minibatches: at least this rank's (a rank whose share ran out trains
  // empty ones), and the rows of minibatch m over all ranks (the loss is their mean).
  virtual uint32_t minibatches() const = 0;
  virtual uint32_t global_rows(uint32_t m) const = 0;
  // Sums n floats over the ranks in place, in rank order (collective).
  virtual Status AllReduceDense(float* grads, size_t n) = 0;
  // Canonical sums (CtrModel::SumOrder, train.deterministic): this rank's nodes of the sum
  // tree, n floats at grads[i] for the node whose first position is leaves[i] (increasing;
  // the nodes without rows left out, so `nodes` may be 0), added up the tree with every
  // rank's into out: one process's sum, bit for bit (collective).
  virtual Status AllReduceDenseTree(const uint32_t* leaves, const float* const* grads, size_t nodes,
                                    size_t n, float* out) = 0;
  // After the dense step of minibatch m: records[i * width ..] is this rank's summed gradient
  // record (CtrModel::SparseRecordWidth; with canonical sums one per node of
  // CtrModel::sum_nodes(), width x nodes) of local id locals[i] (distinct; n may be 0). The
  // owners apply the sums; the rows this rank uses in minibatch m + 1 that changed are
  // written into *rows and their local ids appended to *refreshed; *created gets the
  // embeddings this rank's served rows created. Collective.
  virtual Status ReduceSparse(uint32_t m, const uint32_t* locals, const float* records, size_t n,
                              RowBlock* rows, std::vector<uint32_t>* refreshed,
                              uint64_t* created) = 0;
};

// What the train stage's side of a GpuTrainer did (cumulative; GpuTrainer::Stats).
struct GpuStepStats {
  uint64_t passes = 0, minibatches = 0;
  // The compute queues' calls (exec/exec.h: kernel launches, copies, host synchronizations),
  // constructor and Train together, as the executor counts them (the host emulation counts
  // the same calls a GPU would see).
  ExecCounters train;
  // The same calls inside the minibatch loops alone (one box: gpu.replay's target is one
  // replay per minibatch and nothing else: no launch, copy, synchronization or allocation).
  ExecCounters minibatch_calls;
  // GPU 0's queue time per phase of a minibatch, from timing marks on its queue (CUDA events;
  // in the emulation, host time): rows gathered and exchanged; inputs, MLP forward and loss;
  // backward and weight gradients; dense all-reduce and optimizer step; per-key gradients,
  // their reduction at the owners and the row updates.
  // Replayed minibatches (gpu.replay) are timed whole: replayed_seconds, their queue time;
  // captures, the steps recorded (one per minibatch shape per pass).
  double exchange_seconds = 0, forward_seconds = 0, backward_seconds = 0, dense_seconds = 0,
         sparse_seconds = 0, replayed_seconds = 0;
  uint64_t captures = 0;
  // The pull stage's host time in Stage, per part (docs/gpu.md, "Speed"): waiting for the copy
  // queues' previous pass (Recycle); the plan (BuildHbmPlan); the owners' rows and keys gathered,
  // copied into pinned staging and queued, and their index built; the examples and the plan's
  // lists copied and queued (feed). Written by the pull thread only.
  double stage_wait_seconds = 0, stage_plan_seconds = 0, stage_rows_seconds = 0,
         stage_feed_seconds = 0;
  double gpu_seconds() const {
    return exchange_seconds + forward_seconds + backward_seconds + dense_seconds + sparse_seconds +
           replayed_seconds;
  }
};

class GpuTrainer {
 public:
  // The CUDA backend, or the host emulation when options.emulate (pool: its threads, may be
  // null). `model` must outlive the trainer; it is updated after every pass.
  static StatusOr<std::unique_ptr<GpuTrainer>> Create(CtrModel* model, const CtrAccessor& accessor,
                                                      const GpuOptions& options, ThreadPool* pool);
  virtual ~GpuTrainer() = default;

  // Uploads pass `pass_index` (its rows as pulled) to the GPUs; the host's share of the work
  // (the plan, row gathers, staging copies) on `pool` (may be null).
  virtual Status Stage(uint64_t pass_index, const Batch& pass, const WorkingSet& ws,
                       const RowBlock& rows, ThreadPool* pool) = 0;
  // Trains the staged pass; see GpuStep::Train. ranks: the other ranks of a distributed job
  // (null on one box). Host work (row patches, the rows back) on `pool` (may be null).
  virtual Status Train(uint64_t pass_index, const Batch& pass, const WorkingSet& ws,
                       const std::vector<uint32_t>& patched, RowBlock* rows, float* predictions,
                       uint64_t* created, RankExchange* ranks, ThreadPool* pool) = 0;
  // Drops the staged pass `pass_index` untrained (train.dry_run) once its uploads are done.
  virtual Status Drop(uint64_t pass_index) = 0;
  // What the train stage's side did so far; on the train stage's thread, or between runs.
  virtual GpuStepStats Stats() const = 0;
  // Bytes of GPU memory the staged passes' buffers reached (their high-water mark, over all
  // GPUs); call between passes.
  virtual uint64_t StagedBytes() const = 0;
  // What runs the step ("host emulation, 2 GPUs", "1 x NVIDIA H100 80GB HBM3 (sm_90) ...").
  virtual std::string Describe() const = 0;
};

// What one pass staged on the GPUs may take at most (GpuTrainer::StagedBytes of a slot): its
// rows with keys and hash index, the examples and plan copied to every GPU, the exchange lists
// and the per-minibatch buffers. The pass: `rows` examples whose columns take content_bytes
// (Batch::ContentBytes), `key_uses` key occurrences, `keys` distinct keys, `batches`
// minibatches whose distinct keys add up to batch_keys, the most in one max_batch_keys;
// rows of `layout` and an MLP over dim-wide embeddings, on `gpus` GPUs.
struct GpuPassShape {
  uint64_t rows = 0, content_bytes = 0, key_uses = 0, keys = 0, batches = 0, batch_keys = 0,
           max_batch_keys = 0;
};
// With canonical sums (train.deterministic) a GPU keeps a gradient record per key for each
// node of the sums' tree its slice of a minibatch is made of, receives the asking GPUs' records
// per node, and (several GPUs) sums them per node of the rank's share: the most nodes a GPU's
// slice and the rank's share take (1 and 1 without canonical sums).
struct GpuSumNodes {
  bool canonical = false;
  uint32_t gpu = 1, rank = 1;
};
// Those of a rank holding `order`'s share of every global minibatch on `gpus` GPUs (the cut of
// GpuStep::CutSums, over every minibatch length a pass may end with).
GpuSumNodes MostSumNodes(const CtrModel::SumOrder& order, uint32_t gpus);
uint64_t GpuPassBytesBound(const GpuPassShape& pass, const ValueLayout& layout, uint32_t gpus,
                           const GpuSumNodes& nodes = {});

// The GPUs the driver reports (0 with the reason in *why when there are none, or when this
// binary has no CUDA backend).
int CudaDeviceCount(std::string* why);
// The memory of GPU `device` in bytes (0 with the reason in *why when it cannot be had).
uint64_t CudaDeviceMemory(int device, std::string* why);
// gpu.staged_memory's default: with a GPU and options->staged_memory 0, half of GPU 0's memory
// (the rest holds the dense model, activations and the libraries' workspaces); unchanged
// with emulate or a set value. Fails when no GPU can be asked.
Status ResolveGpuStagedMemory(GpuOptions* options);

}  // namespace ctrbox

#endif  // CTRBOX_GPU_TRAINER_H_
