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
  // A working table that lost keys fails the pass. On one box that is found with the pass's
  // results (FinishPass), so that the host queues the minibatches without waiting for the
  // staging to finish; across ranks before the first collective.
  if (ranks != nullptr) {
    std::vector<uint32_t> bad(gpus_, 0);
    for (uint32_t o = 0; o < gpus_; ++o)
      compute_[o]->Download(&bad[o], s.parts[o].status.data(), 1);
    RETURN_IF_ERROR(LostKeys(bad));
  }
  if (!patched.empty()) Patch(s, *rows, patched, pool);
  EnsureWork(s);
  marks_.clear();
  replay_marks_.clear();
  uint64_t total_created = 0;
  if (ranks != nullptr) {
    if (ranks->minibatches() < plan.minibatches()) {
      return InternalError("GPU backend: the ranks agree on fewer minibatches than the pass has");
    }
    PrepareArgs(s, ranks->minibatches(), ranks);
    for (uint32_t b = 0; b < ranks->minibatches(); ++b) {
      RETURN_IF_ERROR(TrainRankMinibatch(s, pass, b, ranks, rows, &total_created, pool));
    }
    stats_.minibatches += ranks->minibatches();
  } else {
    PrepareArgs(s, static_cast<uint32_t>(plan.minibatches()), nullptr);
    std::vector<ExecCounters> before;
    for (const Exec* e : compute_) before.push_back(e->counters());
    RETURN_IF_ERROR(TrainMinibatches(s, pass));
    for (uint32_t g = 0; g < gpus_; ++g) {
      stats_.minibatch_calls.Add(compute_[g]->counters().Since(before[g]));
    }
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

// The pass's minibatch arguments (GpuMinibatchArgs) to every GPU, and its cursor to the first:
// one upload and one launch per GPU per pass. With ranks, the ranks' minibatches (those past
// this rank's plan are empty: only the dense step's values).
template <class Exec>
void GpuStep<Exec>::PrepareArgs(Staged& s, uint32_t minibatches, RankExchange* ranks) {
  const HbmPlan& plan = s.plan;
  const uint32_t N = gpus_;
  const DenseOptimizer& opt = model_->dense_optimizer();
  std::vector<GpuMinibatchArgs> args(std::max<uint32_t>(minibatches, 1));
  for (uint32_t g = 0; g < N; ++g) {
    const Part& part = s.parts[g];
    for (uint32_t b = 0; b < minibatches; ++b) {
      GpuMinibatchArgs& a = args[b];
      a = GpuMinibatchArgs();
      a.t = opt.step() + b + 1;
      a.step = opt.StepAt(a.t);
      if (b >= plan.minibatches()) {
        a.rows_f = static_cast<float>(ranks->global_rows(b));
        continue;
      }
      const HbmSlice& sl = plan.slice(b, g);
      a.rows_f = static_cast<float>(ranks != nullptr ? ranks->global_rows(b)
                                                     : plan.slice(b, N - 1).row_end -
                                                           plan.slice(b, 0).row_begin);
      a.row0 = sl.row_begin;
      // ws.cell counts from the minibatch's first row; the slice's cells from its own.
      a.cell_shift = (sl.row_begin - plan.slice(b, 0).row_begin) * model_->schema().num_slots;
      a.uniq = sl.uniq();
      const size_t si = b * N + g;
      const uint32_t* occ_begin = plan.occ_offsets(si);
      a.occ_first = occ_begin[0];
      a.n_occ = occ_begin[a.uniq] - a.occ_first;
      a.occ0 = sl.occ_begin;
      a.occ_n = sl.occ_end - sl.occ_begin;
      a.seg = SegmentShape{static_cast<uint32_t>(occ_begin - plan.uniq_occ_begin.data()),
                           a.occ_first, a.uniq, a.n_occ};
      a.gather_first = part.recv_base[b * N];
      a.gather_n = part.recv_base[(b + 1) * N] - a.gather_first;
      a.t0 = plan.touched_begin[g][b];
      a.nt = plan.touched_begin[g][b + 1] - a.t0;
    }
    Exec& e = *compute_[g];
    Replica& r = replicas_[g];
    e.Upload(&r.args, args.data(), args.size());
    e.Reserve(&r.now, 1);
    e.Reserve(&r.cursor, 1);
    e.Fill(r.cursor.data(), uint32_t{0}, 1);
  }
}

// At the start of a minibatch, on every GPU: its arguments become the current ones.
template <class Exec>
void GpuStep<Exec>::NextArgs() {
  for (uint32_t g = 0; g < gpus_; ++g) {
    Replica& r = replicas_[g];
    const GpuMinibatchArgs* all = r.args.data();
    GpuMinibatchArgs* now = r.now.data();
    uint32_t* cursor = r.cursor.data();
    compute_[g]->ForEach(1, [=] CTRBOX_HD(size_t) { *now = all[(*cursor)++]; });
  }
}

// The pass's minibatches on one box. With gpu.replay and one GPU, the first minibatch of each
// shape (its rows) is recorded, not run, and every minibatch is a replay of its shape's
// recording: one launch for the host, no allocation, no synchronization (exec/exec.h). The
// host's dense optimizer steps along (its step count; the GPUs read the constants from the
// arguments).
template <class Exec>
Status GpuStep<Exec>::TrainMinibatches(Staged& s, const Batch& pass) {
  const HbmPlan& plan = s.plan;
  DenseOptimizer& opt = model_->dense_optimizer();
  Exec& e0 = *compute_[0];
  if (!options_.replay || gpus_ > 1) {
    for (size_t b = 0; b < plan.minibatches(); ++b) {
      opt.BeginStep();
      TrainMinibatch(s, pass, b);
    }
    return Status::OK();
  }
  // The recordings of the passes before are kept: recorded again, a CUDA graph of the same
  // shape is updated in place rather than instantiated anew.
  std::vector<bool> recorded(graphs_.size(), false);
  for (size_t b = 0; b < plan.minibatches(); ++b) {
    opt.BeginStep();
    const uint32_t rows = plan.slice(b, 0).rows();
    auto it = std::find_if(graphs_.begin(), graphs_.end(),
                           [&](const auto& g) { return g.first == rows; });
    if (it == graphs_.end()) {
      graphs_.emplace_back(rows, typename Exec::Graph());
      recorded.push_back(false);
      it = graphs_.end() - 1;
    }
    if (!recorded[it - graphs_.begin()]) {
      recorded[it - graphs_.begin()] = true;
      capturing_ = true;
      e0.BeginCapture();
      TrainMinibatch(s, pass, b);
      e0.EndCapture(&it->second);
      capturing_ = false;
      ++stats_.captures;
    }
    replay_marks_.push_back(e0.Mark());
    e0.Replay(it->second);
    replay_marks_.push_back(e0.Mark());
  }
  // Only this pass's shapes are kept (a last minibatch's shape changes from pass to pass).
  size_t keep = 0;
  for (size_t i = 0; i < graphs_.size(); ++i) {
    if (recorded[i]) {
      if (keep != i) graphs_[keep] = std::move(graphs_[i]);
      ++keep;
    }
  }
  graphs_.resize(keep);
  if (Status st = e0.status(); !st.ok()) {
    return Status(st.code(), st.message() +
                                 " (the minibatch step is recorded and replayed: gpu.replay=false "
                                 "launches it call by call)");
  }
  return Status::OK();
}

// A timing mark on GPU 0's queue between two phases (none while a step is recorded).
template <class Exec>
void GpuStep<Exec>::PhaseMark() {
  if (!capturing_) marks_.push_back(compute_[0]->Mark());
}

// One minibatch on one box: exchange, forward, backward, dense step, sparse step; each phase
// on every GPU before the next, and GPU 0's queue marked between them.
template <class Exec>
void GpuStep<Exec>::TrainMinibatch(Staged& s, const Batch& pass, size_t b) {
  const uint32_t N = gpus_;
  PhaseMark();
  NextArgs();
  // 1. Owners gather the rows each GPU asked for; the exchange copies them over.
  ExchangeRows(s, b);
  PhaseMark();
  // 2. Each GPU: inputs, MLP forward, loss; then backward and the weight gradients.
  //    (Canonical sums: block by block, forward and backward together, timed as forward.)
  std::vector<SliceRun> runs;
  runs.reserve(N);
  const bool canonical = Canonical();
  if (canonical) {
    CutSums(MinibatchRows(s.plan, b), &cut_, &gpu_cuts_);
    for (uint32_t g = 0; g < N; ++g) runs.push_back(CanonicalForwardBackward(s, pass, b, g));
    PhaseMark();
  } else {
    for (uint32_t g = 0; g < N; ++g) runs.push_back(Forward(s, pass, b, g));
    PhaseMark();
    for (uint32_t g = 0; g < N; ++g) Backward(runs[g]);
  }
  PhaseMark();
  // 3. Dense gradients summed over the GPUs; every replica takes the same step.
  if (canonical && N > 1) {  // up the tree on GPU 0 (one process: one node, the whole sum)
    CanonicalGpuDense();
    BroadcastDense();
  } else {
    AllReduceDense();
  }
  for (uint32_t g = 0; g < N; ++g) DenseUpdate(g);
  PhaseMark();
  // 4. Per-key gradients to the owners; each owner updates its rows.
  for (uint32_t g = 0; g < N; ++g) KeyGradients(s, pass, runs[g]);
  if (N == 1) {  // the one GPU's records are its rows' sums
    UpdateRows(s, 0, s.feeds[0].grad.data());
  } else {
    const auto reduced = RecordAll();
    for (uint32_t o = 0; o < N; ++o) {
      if (canonical) {
        CanonicalOwnerSums(s, b, o, reduced);
        UpdateRows(s, o, s.parts[o].sums.data());
      } else {
        SumGradients(s, b, o, reduced);
        UpdateRows(s, o, nullptr);
      }
    }
  }
  PhaseMark();
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
  NextArgs();
  if (mine) ExchangeRows(s, b);
  marks_.push_back(e0.Mark());
  model_->dense_optimizer().BeginStep();
  const size_t P = NumParams();
  const bool canonical = Canonical();
  std::vector<SliceRun> runs;
  if (mine && canonical) CutSums(MinibatchRows(plan, b), &cut_, &gpu_cuts_);
  for (uint32_t g = 0; g < N && mine && canonical; ++g) {
    runs.push_back(CanonicalForwardBackward(s, pass, b, g));
  }
  for (uint32_t g = 0; g < N && mine && !canonical; ++g) runs.push_back(Forward(s, pass, b, g));
  marks_.push_back(e0.Mark());
  // (Canonical sums ran their backward with the forward; past its share no node of this rank
  // has rows, and none is sent.)
  for (uint32_t g = 0; g < N && !canonical; ++g) {
    if (mine) {
      Backward(runs[g]);
    } else {
      float* gr = replicas_[g].grads.data();
      compute_[g]->ForEach(P, [=] CTRBOX_HD(size_t i) { gr[i] = 0.0f; });
    }
  }
  marks_.push_back(e0.Mark());
  if (canonical) {  // the nodes' gradients up the tree over the GPUs, then over the ranks
    if (mine && N > 1) CanonicalGpuDense();
    RETURN_IF_ERROR(CanonicalRankSums(mine, ranks));
  } else {
    AllReduceDense();
    rank_dense_.resize(P);
    e0.Download(rank_dense_.data(), replicas_[0].grads.data(), P);
    RETURN_IF_ERROR(e0.status());
    RETURN_IF_ERROR(ranks->AllReduceDense(rank_dense_.data(), P));
  }
  for (uint32_t g = 0; g < N; ++g) {
    compute_[g]->Upload(&replicas_[g].grads, rank_dense_.data(), P);
    DenseUpdate(g);
  }
  marks_.push_back(e0.Mark());
  // This rank's sum of each touched key's gradient, at the key's owning GPU, to the host.
  const uint32_t gs = GradStride();
  rank_locals_.clear();
  rank_records_.clear();
  for (uint32_t g = 0; g < N && mine; ++g) KeyGradients(s, pass, runs[g]);
  const auto reduced = RecordAll();
  for (uint32_t o = 0; mine && o < N; ++o) {
    if (canonical && N == 1) {  // the feed's records (per node per key) are in touched order
      RETURN_IF_ERROR(AppendRankRecords(s, b, 0, s.feeds[0].grad.data(), cut_.nodes));
    } else if (canonical) {  // each owner's rows' records per node of the rank's share
      CanonicalOwnerSums(s, b, o, reduced);
      RETURN_IF_ERROR(AppendRankRecords(s, b, o, s.parts[o].sums.data(), cut_.nodes));
    } else {  // each owner's accumulated rows, gathered in touched order
      SumGradients(s, b, o, reduced);
      const uint32_t t0 = plan.touched_begin[o][b], nt = plan.touched_begin[o][b + 1] - t0;
      if (nt == 0) continue;
      Part& part = s.parts[o];
      const uint32_t* touched = part.touched.data() + t0;
      const float* acc = part.acc.data();
      compute_[o]->Reserve(&part.sums, size_t{nt} * gs);
      float* out = part.sums.data();
      compute_[o]->ForEach(size_t{nt} * gs, [=] CTRBOX_HD(size_t i) {
        out[i] = acc[size_t{touched[i / gs]} * gs + i % gs];
      });
      RETURN_IF_ERROR(AppendRankRecords(s, b, o, out, 1));
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

// With ranks, minibatch b: owner o's touched rows' records (`per_row` of GradStride() floats
// each, in touched order, at `records` on its GPU) to the host, appended to rank_records_ with
// the rows' local ids to rank_locals_ (for RankExchange::ReduceSparse).
template <class Exec>
Status GpuStep<Exec>::AppendRankRecords(Staged& s, uint32_t b, uint32_t o, const float* records,
                                        uint32_t per_row) {
  const HbmPlan& plan = s.plan;
  const uint32_t t0 = plan.touched_begin[o][b], nt = plan.touched_begin[o][b + 1] - t0;
  if (nt == 0) return Status::OK();
  const size_t at = rank_records_.size(), n = size_t{nt} * per_row * GradStride();
  rank_records_.resize(at + n);
  compute_[o]->Download(rank_records_.data() + at, records, n);
  RETURN_IF_ERROR(compute_[o]->status());
  for (uint32_t i = 0; i < nt; ++i) rank_locals_.push_back(plan.locals[o][plan.touched[o][t0 + i]]);
  return Status::OK();
}

// The pass's results back to the host: the rows (rows_back: on one box; across ranks the
// owners' host rows are the trained ones), the predictions, the embeddings created, and the
// dense state into the host model (checkpoints, export, evaluation read it there). Every
// download is queued first, then one synchronization per GPU; the working tables' status is
// checked before anything reaches `rows` (the dense state is in the host model by then: a
// failed pass is not committed).
template <class Exec>
Status GpuStep<Exec>::FinishPass(Staged& s, const Batch& pass, RowBlock* rows, float* predictions,
                                 uint64_t* created, bool rows_back, ThreadPool* pool) {
  const HbmPlan& plan = s.plan;
  const ValueLayout& L = rows->layout();
  std::vector<uint32_t> bad(gpus_, 0), made(gpus_, 0);
  std::vector<HostRows> host;
  host.reserve(gpus_);
  for (uint32_t o = 0; o < gpus_; ++o) {
    Exec& e = *compute_[o];
    e.DownloadAsync(&bad[o], s.parts[o].status.data(), 1);
    if (!rows_back) continue;
    e.DownloadAsync(&made[o], s.parts[o].created.data(), 1);
    host.emplace_back(L, s.parts[o].n);
    QueueRowsDownload(e, s.parts[o].rows, &host.back());
  }
  std::vector<float> p(gpus_ == 1 ? 0 : size_t{gpus_} * pass.rows());
  for (uint32_t g = 0; g < gpus_; ++g) {
    // One GPU's predictions are the pass's; several GPUs' each their slices' rows.
    float* to = gpus_ == 1 ? predictions : p.data() + g * pass.rows();
    compute_[g]->DownloadAsync(to, s.feeds[g].predictions.data(), pass.rows());
  }
  const size_t P = NumParams();
  Exec& e0 = *compute_[0];
  e0.DownloadAsync(model_->dense_params().data(), replicas_[0].params.data(), P);
  DenseOptimizer& opt = model_->dense_optimizer();
  if (!opt.m().empty()) e0.DownloadAsync(opt.m().data(), replicas_[0].m.data(), P);
  if (!opt.v().empty()) e0.DownloadAsync(opt.v().data(), replicas_[0].v.data(), P);
  for (uint32_t g = 0; g < gpus_; ++g) compute_[g]->Synchronize();
  for (uint32_t g = 0; g < gpus_; ++g) RETURN_IF_ERROR(compute_[g]->status());
  RETURN_IF_ERROR(LostKeys(bad));
  uint64_t total = 0;
  for (uint32_t o = 0; o < gpus_ && rows_back; ++o) {
    host[o].Scatter(plan.locals[o], rows, pool);
    total += made[o];
  }
  for (uint32_t g = 0; g < gpus_ && gpus_ > 1; ++g) {
    const float* from = p.data() + g * pass.rows();
    for (size_t b = 0; b < plan.minibatches(); ++b) {
      const HbmSlice& sl = plan.slice(b, g);
      std::copy(from + sl.row_begin, from + sl.row_end, predictions + sl.row_begin);
    }
  }
  *created = total;
  return Status::OK();
}

// OK, or the pass's failure if an owner's working table lost keys (bad[o]: its count).
template <class Exec>
Status GpuStep<Exec>::LostKeys(const std::vector<uint32_t>& bad) {
  for (uint32_t o = 0; o < gpus_; ++o) {
    RETURN_IF_ERROR(compute_[o]->status());
    if (bad[o] != 0) {
      return InternalError("GPU backend: the working table of GPU " + std::to_string(o) + " lost " +
                           std::to_string(bad[o]) + " keys (insert or lookup failed)");
    }
  }
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
  for (size_t m = 0; m + 1 < replay_marks_.size(); m += 2) {
    stats_.replayed_seconds += Exec::Seconds(replay_marks_[m], replay_marks_[m + 1]);
  }
  marks_.clear();
  replay_marks_.clear();
  compute_[0]->ReleaseMarks();
}

}  // namespace ctrbox

#endif  // CTRBOX_GPU_STEP_TRAIN_H_
