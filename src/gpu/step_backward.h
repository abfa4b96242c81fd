// GpuStep (gpu/step.h), the backward pass of one slice: from the loss gradient at the logit
// back through the MLP or the towers, the interactions and the bottom MLP to the pooled
// embeddings' gradient (rep.dx), and every dense weight gradient of the slice (summed over the
// GPUs by the dense step). Included by gpu/step_impl.h only.
#ifndef CTRBOX_GPU_STEP_BACKWARD_H_
#define CTRBOX_GPU_STEP_BACKWARD_H_

#include "gpu/step.h"
#include "model/interactions.h"

namespace ctrbox {

template <class Exec>
void GpuStep<Exec>::Backward(const SliceRun& run) {
  Exec& e = *compute_[run.g];
  Replica& rep = replicas_[run.g];
  if (run.B == 0) {  // a slice without rows contributes zero gradients
    e.Fill(run.grads != nullptr ? run.grads : rep.grads.data(), 0.0f, NumParams());
    return;
  }
  const ModelOptions& mo = model_->options();
  const bool interactions = mo.HasInteractions();
  // Back to the inputs: the embedding columns (into dx), or with interactions the MLP's input
  // from column dmi_begin on (into dmi).
  const uint32_t from = interactions ? model_->dmi_begin() : model_->schema().num_dense;
  MlpBackward(run, interactions ? rep.dmi.data() : rep.dx.data(), from);
  if (interactions) InteractionsBackward(rep, run.B, model_->schema().num_slots, mo.embedding_dim);
  if (model_->bottom().num_layers() > 0) BottomBackward(rep, run.B);
  WeightGrads(run);
}

// From dlogit back through the output unit and the MLP's (or the towers') layers: each hidden
// layer's pre-activation gradient (rep.hgrads), and the input's gradient from column `from`
// into din.
template <class Exec>
void GpuStep<Exec>::MlpBackward(const SliceRun& run, float* din, uint32_t from) {
  Exec& e = *compute_[run.g];
  Replica& rep = replicas_[run.g];
  const uint32_t B = run.B;
  const float* params = rep.params.data();
  const float* dlogit = rep.dlogit.data();
  const uint32_t emb_width = model_->mlp_input_width() - from;
  const Towers& tw = model_->towers();
  const uint32_t L = static_cast<uint32_t>(layers_.size());
  if (tw.on()) {
    TowersBackward(e, tw, params, run.towers, B, dlogit, din, from);
    return;
  }
  const Layer last = layers_[L - 1];
  if (L == 1) {
    const float* w = params + last.w;
    e.ForEach(size_t{B} * emb_width, [=] CTRBOX_HD(size_t i) {
      din[i] = dlogit[i / emb_width] * w[from + i % emb_width];
    });
    return;
  }
  {
    const uint32_t n = last.in;
    const float* w = params + last.w;
    const float* a = rep.acts[L - 2].data();
    float* gr = rep.hgrads[L - 2].data();
    e.ForEach(size_t{B} * n,
              [=] CTRBOX_HD(size_t i) { gr[i] = a[i] > 0.0f ? dlogit[i / n] * w[i % n] : 0.0f; });
  }
  for (uint32_t l = L - 2; l >= 1; --l) {
    ReluBackprop(e, layers_[l], params, rep.hgrads[l].data(), rep.acts[l - 1].data(), B,
                 rep.hgrads[l - 1].data());
  }
  const Layer first = layers_[0];
  e.Gemm(false, true, B, emb_width, first.out, rep.hgrads[0].data(), first.out,
         params + first.w + size_t{from} * first.out, first.out, din, emb_width);
}

// From the MLP's input gradient (rep.dmi) back through the cross layers, the dot products
// and the FM term to the pooled embeddings' gradient (rep.dx).
template <class Exec>
void GpuStep<Exec>::InteractionsBackward(Replica& rep, uint32_t B, uint32_t S, uint32_t dim) {
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

// Back through the bottom MLP from the gradient at z (rep.bottom_gz): each layer's
// pre-activation gradient (the CPU model's Mlp::BackwardFromTop).
template <class Exec>
void GpuStep<Exec>::BottomBackward(Replica& rep, uint32_t B) {
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

// Every dense weight gradient of the slice into run.grads, or rep.grads (laid out like the
// parameters).
template <class Exec>
void GpuStep<Exec>::WeightGrads(const SliceRun& run) {
  Exec& e = *compute_[run.g];
  Replica& rep = replicas_[run.g];
  const uint32_t B = run.B;
  float* grads = run.grads != nullptr ? run.grads : rep.grads.data();
  const uint32_t L = static_cast<uint32_t>(layers_.size());
  for (uint32_t l = 0; l < L; ++l) {
    LayerWeightGrads(e, layers_[l], l == 0 ? run.mlp_input : rep.acts[l - 1].data(),
                     l == L - 1 ? rep.dlogit.data() : rep.hgrads[l].data(), B, grads);
  }
  if (model_->towers().on()) TowerWeightGrads(rep, run.towers, B, grads);
  CrossWeightGrads(rep, B, grads);
  if (const MixLayout& mx = model_->mix(); mx.layers > 0) {
    const MixRows mr = MixPointers(rep, B);
    for (uint32_t l = 0; l < mx.layers; ++l) {
      for (uint32_t k = 0; k < mx.experts; ++k) MixExpertGrads(e, mx, mr, B, l, k, grads);
      MixLayerGrads(e, mx, mr, B, l, grads);
    }
  }
  if (model_->bottom().num_layers() > 0) BottomWeightGrads(rep, B, grads);
}

// The towers' weight gradients over the slice: each layer's as an MLP layer's, the output
// unit's dw_t = hL_t^T dlogit and db the column sum of dlogit (the CPU model's kTowerOut).
template <class Exec>
void GpuStep<Exec>::TowerWeightGrads(Replica& rep, const TowerRows& p, uint32_t B, float* grads) {
  Exec& e = *compute_[&rep - replicas_.data()];
  const Towers& tw = model_->towers();
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
  e.ColumnSums(rep.dlogit.data(), B, 1, grads + tw.out_b());
}

// The cross layers' weight gradients over the slice: dW_l = x_l^T gu_l (or low rank dU_l,
// dV_l), db_l the column sums of gu_l.
template <class Exec>
void GpuStep<Exec>::CrossWeightGrads(Replica& rep, uint32_t B, float* grads) {
  Exec& e = *compute_[&rep - replicas_.data()];
  const CrossLayout cl = model_->cross();
  const uint32_t W0 = cl.width;
  for (uint32_t l = 0; l < cl.layers; ++l) {
    const float* xl = l == 0 ? rep.x.data() : rep.cross_x[l - 1].data();
    const float* gu = rep.cross_gu[l].data();
    if (const uint32_t R = cl.rank; R > 0) {  // dU_l = (x_l V_l)^T gu_l, dV_l = x_l^T glow_l
      e.Gemm(true, false, R, W0, B, rep.cross_low[l].data(), R, gu, W0, grads + cl.u_offset(l), W0);
      e.Gemm(true, false, W0, R, B, xl, W0, rep.cross_glow[l].data(), R, grads + cl.w_offset(l), R);
    } else {
      e.Gemm(true, false, W0, W0, B, xl, W0, gu, W0, grads + cl.w_offset(l), W0);
    }
    e.ColumnSums(gu, B, W0, grads + cl.b_offset(l));
  }
}

// The bottom MLP's weight gradients over the slice.
template <class Exec>
void GpuStep<Exec>::BottomWeightGrads(Replica& rep, uint32_t B, float* grads) {
  Exec& e = *compute_[&rep - replicas_.data()];
  for (size_t l = 0; l < bottom_layers_.size(); ++l) {
    LayerWeightGrads(e, bottom_layers_[l],
                     l == 0 ? rep.bottom_in.data() : rep.bottom_acts[l - 1].data(),
                     rep.bottom_grads[l].data(), B, grads);
  }
}

// The layer below's pre-activation gradient: (g W^T) masked where its activation a_prev is 0.
template <class Exec>
void GpuStep<Exec>::ReluBackprop(Exec& e, const Layer& ly, const float* params, const float* g,
                                 const float* a_prev, uint32_t B, float* g_prev) {
  e.Gemm(false, true, B, ly.in, ly.out, g, ly.out, params + ly.w, ly.out, g_prev, ly.in);
  e.ForEach(size_t{B} * ly.in, [=] CTRBOX_HD(size_t i) {
    if (a_prev[i] <= 0.0f) g_prev[i] = 0.0f;
  });
}

// dW = xin^T gout, and db (gout's column sums), into grads (laid out like the parameters).
template <class Exec>
void GpuStep<Exec>::LayerWeightGrads(Exec& e, const Layer& ly, const float* xin, const float* gout,
                                     uint32_t B, float* grads) {
  e.Gemm(true, false, ly.in, ly.out, B, xin, ly.in, gout, ly.out, grads + ly.w, ly.out);
  e.ColumnSums(gout, B, ly.out, grads + ly.b);
}

}  // namespace ctrbox

#endif  // CTRBOX_GPU_STEP_BACKWARD_H_
