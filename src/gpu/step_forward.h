// GpuStep (gpu/step.h), the forward pass of one slice: inputs (dense features, pooled
// embeddings, the wide sums), the bottom MLP, the interactions, the MLP or the towers, the
// output unit and the loss gradient. Every per-element step is the CPU model's arithmetic in
// the CPU model's order. Included by gpu/step_impl.h only.
#ifndef CTRBOX_GPU_STEP_FORWARD_H_
#define CTRBOX_GPU_STEP_FORWARD_H_

#include <algorithm>
#include <cmath>

#include "gpu/step.h"
#include "model/interactions.h"

namespace ctrbox {

template <class Exec>
typename GpuStep<Exec>::SliceRun GpuStep<Exec>::Forward(Staged& s, const Batch& pass, size_t b,
                                                        uint32_t g, uint32_t rows) {
  SliceRun run;
  run.b = b;
  run.g = g;
  run.si = b * gpus_ + g;
  run.B = std::min(rows, s.plan.slices[run.si].rows());
  if (run.B == 0) return run;  // a slice without rows: zero gradients (Backward)
  Exec& e = *compute_[g];
  Replica& rep = replicas_[g];
  Inputs(s, pass, run);
  const uint32_t S = pass.schema.num_slots, dim = model_->options().embedding_dim;
  const float* params = rep.params.data();
  run.mlp_input =
      model_->options().HasInteractions() ? InteractionsForward(rep, run.B, S, dim) : rep.x.data();
  // The MLP's hidden layers (or the towers into logits, with their own output unit).
  const float* input = run.mlp_input;
  const Towers& tw = model_->towers();
  const uint32_t L = static_cast<uint32_t>(layers_.size());
  if (tw.on()) {
    run.towers = TowerPointers(rep, run.mlp_input);
    TowersForward(e, tw, params, run.towers, run.B, rep.logits.data());
  }
  for (uint32_t l = 0; l + 1 < L; ++l) {
    ReluLayer(e, layers_[l], params, input, run.B, rep.acts[l].data());
    input = rep.acts[l].data();
  }
  OutputAndLoss(s, run, input, tw.on() ? Layer{} : layers_[L - 1]);
  return run;
}

// The slice's input rows x: dense features (log1p'd), then each slot's pooled embeddings (the
// sum over its keys, in the CPU model's order); with a bottom MLP, the dense features go into
// its input and its output z into x's first columns. Then each row's wide sum.
template <class Exec>
void GpuStep<Exec>::Inputs(Staged& s, const Batch& pass, const SliceRun& run) {
  Exec& e = *compute_[run.g];
  Replica& rep = replicas_[run.g];
  Feed& f = s.feeds[run.g];
  const ModelOptions& mo = model_->options();
  const uint32_t B = run.B;
  const GpuMinibatchArgs* now = rep.now.data();  // row0: the slice's first row in the pass
  const uint32_t D = pass.schema.num_dense, S = pass.schema.num_slots, dim = mo.embedding_dim;
  // A fetched row: its embedding (rd floats), wide weight, has-embedding flag. With
  // model.slot_dims a slot's columns are found through col_slot / slot_col.
  const uint32_t fs = FetchStride(), rd = RowDim();
  const uint32_t *col_slot = rep.col_slot.data(), *slot_col = rep.slot_col.data();
  const bool multi = mo.MultiTable();
  const uint32_t W0 = model_->input_width();
  const bool weighted = pass.has_weights(), log1p = mo.dense_log1p, wide_on = mo.wide;
  const float *dense = f.dense.data(), *weights = f.weights.data(), *fetch = f.fetch.data();
  const uint32_t *offsets = f.offsets.data(), *fetch_pos = f.fetch_pos.data();
  float *x = rep.x.data(), *wide_sum = rep.wide_sum.data();
  // With a bottom MLP z fills the first Dx = dim columns; otherwise Dx = D.
  const uint32_t Dx = model_->dense_width();
  const bool bottom_on = model_->bottom().num_layers() > 0;
  float* bottom_in = bottom_on ? rep.bottom_in.data() : nullptr;
  if (bottom_on) {
    e.ForEach(size_t{B} * D, [=] CTRBOX_HD(size_t i) {
      const float v = dense[(now->row0 + i / D) * D + i % D];
      bottom_in[i] = log1p ? std::log1p(v > 0.0f ? v : 0.0f) : v;
    });
  }
  e.ForEach(size_t{B} * W0, [=] CTRBOX_HD(size_t i) {
    const size_t r = i / W0, c = i % W0, R = now->row0 + r;
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
    const size_t R = now->row0 + r;
    float wide = 0.0f;
    for (uint32_t p = offsets[R * S]; p < offsets[R * S + S]; ++p) {
      const float w = weighted ? weights[p] : 1.0f;
      wide += w * fetch[size_t{fetch_pos[p]} * fs + rd];
    }
    wide_sum[r] = wide_on ? wide : 0.0f;
  });
}

// The output unit: a dot product per row in the CPU model's order (the towers': their
// logit), plus the wide sum and the FM term; the prediction, and the loss gradient at the
// logit (the mean over the global minibatch's rows).
template <class Exec>
void GpuStep<Exec>::OutputAndLoss(Staged& s, const SliceRun& run, const float* input,
                                  const Layer& last) {
  Exec& e = *compute_[run.g];
  Replica& rep = replicas_[run.g];
  Feed& f = s.feeds[run.g];
  const ModelOptions& mo = model_->options();
  const uint32_t S = model_->schema().num_slots, dim = mo.embedding_dim;
  const uint32_t W0 = model_->input_width(), Dx = model_->dense_width();
  const GpuMinibatchArgs* now = rep.now.data();
  const float* params = rep.params.data();
  const float *x = rep.x.data(), *wide_sum = rep.wide_sum.data(), *labels = f.labels.data();
  float *logits = rep.logits.data(), *dlogit = rep.dlogit.data(), *pred = f.predictions.data();
  const float* w_last = params + last.w;
  const float* bias_last = params + last.b;
  const uint32_t k_last = last.in;
  const bool fm = mo.fm, towers_on = model_->towers().on();
  e.ForEach(run.B, [=] CTRBOX_HD(size_t r) {
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
    pred[now->row0 + r] = p;
    dlogit[r] = (p - labels[now->row0 + r]) / now->rows_f;
  });
}

// The cross layers and the dot products (model/interactions.h) over the slice's B rows of
// rep.x; returns the MLP's input.
template <class Exec>
const float* GpuStep<Exec>::InteractionsForward(Replica& rep, uint32_t B, uint32_t S,
                                                uint32_t dim) {
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

// The bottom MLP over the slice (model.bottom_mlp): ReLU layers from rep.bottom_in, the last
// activation copied into rep.x's first columns (z).
template <class Exec>
void GpuStep<Exec>::BottomForward(Replica& rep, uint32_t B) {
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

// The mixture's buffers of a replica (model/cross_mix.h) for a slice of B rows.
template <class Exec>
MixRows GpuStep<Exec>::MixPointers(Replica& rep, uint32_t B) {
  MixRows p;
  p.x0 = rep.x.data();
  for (GpuMixBuffers<Exec>& mb : rep.mix) {
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
template <class Exec>
TowerRows GpuStep<Exec>::TowerPointers(Replica& rep, const float* base) {
  TowerRows p;
  p.base = base;
  for (GpuTowerBuffers<Exec>& tb : rep.tw) {
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

// y = ReLU(input W + b) for B rows.
template <class Exec>
void GpuStep<Exec>::ReluLayer(Exec& e, const Layer& ly, const float* params, const float* input,
                              uint32_t B, float* y) {
  e.Gemm(false, false, B, ly.out, ly.in, input, ly.in, params + ly.w, ly.out, y, ly.out);
  const float* bias = params + ly.b;
  const uint32_t n = ly.out;
  e.ForEach(size_t{B} * n, [=] CTRBOX_HD(size_t i) {
    const float v = y[i] + bias[i % n];
    y[i] = v > 0.0f ? v : 0.0f;
  });
}

}  // namespace ctrbox

#endif  // CTRBOX_GPU_STEP_FORWARD_H_
