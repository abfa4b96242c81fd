// CtrModel (model/ctr_model.h): the bottom MLP, the towers' and mixture layers' buffers, the
// cross layers and dot products, forward and backward on a row block.
#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "exec/exec.h"
#include "model/ctr_model.h"
#include "model/ctr_model_internal.h"
#include "util/blas.h"
#include "util/hash.h"
#include "util/random.h"

namespace ctrbox {

using model_internal::LogLoss;
using model_internal::Sigmoid;

void CtrModel::BottomForward(uint32_t r0, uint32_t r1) {
  const uint32_t L = bottom_.num_layers(), D = schema_.num_dense, z = dense_width_;
  std::vector<float*> acts(L);
  for (uint32_t l = 0; l < L; ++l) acts[l] = bottom_acts_[l].data() + size_t{r0} * bottom_.out(l);
  bottom_.Forward(params_.data() + bottom_base_, bottom_in_.data() + size_t{r0} * D,
                  static_cast<int>(r1 - r0), acts.data(), nullptr);
  for (uint32_t r = 0; r < r1 - r0; ++r) {
    std::memcpy(x_.data() + (size_t{r0} + r) * input_width_, acts[L - 1] + size_t{r} * z,
                z * sizeof(float));
  }
}

void CtrModel::BottomBackward(uint32_t r0, uint32_t r1) {
  const uint32_t L = bottom_.num_layers();
  std::vector<const float*> acts(L);
  std::vector<float*> grads(L);
  for (uint32_t l = 0; l < L; ++l) {
    acts[l] = bottom_acts_[l].data() + size_t{r0} * bottom_.out(l);
    grads[l] = bottom_grads_[l].data() + size_t{r0} * bottom_.out(l);
  }
  bottom_.BackwardFromTop(params_.data() + bottom_base_, acts.data(),
                          bottom_gz_.data() + size_t{r0} * dense_width_, static_cast<int>(r1 - r0),
                          grads.data());
}

TowerRows CtrModel::TowerBlock(uint32_t r0) {
  TowerRows p;
  p.base = MlpInput() + size_t{r0} * mlp_.in(0);
  for (uint32_t t = 0; t < towers_.count(); ++t) {
    const Mlp& m = towers_.tower(t);
    p.tin.push_back(tw_tin_[t].data() + size_t{r0} * m.in(0));
    p.dtin.push_back(tw_dtin_[t].data() + size_t{r0} * m.in(0));
    p.inj_first.push_back(tw_injf_[t].data() + size_t{r0} * towers_.first(t));
    p.inj_last.push_back(tw_injl_[t].data() + size_t{r0} * towers_.last(t));
    p.acts.emplace_back();
    p.grads.emplace_back();
    for (uint32_t l = 0; l < m.num_layers(); ++l) {
      p.acts.back().push_back(tw_acts_[t][l].data() + size_t{r0} * m.out(l));
      p.grads.back().push_back(tw_grads_[t][l].data() + size_t{r0} * m.out(l));
    }
    p.cols.push_back(towers_.cols(t).data());
    p.inv.push_back(towers_.inv(t).data());
  }
  return p;
}

MixRows CtrModel::MixBlock(uint32_t r0) {
  const uint32_t W = mix_.width, R = mix_.rank, K = mix_.experts;
  MixRows p;
  p.x0 = x_.data() + size_t{r0} * W;
  auto at = [](std::vector<std::vector<float>>& v, size_t off) {
    std::vector<float*> out;
    for (auto& b : v) out.push_back(b.data() + off);
    return out;
  };
  const size_t ow = size_t{r0} * W, orr = size_t{r0} * R, ok = size_t{r0} * K;
  p.x = at(mix_x_, ow);
  p.a = at(mix_a_, orr);
  p.c = at(mix_c_, orr);
  p.u = at(mix_u_, ow);
  p.gate = at(mix_gate_, ok);
  p.du = at(mix_du_, ow);
  p.dc = at(mix_dc_, orr);
  p.da = at(mix_da_, orr);
  p.dgate = at(mix_dgate_, ok);
  p.dub = at(mix_dub_, ow);
  p.g = mix_g_.data() + ow;
  p.acc = mix_acc_.data() + ow;
  p.tmp = mix_tmp_.data() + ow;
  p.kstride_r = size_t{capacity_} * R;
  p.kstride_w = size_t{capacity_} * W;
  return p;
}

const float* CtrModel::CrossOutput() const {
  if (mix_.layers > 0) return mix_x_[mix_.layers - 1].data();
  return CrossInput(cross_.layers);
}

const float* CtrModel::CrossInput(uint32_t l) const {
  return l == 0 ? x_.data() : cross_x_[l - 1].data();
}

const float* CtrModel::MlpInput() const {
  if (options_.dot) return mlp_in_.data();
  return CrossOutput();
}

void CtrModel::InteractionsForward(uint32_t r0, uint32_t r1) {
  const uint32_t W0 = input_width_, S = schema_.num_slots;
  const uint32_t dim = options_.embedding_dim, rows = r1 - r0;
  // The dot vectors start at column vec0: z (with a bottom MLP), then the slots' embeddings.
  const uint32_t shift = bottom_.num_layers() > 0 ? 1 : 0, nvec = S + shift;
  const uint32_t vec0 = dense_width_ - shift * dim;
  const size_t off = size_t{r0} * W0, cells = size_t{rows} * W0;
  const float* x0 = x_.data() + off;
  for (uint32_t l = 0; l < cross_.layers; ++l) {
    const float* xl = CrossInput(l) + off;
    float* u = cross_u_[l].data() + off;
    float* xn = cross_x_[l].data() + off;
    if (const uint32_t R = cross_.rank; R > 0) {  // u = (x_l V_l) U_l
      float* low = cross_low_[l].data() + size_t{r0} * R;
      blas::Sgemm(false, false, static_cast<int>(rows), R, W0, 1.0f, xl, W0,
                  params_.data() + cross_.w_offset(l), R, 0.0f, low, R);
      blas::Sgemm(false, false, static_cast<int>(rows), W0, R, 1.0f, low, R,
                  params_.data() + cross_.u_offset(l), W0, 0.0f, u, W0);
    } else {
      blas::Sgemm(false, false, static_cast<int>(rows), W0, W0, 1.0f, xl, W0,
                  params_.data() + cross_.w_offset(l), W0, 0.0f, u, W0);
    }
    const float* b = params_.data() + cross_.b_offset(l);
    for (size_t i = 0; i < cells; ++i) xn[i] = CrossForward(x0[i], xl[i], &u[i], b[i % W0]);
  }
  if (mix_.layers > 0) {
    HostExec e;  // this thread, as every row block's work
    MixForward(e, mix_, params_.data(), MixBlock(r0), rows);
  }
  if (!options_.dot) return;
  const uint32_t in = mlp_.in(0);
  const float* xL = CrossOutput() + off;
  for (uint32_t r = 0; r < rows; ++r) {
    float* m = mlp_in_.data() + (size_t{r0} + r) * in;
    std::memcpy(m, xL + size_t{r} * W0, W0 * sizeof(float));
    const float* vecs = x0 + size_t{r} * W0 + vec0;
    uint32_t p = W0;
    for (uint32_t i = 0; i < nvec; ++i) {
      for (uint32_t j = i + 1; j < nvec; ++j) m[p++] = DotValue(vecs, dim, i, j);
    }
  }
}

void CtrModel::InteractionsBackward(uint32_t r0, uint32_t r1) {
  const uint32_t W0 = input_width_, S = schema_.num_slots;
  const uint32_t dim = options_.embedding_dim, E = emb_width_, rows = r1 - r0;
  const uint32_t shift = bottom_.num_layers() > 0 ? 1 : 0, nvec = S + shift;
  const uint32_t vec0 = dense_width_ - shift * dim;
  const uint32_t mw = mlp_.in(0) - dmi_begin_;  // a row of dmi_
  const size_t off = size_t{r0} * W0, cells = size_t{rows} * W0;
  const float* x0 = x_.data() + off;
  const float* dmi = dmi_.data() + size_t{r0} * mw;
  // The gradient at x0 from the MLP's side: through the cross layers (x0 enters each layer's
  // product and the chain's start), or as the MLP sent it (columns from dmi_begin_ on); base
  // points at the dot vectors' first column.
  const float* base = dmi + (vec0 - dmi_begin_);
  size_t base_stride = mw;
  if (cross_.layers > 0) {
    float *g = cross_g_.data() + off, *t = cross_t_.data() + off, *acc = cross_acc_.data() + off;
    for (uint32_t r = 0; r < rows; ++r) {
      std::memcpy(g + size_t{r} * W0, dmi + size_t{r} * mw, W0 * sizeof(float));
    }
    std::fill(acc, acc + cells, 0.0f);
    for (uint32_t l = cross_.layers; l-- > 0;) {
      const float* u = cross_u_[l].data() + off;
      float* gu = cross_gu_[l].data() + off;
      for (size_t i = 0; i < cells; ++i) {
        gu[i] = g[i] * x0[i];
        acc[i] += g[i] * u[i];
      }
      if (const uint32_t R = cross_.rank; R > 0) {  // t = (gu U_l^T) V_l^T
        float* glow = cross_glow_[l].data() + size_t{r0} * R;
        blas::Sgemm(false, true, static_cast<int>(rows), R, W0, 1.0f, gu, W0,
                    params_.data() + cross_.u_offset(l), W0, 0.0f, glow, R);
        blas::Sgemm(false, true, static_cast<int>(rows), W0, R, 1.0f, glow, R,
                    params_.data() + cross_.w_offset(l), R, 0.0f, t, W0);
      } else {
        blas::Sgemm(false, true, static_cast<int>(rows), W0, W0, 1.0f, gu, W0,
                    params_.data() + cross_.w_offset(l), W0, 0.0f, t, W0);
      }
      for (size_t i = 0; i < cells; ++i) g[i] += t[i];
    }
    for (size_t i = 0; i < cells; ++i) g[i] += acc[i];
    base = g + vec0;
    base_stride = W0;
  }
  if (mix_.layers > 0) {
    HostExec e;
    float* g = cross_g_.data() + off;
    MixBackward(e, mix_, params_.data(), MixBlock(r0), rows, dmi, mw, g);
    base = g + vec0;
    base_stride = W0;
  }
  if (!options_.fm && !options_.dot) {
    // The gradient as it reached the input: z's (with a bottom MLP), then the embeddings'
    // columns of every slot, of whatever dimension (model.slot_dims).
    for (uint32_t r = 0; r < rows; ++r) {
      const float* b = base + r * base_stride;
      if (shift > 0)
        std::memcpy(bottom_gz_.data() + (size_t{r0} + r) * dim, b, dim * sizeof(float));
      std::memcpy(dx_.data() + (size_t{r0} + r) * E, b + shift * dim, E * sizeof(float));
    }
    return;
  }
  // Per element this is EmbInputGrad (the GPU step's form), reorganised so that the inner
  // loops run over the embedding dimension: every element still adds the same terms in the
  // same order (the dot products' share from 0 over the other slots in slot order, then the
  // FM term from the slot sum in slot order), so the results are the same bits.
  std::vector<float> sums(dim), share(dim);
  for (uint32_t r = 0; r < rows; ++r) {
    const float* vecs = x0 + size_t{r} * W0 + vec0;
    const float* emb = vecs + size_t{shift} * dim;  // the slots'
    const float* ddot = options_.dot ? dmi + size_t{r} * mw + (W0 - dmi_begin_) : nullptr;
    const float dlogit = dlogit_[r0 + r];
    float* dx = dx_.data() + (size_t{r0} + r) * E;
    const float* b = base + r * base_stride;
    if (options_.fm) {
      std::fill(sums.begin(), sums.end(), 0.0f);
      for (uint32_t t = 0; t < S; ++t) {
        for (uint32_t k = 0; k < dim; ++k) sums[k] += emb[size_t{t} * dim + k];
      }
    }
    for (uint32_t v = 0; v < nvec; ++v) {
      if (ddot != nullptr) {
        std::fill(share.begin(), share.end(), 0.0f);
        for (uint32_t t = 0; t < nvec; ++t) {
          if (t == v) continue;
          const float w = ddot[v < t ? DotPairIndex(v, t, nvec) : DotPairIndex(t, v, nvec)];
          const float* et = vecs + size_t{t} * dim;
          for (uint32_t k = 0; k < dim; ++k) share[k] += w * et[k];
        }
      }
      // Vector 0 with a bottom MLP is z: its gradient goes to the bottom MLP.
      float* out = v < shift ? bottom_gz_.data() + (size_t{r0} + r) * dim : dx + (v - shift) * dim;
      for (uint32_t k = 0; k < dim; ++k) {
        float g = b[v * dim + k];
        if (ddot != nullptr) g += share[k];
        if (options_.fm && v >= shift) g += dlogit * (sums[k] - vecs[size_t{v} * dim + k]);
        out[k] = g;
      }
    }
  }
}

}  // namespace ctrbox
