// GpuStep (gpu/step.h), the train stage's half: Train, its minibatch loop on one box and
// across ranks, and the pass's results back to the host. Included by gpu/step_impl.h only.
#ifndef CTRBOX_GPU_STEP_TRAIN_H_
#define CTRBOX_GPU_STEP_TRAIN_H_

#include <algorithm>
#include <string>

#include "gpu/step.h"

namespace ctrbox {

template <class Exec>
Status GpuStep<Exec>::Train(uint64_t pass_index, const Batch& pass, const WorkingSet& ws,
                            const std::vector<uint32_t>& patched, RowBlock* rows,
                            float* predictions, uint64_t* created, RankExchange* ranks,
                            ThreadPool* pool) {
  Staged& s = staged_[pass_index % staged_.size()];
  if (s.pass_index != pass_index) {
    return InternalError("GPU backend: pass " + std::to_string(pass_index) + " was not staged");
  }
  const HbmPlan& plan = s.plan;
  for (uint32_t g = 0; g < gpus_; ++g) {
    compute_[g]->Recycle();
    compute_[g]->UseHostPool(pool);
    compute_[g]->Wait(s.staged[g]);
  }
  for (uint32_t o = 0; o < gpus_; ++o) {
    uint32_t bad = 0;
    compute_[o]->Download(&bad, s.parts[o].status.data(), 1);
    RETURN_IF_ERROR(compute_[o]->status());
    if (bad != 0) {
      return InternalError("GPU backend: the working table of GPU " + std::to_string(o) + " lost " +
                           std::to_string(bad) + " keys (insert or lookup failed)");
    }
  }
  if (!patched.empty()) Patch(s, *rows, patched, pool);
  EnsureWork(s);
  marks_.clear();
  uint64_t total_created = 0;
  if (ranks != nullptr) {
    if (ranks->minibatches() < plan.minibatches()) {
      return InternalError("GPU backend: the ranks agree on fewer minibatches than the pass has");
    }
    for (uint32_t b = 0; b < ranks->minibatches(); ++b) {
      RETURN_IF_ERROR(TrainRankMinibatch(s, pass, b, ranks, rows, &total_created, pool));
    }
    stats_.minibatches += ranks->minibatches();
  } else {
    for (size_t b = 0; b < plan.minibatches(); ++b) TrainMinibatch(s, pass, b);
    stats_.minibatches += plan.minibatches();
  }
  uint64_t c = 0;
  RETURN_IF_ERROR(FinishPass(s, pass, rows, predictions, &c, ranks == nullptr, pool));
  *created = total_created + c;
  AddPhases();
  ++stats_.passes;
  stats_.train = ExecCounters();
  for (const Exec* e : compute_) stats_.train.Add(e->counters());
  s.pass_index = ~uint64_t{0};
  return Status::OK();
}

template <class Exec>
Status GpuStep<Exec>::Drop(uint64_t pass_index) {
  Staged& s = staged_[pass_index % staged_.size()];
  if (s.pass_index != pass_index) {
    return InternalError("GPU backend: pass " + std::to_string(pass_index) + " was not staged");
  }
  for (uint32_t g = 0; g < gpus_; ++g) {
    compute_[g]->Wait(s.staged[g]);
    compute_[g]->Synchronize();
    RETURN_IF_ERROR(compute_[g]->status());
  }
  s.pass_index = ~uint64_t{0};
  ++stats_.passes;
  return Status::OK();
}

// One minibatch on one box: exchange, forward, backward, dense step, sparse step; each phase
// on every GPU before the next, and GPU 0's queue marked between them.
template <class Exec>
void GpuStep<Exec>::TrainMinibatch(Staged& s, const Batch& pass, size_t b) {
  const HbmPlan& plan = s.plan;
  const uint32_t N = gpus_;
  Exec& e0 = *compute_[0];
  marks_.push_back(e0.Mark());
  // 1. Owners gather the rows each GPU asked for; the exchange copies them over.
  ExchangeRows(s, b);
  marks_.push_back(e0.Mark());
  // 2. Each GPU: inputs, MLP forward, loss; then backward and the weight gradients.
  model_->dense_optimizer().BeginStep();
  const DenseStep step = model_->dense_optimizer().CurrentStep();
  const uint32_t batch_rows = plan.slice(b, N - 1).row_end - plan.slice(b, 0).row_begin;
  std::vector<SliceRun> runs;
  runs.reserve(N);
  for (uint32_t g = 0; g < N; ++g) runs.push_back(Forward(s, pass, b, g, batch_rows));
  marks_.push_back(e0.Mark());
  for (uint32_t g = 0; g < N; ++g) Backward(runs[g]);
  marks_.push_back(e0.Mark());
  // 3. Dense gradients summed over the GPUs; every replica takes the same step.
  AllReduceDense();
  for (uint32_t g = 0; g < N; ++g) DenseUpdate(g, step);
  marks_.push_back(e0.Mark());
  // 4. Per-key gradients to the owners; each owner updates its rows.
  for (uint32_t g = 0; g < N; ++g) KeyGradients(s, pass, runs[g]);
  if (N == 1) {  // the one GPU's records are its rows' sums
    UpdateRows(s, b, 0, /*from_feed=*/true);
  } else {
    const auto reduced = RecordAll();
    for (uint32_t o = 0; o < N; ++o) {
      SumGradients(s, b, o, reduced);
      UpdateRows(s, b, o, /*from_feed=*/false);
    }
  }
  marks_.push_back(e0.Mark());
}

// Minibatch b of a distributed job's pass (Train with ranks): TrainMinibatch with the dense
// gradient summed over the ranks as well, and the rows updated by their owning ranks on the
// host instead of on the GPUs. b at or past the plan's minibatches is an empty one of this
// rank: no rows, a zero gradient, the collectives all the same.
template <class Exec>
Status GpuStep<Exec>::TrainRankMinibatch(Staged& s, const Batch& pass, uint32_t b,
                                         RankExchange* ranks, RowBlock* rows, uint64_t* created,
                                         ThreadPool* pool) {
  const HbmPlan& plan = s.plan;
  const uint32_t N = gpus_;
  const bool mine = b < plan.minibatches();
  Exec& e0 = *compute_[0];
  // Recycle waits for each queue, so the upload staging of the minibatch before (its dense
  // gradient and refreshed rows) is free again: a pass's staging stays one minibatch's.
  for (uint32_t g = 0; g < N; ++g) compute_[g]->Recycle();
  marks_.push_back(e0.Mark());
  if (mine) ExchangeRows(s, b);
  marks_.push_back(e0.Mark());
  model_->dense_optimizer().BeginStep();
  const DenseStep step = model_->dense_optimizer().CurrentStep();
  const size_t P = NumParams();
  std::vector<SliceRun> runs;
  for (uint32_t g = 0; g < N && mine; ++g) {
    runs.push_back(Forward(s, pass, b, g, ranks->global_rows(b)));
  }
  marks_.push_back(e0.Mark());
  for (uint32_t g = 0; g < N; ++g) {
    if (mine) {
      Backward(runs[g]);
    } else {
      float* gr = replicas_[g].grads.data();
      compute_[g]->ForEach(P, [=] CTRBOX_HD(size_t i) { gr[i] = 0.0f; });
    }
  }
  marks_.push_back(e0.Mark());
  AllReduceDense();
  rank_dense_.resize(P);
  e0.Download(rank_dense_.data(), replicas_[0].grads.data(), P);
  RETURN_IF_ERROR(e0.status());
  RETURN_IF_ERROR(ranks->AllReduceDense(rank_dense_.data(), P));
  for (uint32_t g = 0; g < N; ++g) {
    compute_[g]->Upload(&replicas_[g].grads, rank_dense_.data(), P);
    DenseUpdate(g, step);
  }
  marks_.push_back(e0.Mark());
  // This rank's sum of each touched key's gradient, at the key's owning GPU, to the host.
  const uint32_t gs = GradStride();
  rank_locals_.clear();
  rank_records_.clear();
  for (uint32_t g = 0; g < N && mine; ++g) KeyGradients(s, pass, runs[g]);
  const auto reduced = RecordAll();
  for (uint32_t o = 0; mine && o < N; ++o) {
    SumGradients(s, b, o, reduced);
    const uint32_t t0 = plan.touched_begin[o][b], nt = plan.touched_begin[o][b + 1] - t0;
    if (nt == 0) continue;
    Exec& e = *compute_[o];
    Part& part = s.parts[o];
    const uint32_t* touched = part.touched.data() + t0;
    const float* acc = part.acc.data();
    e.Reserve(&part.sums, size_t{nt} * gs);
    float* out = part.sums.data();
    e.ForEach(size_t{nt} * gs,
              [=] CTRBOX_HD(size_t i) { out[i] = acc[size_t{touched[i / gs]} * gs + i % gs]; });
    const size_t at = rank_records_.size();
    rank_records_.resize(at + size_t{nt} * gs);
    e.Download(rank_records_.data() + at, out, size_t{nt} * gs);
    RETURN_IF_ERROR(e.status());
    for (uint32_t i = 0; i < nt; ++i) {
      rank_locals_.push_back(plan.locals[o][plan.touched[o][t0 + i]]);
    }
  }
  marks_.push_back(e0.Mark());
  rank_refreshed_.clear();
  uint64_t c = 0;
  RETURN_IF_ERROR(ranks->ReduceSparse(b, rank_locals_.data(), rank_records_.data(),
                                      rank_locals_.size(), rows, &rank_refreshed_, &c));
  *created += c;
  if (!rank_refreshed_.empty()) Patch(s, *rows, rank_refreshed_, pool);
  for (uint32_t g = 0; g < N; ++g) RETURN_IF_ERROR(compute_[g]->status());
  return Status::OK();
}

// The pass's results back to the host: the rows (rows_back: on one box; across ranks the
// owners' host rows are the trained ones), the predictions, the embeddings created, and the
// dense state into the host model (checkpoints, export, evaluation read it there).
template <class Exec>
Status GpuStep<Exec>::FinishPass(Staged& s, const Batch& pass, RowBlock* rows, float* predictions,
                                 uint64_t* created, bool rows_back, ThreadPool* pool) {
  const HbmPlan& plan = s.plan;
  const ValueLayout& L = rows->layout();
  uint64_t total = 0;
  for (uint32_t o = 0; o < gpus_ && rows_back; ++o) {
    Exec& e = *compute_[o];
    HostRows host(L, s.parts[o].n);
    uint32_t c = 0;
    e.DownloadAsync(&c, s.parts[o].created.data(), 1);
    DownloadRows(e, s.parts[o].rows, &host);  // synchronizes
    RETURN_IF_ERROR(e.status());
    host.Scatter(plan.locals[o], rows, pool);
    total += c;
  }
  std::vector<float> p(gpus_ == 1 ? 0 : pass.rows());
  for (uint32_t g = 0; g < gpus_; ++g) {
    if (gpus_ == 1) {  // one GPU's predictions are the pass's
      compute_[g]->Download(predictions, s.feeds[g].predictions.data(), pass.rows());
      continue;
    }
    compute_[g]->Download(p.data(), s.feeds[g].predictions.data(), p.size());
    for (size_t b = 0; b < plan.minibatches(); ++b) {
      const HbmSlice& sl = plan.slice(b, g);
      std::copy(p.begin() + sl.row_begin, p.begin() + sl.row_end, predictions + sl.row_begin);
    }
  }
  const size_t P = NumParams();
  Exec& e0 = *compute_[0];
  e0.DownloadAsync(model_->dense_params().data(), replicas_[0].params.data(), P);
  DenseOptimizer& opt = model_->dense_optimizer();
  if (!opt.m().empty()) e0.DownloadAsync(opt.m().data(), replicas_[0].m.data(), P);
  if (!opt.v().empty()) e0.DownloadAsync(opt.v().data(), replicas_[0].v.data(), P);
  e0.Synchronize();
  for (uint32_t g = 0; g < gpus_; ++g) RETURN_IF_ERROR(compute_[g]->status());
  *created = total;
  return Status::OK();
}

// The pass's GPU time per phase, from GPU 0's marks (its queue has passed them all: the pass
// ended with a synchronization).
template <class Exec>
void GpuStep<Exec>::AddPhases() {
  double* phase[kPhaseMarks - 1] = {&stats_.exchange_seconds, &stats_.forward_seconds,
                                    &stats_.backward_seconds, &stats_.dense_seconds,
                                    &stats_.sparse_seconds};
  for (size_t m = 0; m + kPhaseMarks <= marks_.size(); m += kPhaseMarks) {
    for (int k = 0; k + 1 < kPhaseMarks; ++k) {
      *phase[k] += Exec::Seconds(marks_[m + k], marks_[m + k + 1]);
    }
  }
  marks_.clear();
  compute_[0]->ReleaseMarks();
}

}  // namespace ctrbox

#endif  // CTRBOX_GPU_STEP_TRAIN_H_
