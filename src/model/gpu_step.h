// GpuStep: the train stage on N GPUs (docs/gpu.md), written once against an executor
// (model/host_exec.h lists what one provides): CudaExec in model/cuda_backend.cu instantiates
// it on CUDA streams, model/gpu_trainer.cc on host threads (the emulation the CPU-only tests run).
//
// A pass goes through two calls:
//   Stage (pull stage, copy queues): plans the pass over the GPUs (working/hbm_plan.h),
//     uploads each owner's rows and builds its hash index, uploads the examples, and looks up
//     the rows of the keys every GPU will ask each owner for (the key -> row lookup).
//   Train (train stage, compute queues): re-uploads rows that passes in flight changed, then
//     per minibatch: owners gather the asked rows, the exchange copies them to the asking
//     GPUs, each GPU pools its slice's embeddings and runs the MLP (forward, loss, backward)
//     on its replica, reduces its gradients per key and sends them to the owners; the dense
//     gradients are all-reduced and every replica takes the same step; owners accumulate the
//     sparse gradients per row and update each row once (optimizer, quantization, counters,
//     embedding creation). At the end the rows come back into the host's RowBlock.
//
// Every kernel body is a CTRBOX_HD lambda over an index: the same code on the GPU and in
// the host emulation. Thread safety: Stage and Train may run on two threads (the pipeline's
// pull and train stages) for different passes; neither is reentrant.
#ifndef CTRBOX_MODEL_GPU_STEP_H_
#define CTRBOX_MODEL_GPU_STEP_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "io/batch.h"
#include "model/cross_mix.h"
#include "model/ctr_model.h"
#include "model/gpu_options.h"
#include "model/gpu_trainer.h"
#include "model/interactions.h"
#include "model/towers.h"
#include "table/accessor.h"
#include "table/value.h"
#include "util/hd.h"
#include "util/status.h"
#include "working/hbm_plan.h"
#include "working/hbm_table.h"
#include "working/working_set.h"

namespace ctrbox {

template <class Exec>
class GpuStep {
 public:
  template <class T>
  using Buf = typename Exec::template Buffer<T>;

  // compute[g], copy[g]: GPU g's two queues (they may be the same executor). all_reduce, if
  // set, sums n floats at ptrs[g] across the GPUs in place and returns true; if unset or it
  // returns false, the step sums through GPU 0 in GPU order.
  using AllReduceFn = bool (*)(void* ctx, const std::vector<float*>& ptrs, size_t n);
  GpuStep(CtrModel* model, const CtrAccessor& accessor, const GpuOptions& options,
          std::vector<Exec*> compute, std::vector<Exec*> copy, AllReduceFn all_reduce = nullptr,
          void* all_reduce_ctx = nullptr)
      : model_(model),
        accessor_(accessor),
        options_(options),
        gpus_(static_cast<uint32_t>(compute.size())),
        compute_(std::move(compute)),
        copy_(std::move(copy)),
        all_reduce_(all_reduce),
        all_reduce_ctx_(all_reduce_ctx),
        slots_(std::max<uint32_t>(1, options.slots)),
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

  // ---- Stage: the pull stage's half --------------------------------------------------------

  Status Stage(uint64_t pass_index, const Batch& pass, const WorkingSet& ws, const RowBlock& rows) {
    Slot& s = slots_[pass_index % slots_.size()];
    s.pass_index = pass_index;
    for (uint32_t g = 0; g < gpus_; ++g) copy_[g]->Recycle();
    BuildHbmPlan(pass, ws, gpus_, &s.plan);
    const HbmPlan& plan = s.plan;
    const ValueLayout& L = rows.layout();
    s.parts.resize(gpus_);
    s.feeds.resize(gpus_);
    // Owners: rows, hash index, and the rows of the keys each GPU will ask for.
    for (uint32_t o = 0; o < gpus_; ++o) {
      Exec& e = *copy_[o];
      Part& part = s.parts[o];
      const std::vector<uint32_t>& locals = plan.locals[o];
      part.n = locals.size();
      HostRows host(L, locals.size());
      host.Gather(rows, locals);
      UploadRows(e, host, &part.rows);
      std::vector<uint64_t> keys(locals.size());
      for (size_t i = 0; i < locals.size(); ++i) keys[i] = ws.keys[locals[i]];
      e.Upload(&part.keys, keys.data(), keys.size());
      const size_t cap = HbmCapacity(part.n);
      e.Reserve(&part.slot_keys, cap);
      e.Reserve(&part.slot_rows, cap);
      e.Reserve(&part.special, 1);
      e.Fill(part.slot_keys.data(), kEmptyKey, cap);
      e.Fill(part.special.data(), kNoRow, 1);
      const HbmIndex idx{part.slot_keys.data(), part.slot_rows.data(), part.special.data(),
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
      std::vector<uint64_t> recv;
      part.recv_base.assign(plan.slices.size() + 1, 0);
      for (size_t si = 0; si < plan.slices.size(); ++si) {
        const HbmSlice& sl = plan.slices[si];
        part.recv_base[si] = static_cast<uint32_t>(recv.size());
        for (uint32_t u = sl.seg[o]; u < sl.seg[o + 1]; ++u) {
          recv.push_back(ws.keys[plan.uniq_local[sl.uniq_begin + u]]);
        }
      }
      part.recv_base.back() = static_cast<uint32_t>(recv.size());
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
      e.Reserve(&part.created, 1);
      e.Fill(part.created.data(), 0u, 1);
    }
    // Every GPU's copy of the examples and of its slices' plan.
    for (uint32_t g = 0; g < gpus_; ++g) {
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
    s.staged.resize(gpus_);
    for (uint32_t g = 0; g < gpus_; ++g) s.staged[g] = copy_[g]->Record();
    for (uint32_t g = 0; g < gpus_; ++g) RETURN_IF_ERROR(copy_[g]->status());
    return Status::OK();
  }

  // ---- Train: the train stage's half -------------------------------------------------------

  // Trains the staged pass `pass_index`: `patched` lists the local ids whose rows in `rows`
  // changed since Stage (rows taken from passes in flight). On return `rows` holds the
  // trained rows, predictions[r] the prediction of row r before its minibatch's update, and
  // *created the embeddings created.
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
               uint64_t* created, RankExchange* ranks = nullptr) {
    Slot& s = slots_[pass_index % slots_.size()];
    if (s.pass_index != pass_index) {
      return InternalError("GPU backend: pass " + std::to_string(pass_index) + " was not staged");
    }
    const HbmPlan& plan = s.plan;
    for (uint32_t g = 0; g < gpus_; ++g) {
      compute_[g]->Recycle();
      compute_[g]->Wait(s.staged[g]);
    }
    for (uint32_t o = 0; o < gpus_; ++o) {
      uint32_t bad = 0;
      compute_[o]->Download(&bad, s.parts[o].status.data(), 1);
      RETURN_IF_ERROR(compute_[o]->status());
      if (bad != 0) {
        return InternalError("GPU backend: the working table of GPU " + std::to_string(o) +
                             " lost " + std::to_string(bad) + " keys (insert or lookup failed)");
      }
    }
    if (!patched.empty()) Patch(s, *rows, patched);
    EnsureWork(s, pass);
    uint64_t total_created = 0;
    if (ranks != nullptr) {
      if (ranks->minibatches() < plan.minibatches()) {
        return InternalError("GPU backend: the ranks agree on fewer minibatches than the pass has");
      }
      for (uint32_t b = 0; b < ranks->minibatches(); ++b) {
        RETURN_IF_ERROR(TrainRankMinibatch(s, pass, b, ranks, rows, &total_created));
      }
    } else {
      for (size_t b = 0; b < plan.minibatches(); ++b) TrainMinibatch(s, pass, b);
    }
    // Rows, predictions and counters back to the host.
    const ValueLayout& L = rows->layout();
    for (uint32_t o = 0; o < gpus_ && ranks == nullptr; ++o) {
      Exec& e = *compute_[o];
      HostRows host(L, s.parts[o].n);
      DownloadRows(e, s.parts[o].rows, &host);
      host.Scatter(plan.locals[o], rows);
      uint32_t c = 0;
      e.Download(&c, s.parts[o].created.data(), 1);
      total_created += c;
      RETURN_IF_ERROR(e.status());
    }
    for (uint32_t g = 0; g < gpus_; ++g) {
      std::vector<float> p(pass.rows());
      compute_[g]->Download(p.data(), s.feeds[g].predictions.data(), p.size());
      for (size_t b = 0; b < plan.minibatches(); ++b) {
        const HbmSlice& sl = plan.slice(b, g);
        std::copy(p.begin() + sl.row_begin, p.begin() + sl.row_end, predictions + sl.row_begin);
      }
    }
    // The dense state back into the host model (checkpoints, export, evaluation).
    const size_t P = NumParams();
    Exec& e0 = *compute_[0];
    e0.Download(model_->dense_params().data(), replicas_[0].params.data(), P);
    DenseOptimizer& opt = model_->dense_optimizer();
    if (!opt.m().empty()) e0.Download(opt.m().data(), replicas_[0].m.data(), P);
    if (!opt.v().empty()) e0.Download(opt.v().data(), replicas_[0].v.data(), P);
    for (uint32_t g = 0; g < gpus_; ++g) RETURN_IF_ERROR(compute_[g]->status());
    *created = total_created;
    s.pass_index = ~uint64_t{0};
    return Status::OK();
  }

  // ---- pieces (public: CUDA's extended lambdas may not sit in private members) ----

  struct Layer {
    uint32_t in, out;
    size_t w, b;  // offsets of the weights [in x out] and the bias [out]
  };

  // A pass's rows of one owner, field by field (RowBlock's structure of arrays).
  struct DeviceRows {
    Buf<float> show, click, wide, wide_state, emb, emb_state;
    Buf<uint16_t> unseen, flags;
  };
  struct HostRows {
    HostRows(const ValueLayout& L, size_t n)
        : layout(L),
          n(n),
          show(n),
          click(n),
          wide(n),
          wide_state(n * L.wide_state),
          emb(n * L.dim),
          emb_state(n * L.emb_state),
          unseen(n),
          flags(n) {}
    void Gather(const RowBlock& r, const std::vector<uint32_t>& locals) {
      for (size_t i = 0; i < locals.size(); ++i) Get(r, locals[i], i);
    }
    void Get(const RowBlock& r, uint32_t l, size_t i) {
      show[i] = r.show(l);
      click[i] = r.click(l);
      wide[i] = r.wide(l);
      unseen[i] = r.unseen(l);
      flags[i] = r.flags(l);
      std::copy_n(r.wide_state(l), layout.wide_state, wide_state.data() + i * layout.wide_state);
      std::copy_n(r.emb(l), layout.dim, emb.data() + i * layout.dim);
      std::copy_n(r.emb_state(l), layout.emb_state, emb_state.data() + i * layout.emb_state);
    }
    void Scatter(const std::vector<uint32_t>& locals, RowBlock* r) const {
      for (size_t i = 0; i < locals.size(); ++i) {
        const uint32_t l = locals[i];
        r->show(l) = show[i];
        r->click(l) = click[i];
        r->wide(l) = wide[i];
        r->unseen(l) = unseen[i];
        r->flags(l) = flags[i];
        std::copy_n(wide_state.data() + i * layout.wide_state, layout.wide_state, r->wide_state(l));
        std::copy_n(emb.data() + i * layout.dim, layout.dim, r->emb(l));
        std::copy_n(emb_state.data() + i * layout.emb_state, layout.emb_state, r->emb_state(l));
      }
    }
    ValueLayout layout;
    size_t n;
    std::vector<float> show, click, wide, wide_state, emb, emb_state;
    std::vector<uint16_t> unseen, flags;
  };

  struct Part {  // what one owner holds of a pass
    size_t n = 0;
    DeviceRows rows;
    Buf<uint64_t> keys, slot_keys, recv_keys;
    Buf<uint32_t> slot_rows, special, recv_rows, touched, status, created;
    HbmIndex index;
    std::vector<uint32_t> recv_base;  // [slice] offsets into recv_keys / recv_rows
    // Per minibatch: rows gathered for each asking GPU, and their gradients coming back.
    Buf<float> send, recv_grad, acc;
    Buf<float> sums;  // with ranks: the touched rows' summed records, to the host
  };
  struct Feed {  // one GPU's copy of the pass's examples
    Buf<float> labels, dense, weights, predictions;
    Buf<uint32_t> offsets, fetch_pos, cell, uniq_occ_begin, uniq_occ;
    // Per minibatch: the rows this GPU asked for (embedding, wide, flag) and its gradients.
    Buf<float> fetch, grad;
  };
  struct Slot {
    uint64_t pass_index = ~uint64_t{0};
    HbmPlan plan;
    std::vector<Part> parts;
    std::vector<Feed> feeds;
    std::vector<typename Exec::Event> staged;
  };
  struct MixBuffers {  // one mixture layer's, as MixRows names them
    Buf<float> x, a, c, u, gate, du, dc, da, dgate, dub;
  };
  struct TowerBuffers {  // one tower's, as TowerRows names them
    Buf<float> tin, dtin, inj_first, inj_last;
    std::vector<Buf<float>> acts, grads;
    Buf<uint32_t> cols, inv;
  };
  struct Replica {  // one GPU's dense parameters and minibatch buffers
    Buf<float> params, grads, m, v, sum;
    Buf<float> x, logits, dlogit, wide_sum, dx;
    std::vector<Buf<float>> acts, hgrads;
    // The interactions' (as CtrModel's): the MLP's input with dots and its gradient, each
    // cross layer's output, sum and sum gradient, the backward's running buffers.
    Buf<float> mlp_in, dmi, cross_g, cross_t, cross_acc;
    std::vector<Buf<float>> cross_x, cross_u, cross_gu, cross_low, cross_glow;
    // The bottom MLP's input, the gradient at z, and per layer activations and gradients.
    Buf<float> bottom_in, bottom_gz;
    std::vector<TowerBuffers> tw;  // per tower (model.towers)
    std::vector<MixBuffers> mix;   // per mixture layer (model.cross_experts)
    Buf<float> mix_g, mix_acc, mix_tmp;
    std::vector<Buf<float>> bottom_acts, bottom_grads;
    // With model.slot_dims: the slot of every embedding column, and every slot's first column
    // (from the dense width) and dimension. Empty with one dimension (column / dim is the slot).
    Buf<uint32_t> col_slot, slot_col, slot_dim;
  };

  // The dense parameters: the MLP's, then the cross layers', then the bottom MLP's.
  size_t NumParams() const { return model_->dense_params().size(); }

  // Bytes of the GPU buffers that hold staged passes (every slot's rows, keys, indexes,
  // examples and exchange buffers): their high-water mark, since buffers only grow. Not
  // while a Stage runs.
  uint64_t StagedBytes() const {
    uint64_t b = 0;
    auto add = [&b](const auto& buf) { b += buf.size() * sizeof(*buf.data()); };
    for (const Slot& s : slots_) {
      for (const Part& p : s.parts) {
        for (const auto* f :
             {&p.rows.show, &p.rows.click, &p.rows.wide, &p.rows.wide_state, &p.rows.emb,
              &p.rows.emb_state, &p.send, &p.recv_grad, &p.acc, &p.sums}) {
          add(*f);
        }
        add(p.rows.unseen);
        add(p.rows.flags);
        for (const auto* k : {&p.keys, &p.slot_keys, &p.recv_keys}) add(*k);
        for (const auto* u :
             {&p.slot_rows, &p.special, &p.recv_rows, &p.touched, &p.status, &p.created}) {
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

  // Floats per row in the exchange: embedding, wide, has-embedding flag (rows to the asking
  // GPU), or embedding gradient, wide gradient, shows, clicks (gradients to the owner).
  // (embedding: the widest table's dimension, RowDim(); a smaller table's key leaves the rest
  // zero.)
  uint32_t RowDim() const { return model_->SparseRecordWidth() - 3; }
  uint32_t FetchStride() const { return RowDim() + 2; }
  uint32_t GradStride() const { return RowDim() + 3; }

  // Calls f(device field, host field) for every field of a row.
  template <class H, class F>
  static void EachField(DeviceRows& d, H& h, F f) {
    f(d.show, h.show);
    f(d.click, h.click);
    f(d.wide, h.wide);
    f(d.wide_state, h.wide_state);
    f(d.emb, h.emb);
    f(d.emb_state, h.emb_state);
    f(d.unseen, h.unseen);
    f(d.flags, h.flags);
  }
  void UploadRows(Exec& e, const HostRows& h, DeviceRows* d) {
    EachField(*d, h,
              [&](auto& dev, const auto& host) { e.Upload(&dev, host.data(), host.size()); });
  }
  void DownloadRows(Exec& e, DeviceRows& d, HostRows* h) {
    EachField(d, *h,
              [&](auto& dev, auto& host) { e.Download(host.data(), dev.data(), host.size()); });
  }

  // Re-uploads the rows of `patched` local ids: per owner, the rows in a staging block,
  // then scattered into place.
  void Patch(Slot& s, const RowBlock& rows, const std::vector<uint32_t>& patched) {
    const ValueLayout& L = rows.layout();
    // A row patched from two passes in flight is listed twice (with its final value in
    // `rows`): once each, so no two threads write one row.
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
      h.Gather(rows, by_owner[o]);
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

  // Sizes the minibatch buffers for the slot's largest slice and exchange.
  void EnsureWork(Slot& s, const Batch& pass) {
    const HbmPlan& plan = s.plan;
    const uint32_t in0 = model_->mlp_input_width(), W0 = model_->input_width();
    const uint32_t cross_layers = model_->cross().layers;
    uint32_t max_rows = 0, max_uniq = 0;
    std::vector<uint32_t> max_recv(gpus_, 0), max_touched(gpus_, 0);
    for (size_t b = 0; b < plan.minibatches(); ++b) {
      for (uint32_t g = 0; g < gpus_; ++g) {
        const HbmSlice& sl = plan.slice(b, g);
        max_rows = std::max(max_rows, sl.rows());
        max_uniq = std::max(max_uniq, sl.uniq());
      }
      for (uint32_t o = 0; o < gpus_; ++o) {
        const Part& part = s.parts[o];
        max_recv[o] =
            std::max(max_recv[o], part.recv_base[(b + 1) * gpus_] - part.recv_base[b * gpus_]);
      }
    }
    for (uint32_t g = 0; g < gpus_; ++g) {
      Exec& e = *compute_[g];
      Replica& r = replicas_[g];
      const size_t B = std::max<uint32_t>(max_rows, 1);
      e.Reserve(&r.x, B * W0);
      if (model_->options().HasInteractions()) {
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
        for (MixBuffers& mb : r.mix) {
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
      e.Reserve(&r.logits, B);
      e.Reserve(&r.dlogit, B);
      e.Reserve(&r.wide_sum, B);
      e.Reserve(&r.dx, B * model_->emb_width());
      for (size_t l = 0; l + 1 < layers_.size(); ++l) {
        e.Reserve(&r.acts[l], B * layers_[l].out);
        e.Reserve(&r.hgrads[l], B * layers_[l].out);
      }
      const Towers& tw = model_->towers();
      for (uint32_t t = 0; t < tw.count(); ++t) {
        TowerBuffers& tb = r.tw[t];
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
      Feed& f = s.feeds[g];
      e.Reserve(&f.fetch, size_t{std::max<uint32_t>(max_uniq, 1)} * FetchStride());
      e.Reserve(&f.grad, size_t{std::max<uint32_t>(max_uniq, 1)} * GradStride());
      Part& part = s.parts[g];
      e.Reserve(&part.send, size_t{std::max<uint32_t>(max_recv[g], 1)} * FetchStride());
      e.Reserve(&part.recv_grad, size_t{std::max<uint32_t>(max_recv[g], 1)} * GradStride());
      e.Reserve(&part.acc, std::max<size_t>(part.n, 1) * GradStride());
    }
  }

  void TrainMinibatch(Slot& s, const Batch& pass, size_t b) {
    const HbmPlan& plan = s.plan;
    const uint32_t N = gpus_;
    // 1. Owners gather the rows each GPU asked for; the exchange copies them over.
    ExchangeRows(s, b);
    // 2. Each GPU: inputs, MLP forward / backward, per-key gradients.
    model_->dense_optimizer().BeginStep();
    const DenseStep step = model_->dense_optimizer().CurrentStep();
    const uint32_t batch_rows = plan.slice(b, N - 1).row_end - plan.slice(b, 0).row_begin;
    for (uint32_t g = 0; g < N; ++g) Forward(s, pass, b, g, batch_rows);
    // 3. Dense gradients summed over the GPUs; every replica takes the same step.
    AllReduceDense();
    for (uint32_t g = 0; g < N; ++g) DenseUpdate(g, step);
    // 4. Gradients to the owners; each owner updates its rows.
    const auto reduced = RecordAll();
    for (uint32_t o = 0; o < N; ++o) {
      SumGradients(s, b, o, reduced);
      UpdateRows(s, b, o);
    }
  }

  // Minibatch b of a distributed job's pass (Train with ranks): TrainMinibatch with the dense
  // gradient summed over the ranks as well, and the rows updated by their owning ranks on the
  // host instead of on the GPUs. b at or past the plan's minibatches is an empty one of this
  // rank: no rows, a zero gradient, the collectives all the same.
  Status TrainRankMinibatch(Slot& s, const Batch& pass, uint32_t b, RankExchange* ranks,
                            RowBlock* rows, uint64_t* created) {
    const HbmPlan& plan = s.plan;
    const uint32_t N = gpus_;
    const bool mine = b < plan.minibatches();
    // Recycle waits for each queue, so the upload staging of the minibatch before (its dense
    // gradient and refreshed rows) is free again: a pass's staging stays one minibatch's.
    for (uint32_t g = 0; g < N; ++g) compute_[g]->Recycle();
    if (mine) ExchangeRows(s, b);
    model_->dense_optimizer().BeginStep();
    const DenseStep step = model_->dense_optimizer().CurrentStep();
    const size_t P = NumParams();
    for (uint32_t g = 0; g < N; ++g) {
      if (mine) {
        Forward(s, pass, b, g, ranks->global_rows(b));
      } else {
        float* gr = replicas_[g].grads.data();
        compute_[g]->ForEach(P, [=] CTRBOX_HD(size_t i) { gr[i] = 0.0f; });
      }
    }
    AllReduceDense();
    rank_dense_.resize(P);
    compute_[0]->Download(rank_dense_.data(), replicas_[0].grads.data(), P);
    RETURN_IF_ERROR(compute_[0]->status());
    RETURN_IF_ERROR(ranks->AllReduceDense(rank_dense_.data(), P));
    for (uint32_t g = 0; g < N; ++g) {
      compute_[g]->Upload(&replicas_[g].grads, rank_dense_.data(), P);
      DenseUpdate(g, step);
    }
    // This rank's sum of each touched key's gradient, at the key's owning GPU, to the host.
    const uint32_t gs = GradStride();
    rank_locals_.clear();
    rank_records_.clear();
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
    rank_refreshed_.clear();
    uint64_t c = 0;
    RETURN_IF_ERROR(ranks->ReduceSparse(b, rank_locals_.data(), rank_records_.data(),
                                        rank_locals_.size(), rows, &rank_refreshed_, &c));
    *created += c;
    if (!rank_refreshed_.empty()) Patch(s, *rows, rank_refreshed_);
    for (uint32_t g = 0; g < N; ++g) RETURN_IF_ERROR(compute_[g]->status());
    return Status::OK();
  }

  // Step 1 of minibatch b: owners gather the rows each GPU asked for; the exchange copies
  // them over.
  void ExchangeRows(Slot& s, size_t b) {
    const HbmPlan& plan = s.plan;
    const uint32_t N = gpus_;
    for (uint32_t o = 0; o < N; ++o) GatherRows(s, b, o);
    std::vector<typename Exec::Event> gathered(N);
    for (uint32_t o = 0; o < N; ++o) gathered[o] = compute_[o]->Record();
    for (uint32_t g = 0; g < N; ++g) {
      Exec& e = *compute_[g];
      const HbmSlice& sl = plan.slice(b, g);
      for (uint32_t o = 0; o < N; ++o) {
        // Always waited for, also with nothing to copy: o's queue then is past its reads of
        // this GPU's buffers from the minibatch before.
        if (o != g) e.Wait(gathered[o]);
        const uint32_t n = sl.seg[o + 1] - sl.seg[o];
        if (n == 0) continue;
        const Part& part = s.parts[o];
        const size_t from = part.recv_base[b * N + g] - part.recv_base[b * N];
        e.Copy(s.feeds[g].fetch.data() + size_t{sl.seg[o]} * FetchStride(),
               part.send.data() + from * FetchStride(), size_t{n} * FetchStride());
      }
    }
  }

  void GatherRows(Slot& s, size_t b, uint32_t o) {
    Exec& e = *compute_[o];
    Part& part = s.parts[o];
    const uint32_t N = gpus_;
    const uint32_t first = part.recv_base[b * N], n = part.recv_base[(b + 1) * N] - first;
    const uint32_t* row_of = part.recv_rows.data() + first;
    const uint32_t dim = RowDim(), stride = FetchStride();
    const float *emb = part.rows.emb.data(), *wide = part.rows.wide.data();
    const uint16_t* flags = part.rows.flags.data();
    float* out = part.send.data();
    e.ForEach(size_t{n} * stride, [=] CTRBOX_HD(size_t i) {
      const size_t k = i / stride, j = i % stride;
      const size_t r = row_of[k];
      float v;
      if (j < dim) {
        v = emb[r * dim + j];
      } else if (j == dim) {
        v = wide[r];
      } else {
        v = (flags[r] & kFlagHasEmb) ? 1.0f : 0.0f;
      }
      out[i] = v;
    });
  }

  void Forward(Slot& s, const Batch& pass, size_t b, uint32_t g, uint32_t batch_rows) {
    Exec& e = *compute_[g];
    Replica& rep = replicas_[g];
    Feed& f = s.feeds[g];
    const size_t si = b * gpus_ + g;
    const HbmSlice& sl = s.plan.slices[si];
    const uint32_t B = sl.rows();
    if (B == 0) {  // a slice without rows contributes zero gradients
      e.Fill(rep.grads.data(), 0.0f, NumParams());
      return;
    }
    const ModelOptions& mo = model_->options();
    const uint32_t D = pass.schema.num_dense, S = pass.schema.num_slots, dim = mo.embedding_dim;
    const uint32_t in0 = model_->mlp_input_width(), fs = FetchStride(), row0 = sl.row_begin;
    // A fetched row: its embedding (rd floats), wide weight, has-embedding flag. With
    // model.slot_dims a slot's columns are found through col_slot / slot_col.
    const uint32_t rd = RowDim(), E = model_->emb_width();
    const uint32_t *col_slot = rep.col_slot.data(), *slot_col = rep.slot_col.data(),
                   *slot_dim = rep.slot_dim.data();
    const bool multi = mo.MultiTable();
    const uint32_t W0 = model_->input_width();
    const bool weighted = pass.has_weights(), log1p = mo.dense_log1p, wide_on = mo.wide;
    const float *dense = f.dense.data(), *weights = f.weights.data(), *fetch = f.fetch.data(),
                *labels = f.labels.data();
    const uint32_t *offsets = f.offsets.data(), *fetch_pos = f.fetch_pos.data(),
                   *cells = f.cell.data();
    // ws.cell counts from the minibatch's first row; the slice's cells from its own.
    const uint32_t cell_shift = (row0 - s.plan.slice(b, 0).row_begin) * S;
    float *x = rep.x.data(), *wide_sum = rep.wide_sum.data();
    // Inputs: dense features, then each slot's pooled embeddings (sum over its keys, in the
    // CPU model's order).
    // With a bottom MLP the dense features go into its input, and z (its output) into the
    // first Dx = dim columns; otherwise Dx = D.
    const uint32_t Dx = model_->dense_width();
    const bool bottom_on = model_->bottom().num_layers() > 0;
    float* bottom_in = bottom_on ? rep.bottom_in.data() : nullptr;
    if (bottom_on) {
      e.ForEach(size_t{B} * D, [=] CTRBOX_HD(size_t i) {
        const float v = dense[(row0 + i / D) * D + i % D];
        bottom_in[i] = log1p ? std::log1p(v > 0.0f ? v : 0.0f) : v;
      });
    }
    e.ForEach(size_t{B} * W0, [=] CTRBOX_HD(size_t i) {
      const size_t r = i / W0, c = i % W0, R = row0 + r;
      if (c < Dx) {
        if (bottom_on) return;  // z, written by the bottom MLP
        const float v = dense[R * D + c];
        x[i] = log1p ? std::log1p(v > 0.0f ? v : 0.0f) : v;
        return;
      }
      uint32_t slot, d;
      if (multi) {
        slot = col_slot[c - Dx];
        d = static_cast<uint32_t>(c - Dx) - slot_col[slot];
      } else {
        slot = static_cast<uint32_t>((c - Dx) / dim);
        d = static_cast<uint32_t>((c - Dx) % dim);
      }
      float sum = 0.0f;
      for (uint32_t p = offsets[R * S + slot]; p < offsets[R * S + slot + 1]; ++p) {
        const float* row = fetch + size_t{fetch_pos[p]} * fs;
        if (row[rd + 1] == 0.0f) continue;  // no embedding yet
        const float w = weighted ? weights[p] : 1.0f;
        sum += w * row[d];
      }
      x[i] = sum;
    });
    if (bottom_on) BottomForward(rep, B);
    e.ForEach(B, [=] CTRBOX_HD(size_t r) {
      const size_t R = row0 + r;
      float wide = 0.0f;
      for (uint32_t p = offsets[R * S]; p < offsets[R * S + S]; ++p) {
        const float w = weighted ? weights[p] : 1.0f;
        wide += w * fetch[size_t{fetch_pos[p]} * fs + rd];
      }
      wide_sum[r] = wide_on ? wide : 0.0f;
    });
    const float* params = rep.params.data();
    const bool interactions = mo.HasInteractions();
    const float* mlp_input = interactions ? InteractionsForward(rep, B, S, dim) : x;
    // MLP forward (or the towers' into logits, with their own output unit).
    const float* input = mlp_input;
    const Towers& tw = model_->towers();
    const uint32_t L = static_cast<uint32_t>(layers_.size());
    TowerRows tr;
    if (tw.on()) {
      tr = TowerPointers(rep, mlp_input);
      TowersForward(e, tw, params, tr, B, rep.logits.data());
    }
    for (uint32_t l = 0; l + 1 < L; ++l) {
      ReluLayer(e, layers_[l], params, input, B, rep.acts[l].data());
      input = rep.acts[l].data();
    }
    // The output layer: a dot product per row in the CPU model's order (the towers': their
    // logit).
    const Layer last = tw.on() ? Layer{} : layers_[L - 1];
    float *logits = rep.logits.data(), *dlogit = rep.dlogit.data();
    float* pred = f.predictions.data();
    const float* w_last = params + last.w;
    const float* bias_last = params + last.b;
    const uint32_t k_last = last.in;
    const float rows_f = static_cast<float>(batch_rows);
    const bool fm = mo.fm, towers_on = tw.on();
    e.ForEach(B, [=] CTRBOX_HD(size_t r) {
      float z;
      if (towers_on) {
        z = logits[r] + wide_sum[r];
      } else {
        const float* xr = input + r * k_last;
        float dot = 0.0f;
        for (uint32_t j = 0; j < k_last; ++j) dot += xr[j] * w_last[j];
        z = (dot + *bias_last) + wide_sum[r];
      }
      if (fm) z += FmTerm(x + r * W0 + Dx, S, dim);
      logits[r] = z;
      const float p = 1.0f / (1.0f + std::exp(-z));
      pred[row0 + r] = p;
      dlogit[r] = (p - labels[row0 + r]) / rows_f;
    });
    // Backward to the hidden layers and the inputs: the embedding columns (into dx), or with
    // interactions the MLP's input from column dmi_begin on (into dmi).
    float* dx = rep.dx.data();
    const uint32_t dmi_begin = model_->dmi_begin();
    const uint32_t from = interactions ? dmi_begin : D, emb_width = in0 - from;
    float* din = interactions ? rep.dmi.data() : dx;
    if (tw.on()) {
      TowersBackward(e, tw, params, tr, B, dlogit, din, from);
    } else if (L == 1) {
      const float* w = params + last.w;
      e.ForEach(size_t{B} * emb_width, [=] CTRBOX_HD(size_t i) {
        din[i] = dlogit[i / emb_width] * w[from + i % emb_width];
      });
    } else {
      {
        const uint32_t n = last.in;
        const float* w = params + last.w;
        const float* a = rep.acts[L - 2].data();
        float* gr = rep.hgrads[L - 2].data();
        e.ForEach(size_t{B} * n, [=] CTRBOX_HD(size_t i) {
          gr[i] = a[i] > 0.0f ? dlogit[i / n] * w[i % n] : 0.0f;
        });
      }
      for (uint32_t l = L - 2; l >= 1; --l) {
        ReluBackprop(e, layers_[l], params, rep.hgrads[l].data(), rep.acts[l - 1].data(), B,
                     rep.hgrads[l - 1].data());
      }
      const Layer first = layers_[0];
      e.Gemm(false, true, B, emb_width, first.out, rep.hgrads[0].data(), first.out,
             params + first.w + size_t{from} * first.out, first.out, din, emb_width);
    }
    if (interactions) InteractionsBackward(rep, B, S, dim);
    if (bottom_on) BottomBackward(rep, B);
    // Weight gradients of this slice (summed over the GPUs next).
    float* grads = rep.grads.data();
    for (uint32_t l = 0; l < L; ++l) {
      LayerWeightGrads(e, layers_[l], l == 0 ? mlp_input : rep.acts[l - 1].data(),
                       l == L - 1 ? dlogit : rep.hgrads[l].data(), B, grads);
    }
    if (tw.on()) TowerWeightGrads(rep, tr, B);
    CrossWeightGrads(rep, B);
    if (const MixLayout& mx = model_->mix(); mx.layers > 0) {
      const MixRows mr = MixPointers(rep, B);
      for (uint32_t l = 0; l < mx.layers; ++l) {
        for (uint32_t k = 0; k < mx.experts; ++k) MixExpertGrads(e, mx, mr, B, l, k, grads);
        MixLayerGrads(e, mx, mr, B, l, grads);
      }
    }
    if (bottom_on) BottomWeightGrads(rep, B);
    // Per-key gradients, shows and clicks of the slice's distinct keys.
    const uint32_t uniq = sl.uniq(), gs = GradStride();
    const uint32_t* occ_begin = s.plan.occ_offsets(si);
    const size_t occ_off = occ_begin - s.plan.uniq_occ_begin.data();
    const uint32_t *occ_b = f.uniq_occ_begin.data() + occ_off, *occ = f.uniq_occ.data();
    float* grad = f.grad.data();
    if (options_.scatter == ScatterMode::kSegment) {
      e.ForEach(size_t{uniq} * gs, [=] CTRBOX_HD(size_t i) {
        const size_t u = i / gs, j = i % gs;
        float acc = 0.0f;
        for (uint32_t q = occ_b[u]; q < occ_b[u + 1]; ++q) {
          const uint32_t p = occ[q];
          const uint32_t cell = cells[p] - cell_shift;
          const float w = weighted ? weights[p] : 1.0f;
          const uint32_t r = cell / S, slot = cell % S;
          if (j < rd) {
            // The slot's columns of dx (the key's table's dimension; beyond it zero).
            const uint32_t sd = multi ? slot_dim[slot] : dim;
            if (j < sd) {
              acc += w * dx[size_t{r} * E + (multi ? slot_col[slot] : slot * dim) + j];
            }
          } else if (j == rd) {
            acc += w * dlogit[r];
          } else if (j == rd + 1) {
            acc += 1.0f;
          } else {
            acc += labels[row0 + r];
          }
        }
        grad[i] = acc;
      });
    } else {
      e.Fill(grad, 0.0f, size_t{uniq} * gs);
      const uint32_t occ0 = sl.occ_begin, n_occ = sl.occ_end - sl.occ_begin;
      e.ForEach(size_t{n_occ} * gs, [=] CTRBOX_HD(size_t i) {
        const uint32_t p = occ0 + static_cast<uint32_t>(i / gs), j = static_cast<uint32_t>(i % gs);
        const uint32_t cell = cells[p] - cell_shift, r = cell / S, slot = cell % S;
        const float w = weighted ? weights[p] : 1.0f;
        float v;
        if (j < rd) {
          const uint32_t sd = multi ? slot_dim[slot] : dim;
          if (j >= sd) return;  // beyond the key's table's dimension: zero
          v = w * dx[size_t{r} * E + (multi ? slot_col[slot] : slot * dim) + j];
        } else if (j == rd) {
          v = w * dlogit[r];
        } else if (j == rd + 1) {
          v = 1.0f;
        } else {
          v = labels[row0 + r];
        }
        AtomicAddFloat(grad + size_t{fetch_pos[p]} * gs + j, v);
      });
    }
  }

  // The mixture's buffers of a replica (model/cross_mix.h) for a slice of B rows.
  MixRows MixPointers(Replica& rep, uint32_t B) {
    MixRows p;
    p.x0 = rep.x.data();
    for (MixBuffers& mb : rep.mix) {
      p.x.push_back(mb.x.data());
      p.a.push_back(mb.a.data());
      p.c.push_back(mb.c.data());
      p.u.push_back(mb.u.data());
      p.gate.push_back(mb.gate.data());
      p.du.push_back(mb.du.data());
      p.dc.push_back(mb.dc.data());
      p.da.push_back(mb.da.data());
      p.dgate.push_back(mb.dgate.data());
      p.dub.push_back(mb.dub.data());
    }
    p.g = rep.mix_g.data();
    p.acc = rep.mix_acc.data();
    p.tmp = rep.mix_tmp.data();
    p.kstride_r = size_t{B} * model_->mix().rank;
    p.kstride_w = size_t{B} * model_->mix().width;
    return p;
  }

  // The towers' buffers of a replica (model/towers.h), over its rows from 0.
  TowerRows TowerPointers(Replica& rep, const float* base) {
    TowerRows p;
    p.base = base;
    for (TowerBuffers& tb : rep.tw) {
      p.tin.push_back(tb.tin.data());
      p.dtin.push_back(tb.dtin.data());
      p.inj_first.push_back(tb.inj_first.data());
      p.inj_last.push_back(tb.inj_last.data());
      p.acts.emplace_back();
      p.grads.emplace_back();
      for (size_t l = 0; l < tb.acts.size(); ++l) {
        p.acts.back().push_back(tb.acts[l].data());
        p.grads.back().push_back(tb.grads[l].data());
      }
      p.cols.push_back(tb.cols.data());
      p.inv.push_back(tb.inv.data());
    }
    return p;
  }

  // The towers' weight gradients over the slice: each layer's as an MLP layer's, the output
  // unit's dw_t = hL_t^T dlogit and db the column sum of dlogit (the CPU model's kTowerOut).
  void TowerWeightGrads(Replica& rep, const TowerRows& p, uint32_t B) {
    Exec& e = *compute_[&rep - replicas_.data()];
    const Towers& tw = model_->towers();
    float* grads = rep.grads.data();
    for (uint32_t t = 0; t < tw.count(); ++t) {
      const Mlp& m = tw.tower(t);
      const size_t at = tw.base(t);
      const uint32_t L = tw.layers(t), last = tw.last(t);
      for (uint32_t l = 0; l < L; ++l) {
        LayerWeightGrads(e, Layer{m.in(l), m.out(l), at + m.w_offset(l), at + m.b_offset(l)},
                         l == 0 ? p.tin[t] : p.acts[t][l - 1], p.grads[t][l], B, grads);
      }
      e.Gemm(true, false, static_cast<int>(last), 1, static_cast<int>(B), p.acts[t][L - 1],
             static_cast<int>(last), rep.dlogit.data(), 1, grads + tw.out_w() + tw.out_begin(t), 1);
    }
    ColumnSums(e, rep.dlogit.data(), B, 1, grads + tw.out_b());
  }

  // The cross layers and the dot products (model/interactions.h) over the slice's B rows of
  // rep.x; returns the MLP's input.
  const float* InteractionsForward(Replica& rep, uint32_t B, uint32_t S, uint32_t dim) {
    Exec& e = *compute_[&rep - replicas_.data()];
    const CrossLayout cl = model_->cross();
    const uint32_t W0 = cl.width;
    // The dot vectors: z (with a bottom MLP), then the slots' embeddings, from column vec0.
    const uint32_t shift = model_->bottom().num_layers() > 0 ? 1 : 0, nvec = S + shift;
    const uint32_t vec0 = model_->dense_width() - shift * dim;
    const float* params = rep.params.data();
    const float* x0 = rep.x.data();
    const float* xl = x0;
    for (uint32_t l = 0; l < cl.layers; ++l) {
      float* u = rep.cross_u[l].data();
      float* xn = rep.cross_x[l].data();
      if (const uint32_t R = cl.rank; R > 0) {  // u = (x_l V_l) U_l
        float* low = rep.cross_low[l].data();
        e.Gemm(false, false, B, R, W0, xl, W0, params + cl.w_offset(l), R, low, R);
        e.Gemm(false, false, B, W0, R, low, R, params + cl.u_offset(l), W0, u, W0);
      } else {
        e.Gemm(false, false, B, W0, W0, xl, W0, params + cl.w_offset(l), W0, u, W0);
      }
      const float* b = params + cl.b_offset(l);
      e.ForEach(size_t{B} * W0,
                [=] CTRBOX_HD(size_t i) { xn[i] = CrossForward(x0[i], xl[i], &u[i], b[i % W0]); });
      xl = xn;
    }
    if (const MixLayout& mx = model_->mix(); mx.layers > 0) {
      MixForward(e, mx, params, MixPointers(rep, B), B);
      xl = rep.mix[mx.layers - 1].x.data();
    }
    if (!model_->options().dot) return xl;
    const uint32_t in0 = model_->mlp_input_width();
    float* mi = rep.mlp_in.data();
    e.ForEach(size_t{B} * in0, [=] CTRBOX_HD(size_t i) {
      const size_t r = i / in0;
      const uint32_t c = static_cast<uint32_t>(i % in0);
      if (c < W0) {
        mi[i] = xl[r * W0 + c];
        return;
      }
      uint32_t a, b;
      DotPairOf(c - W0, nvec, &a, &b);
      mi[i] = DotValue(x0 + r * W0 + vec0, dim, a, b);
    });
    return mi;
  }

  // From the MLP's input gradient (rep.dmi) back through the cross layers, the dot products
  // and the FM term to the pooled embeddings' gradient (rep.dx).
  void InteractionsBackward(Replica& rep, uint32_t B, uint32_t S, uint32_t dim) {
    Exec& e = *compute_[&rep - replicas_.data()];
    const CrossLayout cl = model_->cross();
    const uint32_t shift = model_->bottom().num_layers() > 0 ? 1 : 0, nvec = S + shift;
    const uint32_t Dx = model_->dense_width(), vec0 = Dx - shift * dim;
    // V: the gradient's columns from vec0 (z's dim with a bottom MLP, then the slots' columns,
    // of any dimensions; without FM and dots EmbInputGrad is the gradient that reached them).
    const uint32_t E = model_->emb_width(), V = shift * dim + E;
    const uint32_t W0 = cl.width, in0 = model_->mlp_input_width();
    const uint32_t dmi_begin = model_->dmi_begin(), mw = in0 - dmi_begin;
    const float* params = rep.params.data();
    const float* x0 = rep.x.data();
    const float* dmi = rep.dmi.data();
    const float* base = dmi + (vec0 - dmi_begin);  // at the dot vectors' first column
    uint32_t base_stride = mw;
    if (cl.layers > 0) {
      float *g = rep.cross_g.data(), *t = rep.cross_t.data(), *acc = rep.cross_acc.data();
      e.ForEach(size_t{B} * W0, [=] CTRBOX_HD(size_t i) { g[i] = dmi[(i / W0) * mw + i % W0]; });
      e.Fill(acc, 0.0f, size_t{B} * W0);
      for (uint32_t l = cl.layers; l-- > 0;) {
        const float* u = rep.cross_u[l].data();
        float* gu = rep.cross_gu[l].data();
        e.ForEach(size_t{B} * W0, [=] CTRBOX_HD(size_t i) {
          gu[i] = g[i] * x0[i];
          acc[i] += g[i] * u[i];
        });
        if (const uint32_t R = cl.rank; R > 0) {  // t = (gu U_l^T) V_l^T
          float* glow = rep.cross_glow[l].data();
          e.Gemm(false, true, B, R, W0, gu, W0, params + cl.u_offset(l), W0, glow, R);
          e.Gemm(false, true, B, W0, R, glow, R, params + cl.w_offset(l), R, t, W0);
        } else {
          e.Gemm(false, true, B, W0, W0, gu, W0, params + cl.w_offset(l), W0, t, W0);
        }
        e.ForEach(size_t{B} * W0, [=] CTRBOX_HD(size_t i) { g[i] += t[i]; });
      }
      e.ForEach(size_t{B} * W0, [=] CTRBOX_HD(size_t i) { g[i] += acc[i]; });
      base = g + vec0;
      base_stride = W0;
    }
    if (const MixLayout& mx = model_->mix(); mx.layers > 0) {
      float* g = rep.cross_g.data();
      MixBackward(e, mx, params, MixPointers(rep, B), B, dmi, mw, g);
      base = g + vec0;
      base_stride = W0;
    }
    const float* dlogit = rep.dlogit.data();
    float* dx = rep.dx.data();
    float* gz = shift > 0 ? rep.bottom_gz.data() : nullptr;
    const bool dot = model_->options().dot, fm = model_->options().fm;
    e.ForEach(size_t{B} * V, [=] CTRBOX_HD(size_t i) {
      const size_t r = i / V;
      const uint32_t c = static_cast<uint32_t>(i % V), v = c / dim, k = c % dim;
      const EmbGradTerms terms{x0 + r * W0 + vec0,
                               dot ? dmi + r * mw + (W0 - dmi_begin) : nullptr,
                               nvec,
                               shift,
                               dlogit[r],
                               fm};
      const float g = EmbInputGrad(base[r * base_stride + c], terms, dim, v, k);
      // Vector 0 with a bottom MLP is z: its gradient goes to the bottom MLP.
      if (v < shift) {
        gz[r * dim + k] = g;
      } else {
        dx[r * E + (c - shift * dim)] = g;
      }
    });
  }

  // The bottom MLP over the slice (model.bottom_mlp): ReLU layers from rep.bottom_in, the last
  // activation copied into rep.x's first columns (z).
  void BottomForward(Replica& rep, uint32_t B) {
    Exec& e = *compute_[&rep - replicas_.data()];
    const float* params = rep.params.data();
    const float* input = rep.bottom_in.data();
    for (size_t l = 0; l < bottom_layers_.size(); ++l) {
      ReluLayer(e, bottom_layers_[l], params, input, B, rep.bottom_acts[l].data());
      input = rep.bottom_acts[l].data();
    }
    const uint32_t z = model_->dense_width(), W0 = model_->input_width();
    float* x = rep.x.data();
    e.ForEach(size_t{B} * z, [=] CTRBOX_HD(size_t i) { x[(i / z) * W0 + i % z] = input[i]; });
  }

  // Back through the bottom MLP from the gradient at z (rep.bottom_gz): each layer's
  // pre-activation gradient (the CPU model's Mlp::BackwardFromTop).
  void BottomBackward(Replica& rep, uint32_t B) {
    Exec& e = *compute_[&rep - replicas_.data()];
    const uint32_t L = static_cast<uint32_t>(bottom_layers_.size());
    {
      const float* a = rep.bottom_acts[L - 1].data();
      const float* gz = rep.bottom_gz.data();
      float* g = rep.bottom_grads[L - 1].data();
      e.ForEach(size_t{B} * bottom_layers_[L - 1].out,
                [=] CTRBOX_HD(size_t i) { g[i] = a[i] > 0.0f ? gz[i] : 0.0f; });
    }
    for (uint32_t l = L - 1; l >= 1; --l) {
      ReluBackprop(e, bottom_layers_[l], rep.params.data(), rep.bottom_grads[l].data(),
                   rep.bottom_acts[l - 1].data(), B, rep.bottom_grads[l - 1].data());
    }
  }

  // The bottom MLP's weight gradients over the slice.
  void BottomWeightGrads(Replica& rep, uint32_t B) {
    Exec& e = *compute_[&rep - replicas_.data()];
    for (size_t l = 0; l < bottom_layers_.size(); ++l) {
      LayerWeightGrads(e, bottom_layers_[l],
                       l == 0 ? rep.bottom_in.data() : rep.bottom_acts[l - 1].data(),
                       rep.bottom_grads[l].data(), B, rep.grads.data());
    }
  }

  // The pieces the MLP and the bottom MLP share, for B rows:
  // y = ReLU(input W + b);
  static void ReluLayer(Exec& e, const Layer& ly, const float* params, const float* input,
                        uint32_t B, float* y) {
    e.Gemm(false, false, B, ly.out, ly.in, input, ly.in, params + ly.w, ly.out, y, ly.out);
    const float* bias = params + ly.b;
    const uint32_t n = ly.out;
    e.ForEach(size_t{B} * n, [=] CTRBOX_HD(size_t i) {
      const float v = y[i] + bias[i % n];
      y[i] = v > 0.0f ? v : 0.0f;
    });
  }
  // the layer below's pre-activation gradient: (g W^T) masked where its activation a_prev is 0;
  static void ReluBackprop(Exec& e, const Layer& ly, const float* params, const float* g,
                           const float* a_prev, uint32_t B, float* g_prev) {
    e.Gemm(false, true, B, ly.in, ly.out, g, ly.out, params + ly.w, ly.out, g_prev, ly.in);
    e.ForEach(size_t{B} * ly.in, [=] CTRBOX_HD(size_t i) {
      if (a_prev[i] <= 0.0f) g_prev[i] = 0.0f;
    });
  }
  // dW = xin^T gout, and db, into grads (laid out like the parameters).
  static void LayerWeightGrads(Exec& e, const Layer& ly, const float* xin, const float* gout,
                               uint32_t B, float* grads) {
    e.Gemm(true, false, ly.in, ly.out, B, xin, ly.in, gout, ly.out, grads + ly.w, ly.out);
    ColumnSums(e, gout, B, ly.out, grads + ly.b);
  }
  // out[j] = sum over the B rows of g[r][j] (n columns), in row order (the CPU model's order).
  static void ColumnSums(Exec& e, const float* g, uint32_t B, uint32_t n, float* out) {
    e.ForEach(n, [=] CTRBOX_HD(size_t j) {
      float acc = 0.0f;
      for (uint32_t r = 0; r < B; ++r) acc += g[size_t{r} * n + j];
      out[j] = acc;
    });
  }

  // The cross layers' weight gradients over the slice: dW_l = x_l^T gu_l (or low rank dU_l,
  // dV_l), db_l the column sums of gu_l in row order.
  void CrossWeightGrads(Replica& rep, uint32_t B) {
    Exec& e = *compute_[&rep - replicas_.data()];
    const CrossLayout cl = model_->cross();
    const uint32_t W0 = cl.width;
    float* grads = rep.grads.data();
    for (uint32_t l = 0; l < cl.layers; ++l) {
      const float* xl = l == 0 ? rep.x.data() : rep.cross_x[l - 1].data();
      const float* gu = rep.cross_gu[l].data();
      if (const uint32_t R = cl.rank; R > 0) {  // dU_l = (x_l V_l)^T gu_l, dV_l = x_l^T glow_l
        e.Gemm(true, false, R, W0, B, rep.cross_low[l].data(), R, gu, W0, grads + cl.u_offset(l),
               W0);
        e.Gemm(true, false, W0, R, B, xl, W0, rep.cross_glow[l].data(), R, grads + cl.w_offset(l),
               R);
      } else {
        e.Gemm(true, false, W0, W0, B, xl, W0, gu, W0, grads + cl.w_offset(l), W0);
      }
      ColumnSums(e, gu, B, W0, grads + cl.b_offset(l));
    }
  }

  void AllReduceDense() {
    const uint32_t N = gpus_;
    if (N == 1) return;
    const size_t P = NumParams();
    std::vector<float*> ptrs(N);
    for (uint32_t g = 0; g < N; ++g) ptrs[g] = replicas_[g].grads.data();
    if (all_reduce_ != nullptr && all_reduce_(all_reduce_ctx_, ptrs, P)) return;
    // Through GPU 0, in GPU order: the same sum for every replica.
    Exec& e0 = *compute_[0];
    float* sum = replicas_[0].sum.data();
    for (uint32_t g = 1; g < N; ++g) {
      e0.Wait(compute_[g]->Record());
      e0.Copy(sum + g * P, ptrs[g], P);
    }
    float* g0 = ptrs[0];
    const uint32_t n = N;
    e0.ForEach(P, [=] CTRBOX_HD(size_t i) {
      float acc = g0[i];
      for (uint32_t g = 1; g < n; ++g) acc += sum[g * P + i];
      g0[i] = acc;
    });
    const auto done = e0.Record();
    for (uint32_t g = 1; g < N; ++g) {
      compute_[g]->Wait(done);
      compute_[g]->Copy(ptrs[g], g0, P);
    }
  }

  void DenseUpdate(uint32_t g, const DenseStep& step) {
    Replica& r = replicas_[g];
    float *p = r.params.data(), *gr = r.grads.data();
    float* m = r.m.size() > 0 ? r.m.data() : nullptr;
    float* v = r.v.size() > 0 ? r.v.data() : nullptr;
    compute_[g]->ForEach(NumParams(), [=] CTRBOX_HD(size_t i) {
      step.Apply(p + i, gr[i], m == nullptr ? nullptr : m + i, v == nullptr ? nullptr : v + i);
    });
  }

  // An event on every GPU's compute queue, recorded now.
  std::vector<typename Exec::Event> RecordAll() {
    std::vector<typename Exec::Event> events(gpus_);
    for (uint32_t g = 0; g < gpus_; ++g) events[g] = compute_[g]->Record();
    return events;
  }

  // Owner o, step 4 of minibatch b: the GPUs' gradients copied over (the reverse exchange,
  // after each GPU's `reduced` event, recorded past its backward), then summed per touched
  // row into acc in GPU order (or with atomics).
  void SumGradients(Slot& s, size_t b, uint32_t o,
                    const std::vector<typename Exec::Event>& reduced) {
    const HbmPlan& plan = s.plan;
    const uint32_t N = gpus_;
    Exec& e = *compute_[o];
    Part& part = s.parts[o];
    for (uint32_t g = 0; g < N; ++g) {
      if (g != o) e.Wait(reduced[g]);
      const HbmSlice& sl = plan.slice(b, g);
      const uint32_t n = sl.seg[o + 1] - sl.seg[o];
      if (n == 0) continue;
      const size_t to = part.recv_base[b * N + g] - part.recv_base[b * N];
      e.Copy(part.recv_grad.data() + to * GradStride(),
             s.feeds[g].grad.data() + size_t{sl.seg[o]} * GradStride(), size_t{n} * GradStride());
    }
    const uint32_t gs = GradStride();
    const uint32_t t0 = plan.touched_begin[o][b], nt = plan.touched_begin[o][b + 1] - t0;
    if (nt == 0) return;
    const uint32_t* touched = part.touched.data() + t0;
    float* acc = part.acc.data();
    e.ForEach(size_t{nt} * gs,
              [=] CTRBOX_HD(size_t i) { acc[size_t{touched[i / gs]} * gs + i % gs] = 0.0f; });
    const uint32_t base = part.recv_base[b * N];
    const uint32_t* rows = part.recv_rows.data();
    const float* in = part.recv_grad.data();
    if (options_.scatter == ScatterMode::kSegment) {
      for (uint32_t g = 0; g < N; ++g) {  // a GPU's keys are distinct: no two threads meet
        const uint32_t from = part.recv_base[b * N + g], n = part.recv_base[b * N + g + 1] - from;
        e.ForEach(size_t{n} * gs, [=] CTRBOX_HD(size_t i) {
          const size_t k = from + i / gs, j = i % gs;
          acc[size_t{rows[k]} * gs + j] += in[(k - base) * gs + j];
        });
      }
    } else {
      const uint32_t n = part.recv_base[(b + 1) * N] - base;
      const HbmIndex idx = part.index;
      const uint64_t* keys = part.recv_keys.data();
      e.ForEach(
          n, [=] CTRBOX_HD(size_t k) { idx.Accumulate(keys[base + k], in + k * gs, gs, acc, gs); });
    }
  }

  // Owner o, after SumGradients: one update per row minibatch b touched: counters, optimizer,
  // quantization, creation.
  void UpdateRows(Slot& s, size_t b, uint32_t o) {
    Exec& e = *compute_[o];
    Part& part = s.parts[o];
    const uint32_t gs = GradStride();
    const uint32_t t0 = s.plan.touched_begin[o][b], nt = s.plan.touched_begin[o][b + 1] - t0;
    if (nt == 0) return;
    const uint32_t* touched = part.touched.data() + t0;
    const float* acc = part.acc.data();
    const SparseOptimizer opt = model_->sparse_optimizer();
    const CtrAccessor accessor = accessor_;
    const QuantRounding rounding = model_->options().quant.rounding;
    const Quantizer quant(model_->options().quant.bits, model_->options().quant.range);
    const uint64_t quant_seed = model_->quant_seed(), t = model_->dense_optimizer().step();
    const bool wide_on = model_->options().wide;
    const uint32_t rd = RowDim();
    const ValueLayout L = accessor_.layout();
    const uint32_t es = L.emb_state, ws = L.wide_state;
    DeviceRows& R = part.rows;
    float *show = R.show.data(), *click = R.click.data(), *wide = R.wide.data(),
          *wide_state = R.wide_state.data(), *emb = R.emb.data(), *emb_state = R.emb_state.data();
    uint16_t *unseen = R.unseen.data(), *flags = R.flags.data();
    const uint64_t* keys = part.keys.data();
    uint32_t* created = part.created.data();
    e.ForEach(nt, [=] CTRBOX_HD(size_t i) {
      const size_t r = touched[i];
      const float* g = acc + r * gs;
      show[r] += g[rd + 1];
      click[r] += g[rd + 2];
      unseen[r] = 0;
      if (flags[r] & kFlagHasEmb) {
        // The key's table's dimension and state (model.slot_dims; else the row's).
        const uint32_t dim = L.DimOf(keys[r]);
        opt.Update(emb + r * rd, emb_state + r * es, g, dim);
        quant.Round(emb + r * rd, dim, rounding, quant_seed, Mix64(keys[r]) + t);
        opt.RoundState(emb_state + r * es, L.StateOf(keys[r]), quant_seed ^ CtrModel::kStateSalt,
                       Mix64(keys[r]) + t);
      }
      if (wide_on) opt.Update(wide + r, wide_state + r * ws, g + rd, 1);
      if (accessor.MaybeCreateEmbedding(keys[r], show[r], click[r], flags + r, emb + r * rd,
                                        emb_state + r * es)) {
        AtomicAddU32(created, 1);
      }
    });
  }

  CtrModel* const model_;
  const CtrAccessor accessor_;
  const GpuOptions options_;
  const uint32_t gpus_;
  std::vector<Exec*> compute_, copy_;
  AllReduceFn all_reduce_;
  void* all_reduce_ctx_;
  std::vector<Layer> layers_;
  std::vector<Layer> bottom_layers_;  // offsets into the whole dense parameter vector
  std::vector<Slot> slots_;
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
};

// A GpuTrainer running a GpuStep on Exec; the backend constructs step_ over its executors.
template <class Exec>
class GpuStepTrainer : public GpuTrainer {
 public:
  Status Stage(uint64_t pass_index, const Batch& pass, const WorkingSet& ws,
               const RowBlock& rows) override {
    return step_->Stage(pass_index, pass, ws, rows);
  }
  Status Train(uint64_t pass_index, const Batch& pass, const WorkingSet& ws,
               const std::vector<uint32_t>& patched, RowBlock* rows, float* predictions,
               uint64_t* created, RankExchange* ranks) override {
    return step_->Train(pass_index, pass, ws, patched, rows, predictions, created, ranks);
  }
  uint64_t StagedBytes() const override { return step_->StagedBytes(); }

 protected:
  std::unique_ptr<GpuStep<Exec>> step_;
};

}  // namespace ctrbox

#endif  // CTRBOX_MODEL_GPU_STEP_H_
