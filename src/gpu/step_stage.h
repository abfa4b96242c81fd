// GpuStep (gpu/step.h), the pull stage's half: construction, Stage (a pass's rows, hash
// indexes, examples and plan to the GPUs), Patch (rows changed since Stage) and the
// minibatch buffers' sizing. Included by gpu/step_impl.h only.
#ifndef CTRBOX_GPU_STEP_STAGE_H_
#define CTRBOX_GPU_STEP_STAGE_H_

#include <algorithm>
#include <numeric>

#include "gpu/step.h"
#include "util/pairwise_sum.h"
#include "util/sys.h"

namespace ctrbox {

template <class Exec>
GpuStep<Exec>::GpuStep(CtrModel* model, const CtrAccessor& accessor, const GpuOptions& options,
                       std::vector<Exec*> compute, std::vector<Exec*> copy, AllReduceFn all_reduce,
                       void* all_reduce_ctx)
    : model_(model),
      accessor_(accessor),
      options_(options),
      gpus_(static_cast<uint32_t>(compute.size())),
      compute_(std::move(compute)),
      copy_(std::move(copy)),
      all_reduce_(all_reduce),
      all_reduce_ctx_(all_reduce_ctx),
      staged_(std::max<uint32_t>(1, options.staged_passes)),
      replicas_(gpus_),
      patch_rows_(gpus_),
      patch_at_(gpus_) {
  const Mlp& mlp = model_->mlp();
  for (uint32_t l = 0; !model_->towers().on() && l < mlp.num_layers(); ++l) {
    layers_.push_back(Layer{mlp.in(l), mlp.out(l), mlp.w_offset(l), mlp.b_offset(l)});
  }
  const Mlp& bottom = model_->bottom();
  const size_t base = model_->bottom_base();
  for (uint32_t l = 0; l < bottom.num_layers(); ++l) {
    bottom_layers_.push_back(
        Layer{bottom.in(l), bottom.out(l), base + bottom.w_offset(l), base + bottom.b_offset(l)});
  }
  const size_t P = NumParams();
  for (uint32_t g = 0; g < gpus_; ++g) {
    Replica& r = replicas_[g];
    Exec& e = *compute_[g];
    e.Upload(&r.params, model_->dense_params().data(), P);
    e.Reserve(&r.grads, P);
    const DenseOptimizer& opt = model_->dense_optimizer();
    if (!opt.m().empty()) e.Upload(&r.m, opt.m().data(), P);
    if (!opt.v().empty()) e.Upload(&r.v, opt.v().data(), P);
    r.acts.resize(layers_.size());
    r.hgrads.resize(layers_.size());
    const Towers& tw = model_->towers();
    r.tw.resize(tw.count());
    for (uint32_t t = 0; t < tw.count(); ++t) {
      e.Upload(&r.tw[t].cols, tw.cols(t).data(), tw.cols(t).size());
      e.Upload(&r.tw[t].inv, tw.inv(t).data(), tw.inv(t).size());
      r.tw[t].acts.resize(tw.layers(t));
      r.tw[t].grads.resize(tw.layers(t));
    }
    if (model_->options().MultiTable()) {  // the slots' columns (model.slot_dims)
      const uint32_t S = model_->schema().num_slots;
      std::vector<uint32_t> col_slot, slot_col(S), slot_dim(S);
      for (uint32_t slot = 0; slot < S; ++slot) {
        slot_col[slot] = model_->slot_col(slot);
        slot_dim[slot] = model_->slot_dim(slot);
        col_slot.insert(col_slot.end(), slot_dim[slot], slot);
      }
      e.Upload(&r.col_slot, col_slot.data(), col_slot.size());
      e.Upload(&r.slot_col, slot_col.data(), slot_col.size());
      e.Upload(&r.slot_dim, slot_dim.data(), slot_dim.size());
    }
  }
}

template <class Exec>
Status GpuStep<Exec>::Stage(uint64_t pass_index, const Batch& pass, const WorkingSet& ws,
                            const RowBlock& rows, ThreadPool* pool) {
  Staged& s = staged_[pass_index % staged_.size()];
  s.pass_index = pass_index;
  Stopwatch part;
  auto lap = [&part](double* sum) {
    *sum += part.Seconds();
    part.Reset();
  };
  for (uint32_t g = 0; g < gpus_; ++g) {
    copy_[g]->Recycle();
    copy_[g]->UseHostPool(pool);
  }
  lap(&stats_.stage_wait_seconds);
  HbmPlanOptions plan_options;
  if (Canonical() && gpus_ > 1) {  // slices of whole sum blocks; the owners' sums' sources
    plan_options.cut = [this](uint32_t rows, std::vector<uint32_t>* starts) {
      SliceStarts(rows, starts);
    };
    plan_options.sources = true;
  }
  BuildHbmPlan(pass, ws, gpus_, pool, &s.plan, plan_options);
  lap(&stats_.stage_plan_seconds);
  s.parts.resize(gpus_);
  s.feeds.resize(gpus_);
  for (uint32_t o = 0; o < gpus_; ++o) StageOwner(s, o, ws, rows, pool);
  lap(&stats_.stage_rows_seconds);
  for (uint32_t g = 0; g < gpus_; ++g) StageFeed(s, g, pass, ws);
  lap(&stats_.stage_feed_seconds);
  s.staged.resize(gpus_);
  for (uint32_t g = 0; g < gpus_; ++g) s.staged[g] = copy_[g]->Record();
  for (uint32_t g = 0; g < gpus_; ++g) RETURN_IF_ERROR(copy_[g]->status());
  return Status::OK();
}

// Owner o's share of a pass: its rows, their hash index, and the rows of the keys each GPU
// will ask it for.
template <class Exec>
void GpuStep<Exec>::StageOwner(Staged& s, uint32_t o, const WorkingSet& ws, const RowBlock& rows,
                               ThreadPool* pool) {
  const HbmPlan& plan = s.plan;
  Exec& e = *copy_[o];
  Part& part = s.parts[o];
  const std::vector<uint32_t>& locals = plan.locals[o];
  part.n = locals.size();
  HostRows host(rows.layout(), locals.size());
  host.Gather(rows, locals, pool);
  UploadRows(e, host, &part.rows);
  std::vector<uint64_t> keys(locals.size());
  RunParallelRange(pool, locals.size(), [&](size_t i) { keys[i] = ws.keys[locals[i]]; });
  e.Upload(&part.keys, keys.data(), keys.size());
  const size_t cap = HbmCapacity(part.n);
  e.Reserve(&part.bucket_keys, cap);
  e.Reserve(&part.bucket_rows, cap);
  e.Reserve(&part.special, 1);
  e.Fill(part.bucket_keys.data(), kEmptyKey, cap);
  e.Fill(part.special.data(), kNoRow, 1);
  const HbmIndex idx{part.bucket_keys.data(), part.bucket_rows.data(), part.special.data(),
                     cap - 1};
  part.index = idx;
  e.Reserve(&part.status, 1);
  e.Fill(part.status.data(), 0u, 1);
  {  // insert
    const uint64_t* k = part.keys.data();
    uint32_t* bad = part.status.data();
    e.ForEach(part.n, [=] CTRBOX_HD(size_t i) {
      if (!idx.Insert(k[i], static_cast<uint32_t>(i))) AtomicAddU32(bad, 1);
    });
  }
  // The keys GPUs ask this owner for, per (minibatch, GPU), in segment order.
  part.recv_base.assign(plan.slices.size() + 1, 0);
  for (size_t si = 0; si < plan.slices.size(); ++si) {
    const HbmSlice& sl = plan.slices[si];
    part.recv_base[si + 1] = part.recv_base[si] + (sl.seg[o + 1] - sl.seg[o]);
  }
  std::vector<uint64_t> recv(part.recv_base.back());
  RunParallelRange(
      pool, plan.slices.size(),
      [&](size_t si) {
        const HbmSlice& sl = plan.slices[si];
        uint64_t* out = recv.data() + part.recv_base[si];
        for (uint32_t u = sl.seg[o]; u < sl.seg[o + 1]; ++u) {
          *out++ = ws.keys[plan.uniq_local[sl.uniq_begin + u]];
        }
      },
      /*chunk=*/4);
  e.Upload(&part.recv_keys, recv.data(), recv.size());
  e.Reserve(&part.recv_rows, recv.size());
  {  // get: key -> row
    const uint64_t* k = part.recv_keys.data();
    uint32_t* out = part.recv_rows.data();
    uint32_t* bad = part.status.data();
    e.ForEach(recv.size(), [=] CTRBOX_HD(size_t i) {
      out[i] = idx.Find(k[i]);
      if (out[i] == kNoRow) AtomicAddU32(bad, 1);
    });
  }
  e.Upload(&part.touched, plan.touched[o].data(), plan.touched[o].size());
  if (!plan.touched_src.empty()) {
    e.Upload(&part.touched_src, plan.touched_src[o].data(), plan.touched_src[o].size());
  }
  e.Reserve(&part.created, 1);
  e.Fill(part.created.data(), 0u, 1);
}

// GPU g's copy of the examples and of its slices' plan.
template <class Exec>
void GpuStep<Exec>::StageFeed(Staged& s, uint32_t g, const Batch& pass, const WorkingSet& ws) {
  const HbmPlan& plan = s.plan;
  Exec& e = *copy_[g];
  Feed& f = s.feeds[g];
  e.Upload(&f.labels, pass.labels.data(), pass.labels.size());
  e.Upload(&f.dense, pass.dense.data(), pass.dense.size());
  e.Upload(&f.offsets, pass.offsets.data(), pass.offsets.size());
  e.Upload(&f.weights, pass.weights.data(), pass.weights.size());
  e.Upload(&f.fetch_pos, plan.fetch_pos.data(), plan.fetch_pos.size());
  e.Upload(&f.cell, ws.cell.data(), ws.cell.size());
  e.Upload(&f.uniq_occ_begin, plan.uniq_occ_begin.data(), plan.uniq_occ_begin.size());
  e.Upload(&f.uniq_occ, plan.uniq_occ.data(), plan.uniq_occ.size());
  e.Reserve(&f.predictions, pass.rows());
}

template <class Exec>
void GpuStep<Exec>::UploadRows(Exec& e, const HostRows& h, DeviceRows* d) {
  HostRows::EachField(
      *d, h, [&](auto& dev, const auto& host) { e.Upload(&dev, host.data(), host.size()); });
}

template <class Exec>
void GpuStep<Exec>::QueueRowsDownload(Exec& e, DeviceRows& d, HostRows* h) {
  HostRows::EachField(
      d, *h, [&](auto& dev, auto& host) { e.DownloadAsync(host.data(), dev.data(), host.size()); });
}

// Re-uploads the rows of `patched` local ids: per owner, the rows in a staging block, then
// scattered into place.
template <class Exec>
void GpuStep<Exec>::Patch(Staged& s, const RowBlock& rows, const std::vector<uint32_t>& patched,
                          ThreadPool* pool) {
  const ValueLayout& L = rows.layout();
  // A row patched from two passes in flight is listed twice (with its final value in `rows`):
  // once each, so no two threads write one row.
  std::vector<uint32_t> ids(patched);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::vector<std::vector<uint32_t>> by_owner(gpus_), at(gpus_);
  for (uint32_t l : ids) {
    const uint32_t o = OwnerOf(rows.key(l), gpus_);
    by_owner[o].push_back(l);
    at[o].push_back(s.plan.row_of[l]);
  }
  for (uint32_t o = 0; o < gpus_; ++o) {
    if (by_owner[o].empty()) continue;
    Exec& e = *compute_[o];
    HostRows h(L, by_owner[o].size());
    h.Gather(rows, by_owner[o], pool);
    DeviceRows& src = patch_rows_[o];
    UploadRows(e, h, &src);
    e.Upload(&patch_at_[o], at[o].data(), at[o].size());
    DeviceRows& dst = s.parts[o].rows;
    const uint32_t* where = patch_at_[o].data();
    const uint32_t dim = L.dim, es = L.emb_state, ws = L.wide_state;
    const float *show = src.show.data(), *click = src.click.data(), *wide = src.wide.data(),
                *wst = src.wide_state.data(), *emb = src.emb.data(), *est = src.emb_state.data();
    const uint16_t *unseen = src.unseen.data(), *flags = src.flags.data();
    float *d_show = dst.show.data(), *d_click = dst.click.data(), *d_wide = dst.wide.data(),
          *d_wst = dst.wide_state.data(), *d_emb = dst.emb.data(), *d_est = dst.emb_state.data();
    uint16_t *d_unseen = dst.unseen.data(), *d_flags = dst.flags.data();
    e.ForEach(h.n, [=] CTRBOX_HD(size_t i) {
      const size_t r = where[i];
      d_show[r] = show[i];
      d_click[r] = click[i];
      d_wide[r] = wide[i];
      d_unseen[r] = unseen[i];
      d_flags[r] = flags[i];
      for (uint32_t j = 0; j < ws; ++j) d_wst[r * ws + j] = wst[i * ws + j];
      for (uint32_t j = 0; j < dim; ++j) d_emb[r * dim + j] = emb[i * dim + j];
      for (uint32_t j = 0; j < es; ++j) d_est[r * es + j] = est[i * es + j];
    });
  }
}

// Sizes the minibatch buffers for the staged pass's largest slice and exchange.
template <class Exec>
void GpuStep<Exec>::EnsureWork(Staged& s) {
  const HbmPlan& plan = s.plan;
  uint32_t max_rows = 0, max_uniq = 0, max_occ = 0;
  std::vector<uint32_t> max_recv(gpus_, 0), max_touched(gpus_, 0);
  for (size_t b = 0; b < plan.minibatches(); ++b) {
    for (uint32_t g = 0; g < gpus_; ++g) {
      const HbmSlice& sl = plan.slice(b, g);
      const uint32_t* occ = plan.occ_offsets(b * gpus_ + g);
      max_rows = std::max(max_rows, sl.rows());
      max_uniq = std::max(max_uniq, sl.uniq());
      max_occ = std::max({max_occ, sl.occ_end - sl.occ_begin, occ[sl.uniq()] - occ[0]});
    }
    for (uint32_t o = 0; o < gpus_; ++o) {
      const Part& part = s.parts[o];
      max_recv[o] =
          std::max(max_recv[o], part.recv_base[(b + 1) * gpus_] - part.recv_base[b * gpus_]);
      max_touched[o] =
          std::max(max_touched[o], plan.touched_begin[o][b + 1] - plan.touched_begin[o][b]);
    }
  }
  s.extents = GpuPassExtents{max_rows, max_uniq, max_occ, max_recv, max_touched};
  // Canonical sums: the most nodes of the rank's share and of each GPU's cut in the pass (per
  // minibatch shape: its rows).
  const bool canonical = Canonical();
  uint32_t rank_nodes = 1;
  std::vector<uint32_t> gpu_nodes(gpus_, 1), shapes;
  for (size_t b = 0; canonical && b < plan.minibatches(); ++b) {
    const uint32_t rows = MinibatchRows(plan, b);
    if (std::find(shapes.begin(), shapes.end(), rows) != shapes.end()) continue;
    shapes.push_back(rows);
    GpuSumCut rank;
    std::vector<GpuSumCut> per_gpu;
    CutSums(rows, &rank, &per_gpu);
    rank_nodes = std::max(rank_nodes, rank.nodes);
    for (uint32_t g = 0; g < per_gpu.size(); ++g) {
      gpu_nodes[g] = std::max(gpu_nodes[g], per_gpu[g].nodes);
    }
  }
  if (gpus_ == 1) gpu_nodes[0] = rank_nodes;
  const uint32_t most_gpu_nodes = *std::max_element(gpu_nodes.begin(), gpu_nodes.end());
  const uint32_t W0 = model_->input_width();
  for (uint32_t g = 0; g < gpus_; ++g) {
    Exec& e = *compute_[g];
    Replica& r = replicas_[g];
    const size_t B = std::max<uint32_t>(max_rows, 1);
    e.Reserve(&r.x, B * W0);
    if (model_->options().HasInteractions()) EnsureInteractionWork(e, r, B);
    e.Reserve(&r.logits, B);
    e.Reserve(&r.dlogit, B);
    e.Reserve(&r.wide_sum, B);
    e.Reserve(&r.dx, B * model_->emb_width());
    e.Reserve(&r.occ_grads, size_t{std::max<uint32_t>(max_occ, 1)} * GradStride());
    for (size_t l = 0; l + 1 < layers_.size(); ++l) {
      e.Reserve(&r.acts[l], B * layers_[l].out);
      e.Reserve(&r.hgrads[l], B * layers_[l].out);
    }
    const Towers& tw = model_->towers();
    for (uint32_t t = 0; t < tw.count(); ++t) {
      GpuTowerBuffers<Exec>& tb = r.tw[t];
      e.Reserve(&tb.tin, B * tw.in(t));
      e.Reserve(&tb.dtin, B * tw.in(t));
      e.Reserve(&tb.inj_first, B * tw.first(t));
      e.Reserve(&tb.inj_last, B * tw.last(t));
      for (uint32_t l = 0; l < tw.layers(t); ++l) {
        e.Reserve(&tb.acts[l], B * tw.tower(t).out(l));
        e.Reserve(&tb.grads[l], B * tw.tower(t).out(l));
      }
    }
    e.Reserve(&r.sum, gpus_ > 1 ? NumParams() * gpus_ : 0);
    // Canonical sums: the tree's pending sums, the nodes' gradients (node 0's is grads; on
    // GPU 0 also the rank's nodes), the slice's dx and dlogit, a record per node per key, and
    // at the owners the asking GPUs' node records and the rows' sums per node of the rank's.
    size_t nodes = 1, recv_nodes = 1, sums = 0;
    if (canonical) {
      nodes = gpu_nodes[g];
      r.sum_slots.resize(PairwiseStack::Depth(5) - 1);
      for (Buf<float>& slot : r.sum_slots) e.Reserve(&slot, NumParams());
      r.node_grads.resize(std::max<size_t>(nodes, g == 0 ? rank_nodes : 1) - 1);
      for (Buf<float>& node : r.node_grads) e.Reserve(&node, NumParams());
      e.Reserve(&r.dx_all, B * model_->emb_width());
      e.Reserve(&r.dlogit_all, B);
      if (gpus_ > 1) {
        recv_nodes = most_gpu_nodes;
        sums = size_t{std::max<uint32_t>(max_touched[g], 1)} * rank_nodes * GradStride();
      }
    }
    Feed& f = s.feeds[g];
    e.Reserve(&f.fetch, size_t{std::max<uint32_t>(max_uniq, 1)} * FetchStride());
    e.Reserve(&f.grad, size_t{std::max<uint32_t>(max_uniq, 1)} * GradStride() * nodes);
    Part& part = s.parts[g];
    e.Reserve(&part.send, size_t{std::max<uint32_t>(max_recv[g], 1)} * FetchStride());
    e.Reserve(&part.recv_grad,
              size_t{std::max<uint32_t>(max_recv[g], 1)} * GradStride() * recv_nodes);
    e.Reserve(&part.acc, std::max<size_t>(part.n, 1) * GradStride());
    if (sums > 0) e.Reserve(&part.sums, sums);
  }
}

// The interactions' minibatch buffers of one replica, for B rows.
template <class Exec>
void GpuStep<Exec>::EnsureInteractionWork(Exec& e, Replica& r, size_t B) {
  const uint32_t in0 = model_->mlp_input_width(), W0 = model_->input_width();
  const uint32_t cross_layers = model_->cross().layers;
  e.Reserve(&r.dmi, B * in0);
  if (model_->options().dot) e.Reserve(&r.mlp_in, B * in0);
  r.cross_x.resize(cross_layers);
  r.cross_u.resize(cross_layers);
  r.cross_gu.resize(cross_layers);
  r.cross_low.resize(cross_layers);
  r.cross_glow.resize(cross_layers);
  const uint32_t rank = model_->cross().rank;
  for (uint32_t l = 0; l < cross_layers; ++l) {
    e.Reserve(&r.cross_x[l], B * W0);
    e.Reserve(&r.cross_u[l], B * W0);
    e.Reserve(&r.cross_gu[l], B * W0);
    e.Reserve(&r.cross_low[l], B * rank);
    e.Reserve(&r.cross_glow[l], B * rank);
  }
  const MixLayout& mx = model_->mix();
  r.mix.resize(mx.layers);
  for (GpuMixBuffers<Exec>& mb : r.mix) {
    const size_t K = mx.experts, R = mx.rank;
    for (auto* w : {&mb.x, &mb.dub}) e.Reserve(w, B * W0);
    for (auto* w : {&mb.u, &mb.du}) e.Reserve(w, K * B * W0);
    for (auto* w : {&mb.a, &mb.c, &mb.dc, &mb.da}) e.Reserve(w, K * B * R);
    for (auto* w : {&mb.gate, &mb.dgate}) e.Reserve(w, B * K);
  }
  if (mx.layers > 0) {
    for (auto* w : {&r.mix_g, &r.mix_acc, &r.mix_tmp, &r.cross_g}) e.Reserve(w, B * W0);
  }
  if (cross_layers > 0) {
    e.Reserve(&r.cross_g, B * W0);
    e.Reserve(&r.cross_t, B * W0);
    e.Reserve(&r.cross_acc, B * W0);
  }
  const Mlp& bottom = model_->bottom();
  if (bottom.num_layers() > 0) {
    e.Reserve(&r.bottom_in, B * bottom.in(0));
    e.Reserve(&r.bottom_gz, B * model_->dense_width());
    r.bottom_acts.resize(bottom.num_layers());
    r.bottom_grads.resize(bottom.num_layers());
    for (uint32_t l = 0; l < bottom.num_layers(); ++l) {
      e.Reserve(&r.bottom_acts[l], B * bottom.out(l));
      e.Reserve(&r.bottom_grads[l], B * bottom.out(l));
    }
  }
}

template <class Exec>
uint64_t GpuStep<Exec>::StagedBytes() const {
  uint64_t b = 0;
  auto add = [&b](const auto& buf) { b += buf.size() * sizeof(*buf.data()); };
  for (const Staged& s : staged_) {
    for (const Part& p : s.parts) {
      for (const auto* f :
           {&p.rows.show, &p.rows.click, &p.rows.wide, &p.rows.wide_state, &p.rows.emb,
            &p.rows.emb_state, &p.send, &p.recv_grad, &p.acc, &p.sums}) {
        add(*f);
      }
      add(p.rows.unseen);
      add(p.rows.flags);
      for (const auto* k : {&p.keys, &p.bucket_keys, &p.recv_keys}) add(*k);
      for (const auto* u : {&p.bucket_rows, &p.special, &p.recv_rows, &p.touched, &p.touched_src,
                            &p.status, &p.created}) {
        add(*u);
      }
    }
    for (const Feed& f : s.feeds) {
      for (const auto* x : {&f.labels, &f.dense, &f.weights, &f.predictions, &f.fetch, &f.grad}) {
        add(*x);
      }
      for (const auto* u : {&f.offsets, &f.fetch_pos, &f.cell, &f.uniq_occ_begin, &f.uniq_occ}) {
        add(*u);
      }
    }
  }
  return b;
}

}  // namespace ctrbox

#endif  // CTRBOX_GPU_STEP_STAGE_H_
