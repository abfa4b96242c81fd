// GpuStep: the train stage on N GPUs (docs/gpu.md), written once against an executor
// (exec/exec.h): CudaExec (gpu/cuda_trainer.cu) runs it on CUDA streams, HostExec
// (gpu/trainer.cc) on host threads — the emulation the CPU-only tests run.
//
// A pass goes through two calls:
//   Stage (pull stage, copy queues): plans the pass over the GPUs (gpu/hbm_plan.h), uploads
//     each owner's rows and builds its hash index, uploads the examples, and looks up the rows
//     of the keys every GPU will ask each owner for (the key -> row lookup).
//   Train (train stage, compute queues): re-uploads rows that passes in flight changed, then
//     per minibatch: owners gather the asked rows, the exchange copies them to the asking
//     GPUs, each GPU pools its slice's embeddings and runs the MLP (forward, loss, backward)
//     on its replica, reduces its gradients per key and sends them to the owners; the dense
//     gradients are all-reduced and every replica takes the same step; owners accumulate the
//     sparse gradients per row and update each row once (optimizer, quantization, counters,
//     embedding creation). At the end the rows come back into the host's RowBlock.
//
// The class is split by concern, as RocksDB splits DBImpl: this header declares it; the
// definitions are in step_stage.h (Stage, the constructor, patches, buffer sizing),
// step_train.h (Train and the minibatch loop), step_exchange.h (rows to the asking GPUs,
// gradients back to the owners), step_forward.h, step_backward.h (the dense model on a
// slice), step_sparse.h (per-key gradients, row updates), step_dense.h (all-reduce,
// optimizer step) and step_canonical.h (train.deterministic's canonical sums);
// gpu/step_impl.h includes them all for the two files that instantiate it.
//
// Every kernel body is a CTRBOX_HD lambda over an index: the same code on the GPU and in the
// host emulation. Thread safety: Stage and Train may run on two threads (the pipeline's pull
// and train stages) for different passes; neither is reentrant.
#ifndef CTRBOX_GPU_STEP_H_
#define CTRBOX_GPU_STEP_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "exec/options.h"
#include "gpu/hbm_index.h"
#include "gpu/hbm_plan.h"
#include "gpu/step_buffers.h"
#include "gpu/trainer.h"
#include "io/batch.h"
#include "model/cross_mix.h"
#include "model/ctr_model.h"
#include "model/towers.h"
#include "table/accessor.h"
#include "table/value.h"
#include "util/status.h"
#include "util/thread_pool.h"
#include "working/working_set.h"

namespace ctrbox {

template <class Exec>
class GpuStep {
 public:
  template <class T>
  using Buf = typename Exec::template Buffer<T>;
  using DeviceRows = GpuDeviceRows<Exec>;
  using Part = GpuOwnerPart<Exec>;
  using Feed = GpuFeed<Exec>;
  using Staged = GpuStagedPass<Exec>;
  using Replica = GpuReplica<Exec>;
  using Event = typename Exec::Event;
  using Layer = GpuLayer;

  // compute[g], copy[g]: GPU g's two queues (they may be the same executor). all_reduce, if
  // set, sums n floats at ptrs[g] across the GPUs in place and returns true; if unset or it
  // returns false, the step sums through GPU 0 in GPU order.
  using AllReduceFn = bool (*)(void* ctx, const std::vector<float*>& ptrs, size_t n);
  GpuStep(CtrModel* model, const CtrAccessor& accessor, const GpuOptions& options,
          std::vector<Exec*> compute, std::vector<Exec*> copy, AllReduceFn all_reduce = nullptr,
          void* all_reduce_ctx = nullptr);

  // Uploads pass `pass_index` (its rows as pulled) to the GPUs; host work on `pool` (may be
  // null).
  Status Stage(uint64_t pass_index, const Batch& pass, const WorkingSet& ws, const RowBlock& rows,
               ThreadPool* pool);

  // Trains the staged pass `pass_index`: `patched` lists the local ids whose rows in `rows`
  // changed since Stage (rows taken from passes in flight). On return `rows` holds the
  // trained rows, predictions[r] the prediction of row r before its minibatch's update, and
  // *created the embeddings created. Host work on `pool` (may be null).
  //
  // With `ranks` (a distributed job; docs/distributed.md, "GPUs across ranks") the step runs
  // every global minibatch of the pass (empty ones past this rank's share), sums the dense
  // gradient over the ranks too, and the rows are not updated on the GPUs: each minibatch's
  // per-key gradient sums go to the host and through ranks->ReduceSparse, which has the
  // owners update their rows and brings back the changed rows this rank uses next, re-uploaded
  // before the next minibatch. `rows` then holds this rank's copies as refreshed (the owners'
  // served rows are the trained ones), and *created the embeddings its served rows created.
  Status Train(uint64_t pass_index, const Batch& pass, const WorkingSet& ws,
               const std::vector<uint32_t>& patched, RowBlock* rows, float* predictions,
               uint64_t* created, RankExchange* ranks, ThreadPool* pool);

  // Forgets the staged pass `pass_index` once its uploads are done (train.dry_run).
  Status Drop(uint64_t pass_index);

  // Bytes of the GPU buffers that hold staged passes (every staged pass's rows, keys,
  // indexes, examples and exchange buffers): their high-water mark, since buffers only grow.
  // Not while a Stage runs.
  uint64_t StagedBytes() const;
  // What the train stage's side of the step did so far; called on the train stage's thread,
  // or when no Train runs.
  GpuStepStats Stats() const { return stats_; }

  // ---- pieces (public: CUDA's extended lambdas may not sit in private members) -------------

  // One slice's (minibatch b, GPU g) run through the dense model: what Forward leaves for
  // Backward and the key gradients.
  // Only its shape (B) is a host value: where the slice's rows start and what the minibatch's
  // other counts are, the kernels read from the GPU's current minibatch arguments
  // (GpuReplica::now), so that a recorded minibatch replays for any other of its shape.
  struct SliceRun {
    size_t b = 0, si = 0;
    uint32_t g = 0, B = 0;
    const float* mlp_input = nullptr;  // the MLP's (or the towers') input
    TowerRows towers;
    // Where Backward writes the weight gradients (null: the replica's grads), and where the
    // per-key gradients read dx and dlogit (null: the replica's).
    float* grads = nullptr;
    const float *dx = nullptr, *dlogit = nullptr;
  };

  // The dense parameters: the MLP's, then the cross layers', then the bottom MLP's.
  size_t NumParams() const { return model_->dense_params().size(); }
  // Floats per row in the exchange: embedding, wide, has-embedding flag (rows to the asking
  // GPU), or embedding gradient, wide gradient, shows, clicks (gradients to the owner).
  // (embedding: the widest table's dimension, RowDim(); a smaller table's key leaves the rest
  // zero.)
  uint32_t RowDim() const { return model_->SparseRecordWidth() - 3; }
  uint32_t FetchStride() const { return RowDim() + 2; }
  uint32_t GradStride() const { return RowDim() + 3; }

  // step_stage.h
  void StageOwner(Staged& s, uint32_t o, const WorkingSet& ws, const RowBlock& rows,
                  ThreadPool* pool);
  void StageFeed(Staged& s, uint32_t g, const Batch& pass, const WorkingSet& ws);
  void UploadRows(Exec& e, const HostRows& h, DeviceRows* d);
  void QueueRowsDownload(Exec& e, DeviceRows& d, HostRows* h);
  void Patch(Staged& s, const RowBlock& rows, const std::vector<uint32_t>& patched,
             ThreadPool* pool);
  void EnsureWork(Staged& s);
  void EnsureInteractionWork(Exec& e, Replica& r, size_t B);
  // step_train.h
  void PrepareArgs(Staged& s, uint32_t minibatches, RankExchange* ranks);
  // Minibatch b's rows (its slices').
  uint32_t MinibatchRows(const HbmPlan& plan, size_t b) const {
    return plan.slice(b, gpus_ - 1).row_end - plan.slice(b, 0).row_begin;
  }
  void NextArgs();
  Status TrainMinibatches(Staged& s, const Batch& pass);
  void TrainMinibatch(Staged& s, const Batch& pass, size_t b);
  void PhaseMark();
  Status TrainRankMinibatch(Staged& s, const Batch& pass, uint32_t b, RankExchange* ranks,
                            RowBlock* rows, uint64_t* created, ThreadPool* pool);
  Status AppendRankRecords(Staged& s, uint32_t b, uint32_t o, const float* records,
                           uint32_t per_row);
  Status FinishPass(Staged& s, const Batch& pass, RowBlock* rows, float* predictions,
                    uint64_t* created, bool rows_back, ThreadPool* pool);
  Status LostKeys(const std::vector<uint32_t>& bad);
  void AddPhases();
  // step_exchange.h
  void ExchangeRows(Staged& s, size_t b);
  void GatherRows(Staged& s, uint32_t o);
  void SumGradients(Staged& s, size_t b, uint32_t o, const std::vector<Event>& reduced);
  std::vector<Event> RecordAll();
  // step_forward.h
  // rows: the slice's rows (~0u), or the first `rows` of them from GpuMinibatchArgs::row0.
  SliceRun Forward(Staged& s, const Batch& pass, size_t b, uint32_t g, uint32_t rows = ~0u);
  void Inputs(Staged& s, const Batch& pass, const SliceRun& run);
  void OutputAndLoss(Staged& s, const SliceRun& run, const float* input, const Layer& last);
  const float* InteractionsForward(Replica& rep, uint32_t B, uint32_t S, uint32_t dim);
  void BottomForward(Replica& rep, uint32_t B);
  MixRows MixPointers(Replica& rep, uint32_t B);
  TowerRows TowerPointers(Replica& rep, const float* base);
  static void ReluLayer(Exec& e, const Layer& ly, const float* params, const float* input,
                        uint32_t B, float* y);
  // step_backward.h
  void Backward(const SliceRun& run);
  void MlpBackward(const SliceRun& run, float* din, uint32_t from);
  void InteractionsBackward(Replica& rep, uint32_t B, uint32_t S, uint32_t dim);
  void BottomBackward(Replica& rep, uint32_t B);
  void WeightGrads(const SliceRun& run);
  void TowerWeightGrads(Replica& rep, const TowerRows& p, uint32_t B, float* grads);
  void CrossWeightGrads(Replica& rep, uint32_t B, float* grads);
  void BottomWeightGrads(Replica& rep, uint32_t B, float* grads);
  static void ReluBackprop(Exec& e, const Layer& ly, const float* params, const float* g,
                           const float* a_prev, uint32_t B, float* g_prev);
  static void LayerWeightGrads(Exec& e, const Layer& ly, const float* xin, const float* gout,
                               uint32_t B, float* grads);
  // step_canonical.h (train.deterministic: the CPU model's canonical sums)
  bool Canonical() const {
    return gpus_ <= kMaxCanonicalGpus && options_.scatter == ScatterMode::kSegment &&
           model_->sum_order().canonical;
  }
  void CutSums(uint32_t rows, GpuSumCut* rank, std::vector<GpuSumCut>* per_gpu) const;
  void SliceStarts(uint32_t rows, std::vector<uint32_t>* starts) const;
  const GpuSumCut& CutOf(uint32_t g) const { return gpus_ == 1 ? cut_ : gpu_cuts_[g]; }
  static void AddInto(Exec& e, float* a, const float* b, size_t n);
  static void MoveRow0(Exec& e, GpuMinibatchArgs* now, uint32_t by);
  SliceRun CanonicalForwardBackward(Staged& s, const Batch& pass, size_t b, uint32_t g);
  void CanonicalGpuDense();
  void CanonicalKeySums(Staged& s, const Batch& pass, const SliceRun& run);
  void CanonicalOwnerSums(Staged& s, size_t b, uint32_t o, const std::vector<Event>& reduced);
  Status CanonicalRankSums(bool mine, RankExchange* ranks);
  // step_sparse.h
  void KeyGradients(Staged& s, const Batch& pass, const SliceRun& run);
  void UpdateRows(Staged& s, uint32_t o, const float* in_touched_order);
  // step_dense.h
  void AllReduceDense();
  void BroadcastDense();
  void DenseUpdate(uint32_t g);

  CtrModel* const model_;
  const CtrAccessor accessor_;
  const GpuOptions options_;
  const uint32_t gpus_;
  std::vector<Exec*> compute_, copy_;
  AllReduceFn all_reduce_;
  void* all_reduce_ctx_;
  std::vector<Layer> layers_;
  std::vector<Layer> bottom_layers_;  // offsets into the whole dense parameter vector
  std::vector<Staged> staged_;
  std::vector<Replica> replicas_;
  // Train stage: per owner GPU, the rows Patch re-uploads and where they go (one pair per
  // owner, so that no owner's upload replaces a buffer another owner's queue still reads).
  std::vector<DeviceRows> patch_rows_;
  std::vector<Buf<uint32_t>> patch_at_;
  // Train stage, with ranks: the dense gradient on the host, the touched keys' records, and
  // the local ids of the rows the owners refreshed (reused from minibatch to minibatch).
  std::vector<float> rank_dense_;
  std::vector<uint32_t> rank_locals_;
  std::vector<float> rank_records_;
  std::vector<uint32_t> rank_refreshed_;
  // Train stage: GPU 0's timing marks of the pass being trained, kPhaseMarks per minibatch
  // (see AddPhases), and the statistics so far.
  static constexpr int kPhaseMarks = 6;
  std::vector<typename Exec::TimeMark> marks_;
  GpuStepStats stats_;
  // Train stage, gpu.replay on one GPU: the last pass's recorded minibatch steps by their rows
  // (the shape: a pass has at most two, its full minibatches and its last), GPU 0's marks
  // around each replay (two per minibatch), and whether a step is being recorded (no marks).
  std::vector<std::pair<uint32_t, typename Exec::Graph>> graphs_;
  std::vector<typename Exec::TimeMark> replay_marks_;
  bool capturing_ = false;
  // Train stage, canonical sums: the current minibatch's sum blocks (the rank's, and with
  // several GPUs each GPU's), and the rank's node gradients on the host (those with rows) for
  // the ranks' sum.
  GpuSumCut cut_;
  std::vector<GpuSumCut> gpu_cuts_;
  std::vector<std::vector<float>> rank_nodes_;
};

// A GpuTrainer running a GpuStep on Exec; the backend constructs step_ over its executors.
template <class Exec>
class GpuStepTrainer : public GpuTrainer {
 public:
  Status Stage(uint64_t pass_index, const Batch& pass, const WorkingSet& ws, const RowBlock& rows,
               ThreadPool* pool) override {
    return step_->Stage(pass_index, pass, ws, rows, pool);
  }
  Status Train(uint64_t pass_index, const Batch& pass, const WorkingSet& ws,
               const std::vector<uint32_t>& patched, RowBlock* rows, float* predictions,
               uint64_t* created, RankExchange* ranks, ThreadPool* pool) override {
    return step_->Train(pass_index, pass, ws, patched, rows, predictions, created, ranks, pool);
  }
  uint64_t StagedBytes() const override { return step_->StagedBytes(); }
  Status Drop(uint64_t pass_index) override { return step_->Drop(pass_index); }
  GpuStepStats Stats() const override { return step_->Stats(); }

 protected:
  std::unique_ptr<GpuStep<Exec>> step_;
};

}  // namespace ctrbox

#endif  // CTRBOX_GPU_STEP_H_
