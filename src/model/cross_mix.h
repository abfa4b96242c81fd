// CrossMix: DCN-v2's mixture of low-rank experts ("DCN-Mix", Wang et al. 2021 §3.2; TorchRec's
// LowRankMixtureCrossNet), model.cross_experts > 0 with model.cross_layers and model.cross_rank.
//
// Layer l maps x_l to x_{l+1} (width W0, x_0 the model's input) with K experts of rank r:
//
//   E_k(x_l) = x0 * ( relu( relu(x_l V_k) C_k ) U_k + b )     V_k [W0 x r], C_k [r x r], U_k [r x
//   W0] G(x_l)   = softmax over k of (x_l Wg)                     Wg [W0 x K] (no bias) x_{l+1}  =
//   sum_k G_k(x_l) E_k(x_l) + x_l                  b [W0] shared by the experts
//
// Parameters of layer l, from base + l * layer_params(): for each expert k V_k, C_k, U_k (row
// major [in x out], as the Mlp's), then Wg, then b. Weights start Glorot-uniform, b at zero.
//
// Written once against an executor (exec/exec.h's contract), as model/towers.h: the CPU
// model runs the forward and backward per row block on a HostExec and the weight gradients per
// (layer, expert) over the minibatch; the GPU step runs all of them on its GPUs. Same steps,
// same order: the emulated GPU is bit-identical to the CPU model.
// Thread safety: the layout is a value; the functions write only the buffers they are given.
#ifndef CTRBOX_MODEL_CROSS_MIX_H_
#define CTRBOX_MODEL_CROSS_MIX_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "util/hd.h"

namespace ctrbox {

struct MixLayout {
  uint32_t width = 0;    // W0
  uint32_t layers = 0;   // L (0: none)
  uint32_t experts = 0;  // K
  uint32_t rank = 0;     // r
  size_t base = 0;       // layer 0's first parameter

  size_t expert_params() const { return 2 * size_t{width} * rank + size_t{rank} * rank; }
  size_t layer_params() const {
    return experts * expert_params() + size_t{width} * experts + width;
  }
  size_t num_params() const { return layers * layer_params(); }
  size_t v_offset(uint32_t l, uint32_t k) const {
    return base + l * layer_params() + k * expert_params();
  }
  size_t c_offset(uint32_t l, uint32_t k) const { return v_offset(l, k) + size_t{width} * rank; }
  size_t u_offset(uint32_t l, uint32_t k) const { return c_offset(l, k) + size_t{rank} * rank; }
  size_t g_offset(uint32_t l) const {
    return base + l * layer_params() + experts * expert_params();
  }
  size_t b_offset(uint32_t l) const { return g_offset(l) + size_t{width} * experts; }
  // Multiply-adds of forward + backward per example, x 2 (for throughput reports).
  double FlopsPerExample() const {
    return 2.0 * 3.0 * layers * (experts * static_cast<double>(expert_params()) + width * experts);
  }
};

// One call's buffers. Per layer l: pointers at the call's first row; a per-expert buffer holds
// expert k's rows at + k * kstride_* (so a row block of a larger buffer works too).
struct MixRows {
  const float* x0 = nullptr;   // [B x W0]
  std::vector<float*> x;       // x_{l+1} [B x W0]
  std::vector<float*> a, c;    // relu(x_l V_k), relu(a C_k): [K][B x r]
  std::vector<float*> u;       // a_k... U_k + b: [K][B x W0]
  std::vector<float*> gate;    // G: [B x K] (after the softmax)
  std::vector<float*> du;      // the gradient at u_k: [K][B x W0]
  std::vector<float*> dc, da;  // at c_k and a_k (pre-ReLU): [K][B x r]
  std::vector<float*> dgate;   // at the gate logits: [B x K]
  std::vector<float*> dub;     // at b, per row: sum over k of du_k [B x W0]
  float* g = nullptr;          // running gradient at x_l [B x W0]
  float* acc = nullptr;        // x0's share [B x W0]
  float* tmp = nullptr;        // [B x W0]
  size_t kstride_r = 0, kstride_w = 0;
};

// x_{l+1} for every layer.
template <class Exec>
void MixForward(Exec& e, const MixLayout& m, const float* params, const MixRows& p, uint32_t B) {
  const uint32_t W = m.width, K = m.experts, R = m.rank;
  const int b = static_cast<int>(B), w = static_cast<int>(W), r = static_cast<int>(R);
  const float* x0 = p.x0;
  for (uint32_t l = 0; l < m.layers; ++l) {
    const float* xl = l == 0 ? p.x0 : p.x[l - 1];
    for (uint32_t k = 0; k < K; ++k) {
      float* a = p.a[l] + k * p.kstride_r;
      float* c = p.c[l] + k * p.kstride_r;
      float* u = p.u[l] + k * p.kstride_w;
      e.Gemm(false, false, b, r, w, xl, w, params + m.v_offset(l, k), r, a, r);
      e.ForEach(size_t{B} * R, [=] CTRBOX_HD(size_t i) { a[i] = a[i] > 0.0f ? a[i] : 0.0f; });
      e.Gemm(false, false, b, r, r, a, r, params + m.c_offset(l, k), r, c, r);
      e.ForEach(size_t{B} * R, [=] CTRBOX_HD(size_t i) { c[i] = c[i] > 0.0f ? c[i] : 0.0f; });
      e.Gemm(false, false, b, w, r, c, r, params + m.u_offset(l, k), w, u, w);
      const float* bias = params + m.b_offset(l);
      e.ForEach(size_t{B} * W, [=] CTRBOX_HD(size_t i) { u[i] = u[i] + bias[i % W]; });
    }
    float* gate = p.gate[l];
    e.Gemm(false, false, b, static_cast<int>(K), w, xl, w, params + m.g_offset(l),
           static_cast<int>(K), gate, static_cast<int>(K));
    e.ForEach(B, [=] CTRBOX_HD(size_t row) {  // softmax over the experts
      float* z = gate + row * K;
      float top = z[0];
      for (uint32_t k = 1; k < K; ++k) top = z[k] > top ? z[k] : top;
      float sum = 0.0f;
      for (uint32_t k = 0; k < K; ++k) {
        z[k] = std::exp(z[k] - top);
        sum += z[k];
      }
      for (uint32_t k = 0; k < K; ++k) z[k] = z[k] / sum;
    });
    const float* u0 = p.u[l];
    float* xn = p.x[l];
    const size_t ks = p.kstride_w;
    e.ForEach(size_t{B} * W, [=] CTRBOX_HD(size_t i) {
      const size_t row = i / W;
      float s = 0.0f;
      for (uint32_t k = 0; k < K; ++k) s += gate[row * K + k] * (x0[i] * u0[k * ks + i]);
      xn[i] = s + xl[i];
    });
  }
}

// From the gradient at x_L (g_top, row stride ld) to x0's: dx0 [B x W0] = the gradient through
// the chain of x_l plus every layer's x0 share (acc); leaves every layer's du, dc, da, dgate
// and dub for the weight gradients.
template <class Exec>
void MixBackward(Exec& e, const MixLayout& m, const float* params, const MixRows& p, uint32_t B,
                 const float* g_top, uint32_t ld, float* dx0) {
  const uint32_t W = m.width, K = m.experts, R = m.rank;
  const int b = static_cast<int>(B), w = static_cast<int>(W), r = static_cast<int>(R);
  const float* x0 = p.x0;
  float *g = p.g, *acc = p.acc, *tmp = p.tmp;
  e.ForEach(size_t{B} * W, [=] CTRBOX_HD(size_t i) { g[i] = g_top[(i / W) * ld + i % W]; });
  e.Fill(acc, 0.0f, size_t{B} * W);
  const size_t kw = p.kstride_w, kr = p.kstride_r;
  for (uint32_t l = m.layers; l-- > 0;) {
    const float* gate = p.gate[l];
    const float* u = p.u[l];
    float* dgate = p.dgate[l];
    // The gates' logits: dG_k = <g, x0 * u_k> per row, through the softmax.
    e.ForEach(B, [=] CTRBOX_HD(size_t row) {
      float* dz = dgate + row * K;
      const float* z = gate + row * K;
      for (uint32_t k = 0; k < K; ++k) {
        float s = 0.0f;
        for (uint32_t c = 0; c < W; ++c) {
          const size_t i = row * W + c;
          s += g[i] * (x0[i] * u[k * kw + i]);
        }
        dz[k] = s;
      }
      float mean = 0.0f;
      for (uint32_t k = 0; k < K; ++k) mean += z[k] * dz[k];
      for (uint32_t k = 0; k < K; ++k) dz[k] = z[k] * (dz[k] - mean);
    });
    // The experts: du_k = G_k g x0; x0's share G_k g u_k; b's sum over k.
    float* du = p.du[l];
    float* dub = p.dub[l];
    e.ForEach(size_t{B} * W, [=] CTRBOX_HD(size_t i) {
      const size_t row = i / W;
      float sb = 0.0f, sx = acc[i];
      for (uint32_t k = 0; k < K; ++k) {
        const float gk = gate[row * K + k] * g[i];
        du[k * kw + i] = gk * x0[i];
        sb += du[k * kw + i];
        sx += gk * u[k * kw + i];
      }
      dub[i] = sb;
      acc[i] = sx;
    });
    // Through each expert's U, C and V to x_l (the residual's share is g itself), then the
    // gates' share.
    for (uint32_t k = 0; k < K; ++k) {
      float* dc = p.dc[l] + k * kr;
      float* da = p.da[l] + k * kr;
      const float* a = p.a[l] + k * kr;
      const float* c = p.c[l] + k * kr;
      e.Gemm(false, true, b, r, w, du + k * kw, w, params + m.u_offset(l, k), w, dc, r);
      e.ForEach(size_t{B} * R, [=] CTRBOX_HD(size_t i) {
        if (c[i] <= 0.0f) dc[i] = 0.0f;
      });
      e.Gemm(false, true, b, r, r, dc, r, params + m.c_offset(l, k), r, da, r);
      e.ForEach(size_t{B} * R, [=] CTRBOX_HD(size_t i) {
        if (a[i] <= 0.0f) da[i] = 0.0f;
      });
    }
    for (uint32_t k = 0; k < K; ++k) {
      e.Gemm(false, true, b, w, r, p.da[l] + k * kr, r, params + m.v_offset(l, k), r, tmp, w);
      e.ForEach(size_t{B} * W, [=] CTRBOX_HD(size_t i) { g[i] = g[i] + tmp[i]; });
    }
    e.Gemm(false, true, b, w, static_cast<int>(K), dgate, static_cast<int>(K),
           params + m.g_offset(l), static_cast<int>(K), tmp, w);
    e.ForEach(size_t{B} * W, [=] CTRBOX_HD(size_t i) { g[i] = g[i] + tmp[i]; });
  }
  e.ForEach(size_t{B} * W, [=] CTRBOX_HD(size_t i) { dx0[i] = g[i] + acc[i]; });
}

// Expert k of layer l's weight gradients over the B rows: dV_k = x_l^T da_k, dC_k = a_k^T dc_k,
// dU_k = c_k^T du_k (into grads, laid out like the parameters).
template <class Exec>
void MixExpertGrads(Exec& e, const MixLayout& m, const MixRows& p, uint32_t B, uint32_t l,
                    uint32_t k, float* grads) {
  const int b = static_cast<int>(B), w = static_cast<int>(m.width), r = static_cast<int>(m.rank);
  const float* xl = l == 0 ? p.x0 : p.x[l - 1];
  const size_t kr = k * p.kstride_r, kw = k * p.kstride_w;
  e.Gemm(true, false, w, r, b, xl, w, p.da[l] + kr, r, grads + m.v_offset(l, k), r);
  e.Gemm(true, false, r, r, b, p.a[l] + kr, r, p.dc[l] + kr, r, grads + m.c_offset(l, k), r);
  e.Gemm(true, false, r, w, b, p.c[l] + kr, r, p.du[l] + kw, w, grads + m.u_offset(l, k), w);
}

// Layer l's gate and bias gradients: dWg = x_l^T dgate, db = column sums of dub in row order.
template <class Exec>
void MixLayerGrads(Exec& e, const MixLayout& m, const MixRows& p, uint32_t B, uint32_t l,
                   float* grads) {
  const uint32_t W = m.width, K = m.experts;
  const float* xl = l == 0 ? p.x0 : p.x[l - 1];
  e.Gemm(true, false, static_cast<int>(W), static_cast<int>(K), static_cast<int>(B), xl,
         static_cast<int>(W), p.dgate[l], static_cast<int>(K), grads + m.g_offset(l),
         static_cast<int>(K));
  const float* dub = p.dub[l];
  float* db = grads + m.b_offset(l);
  e.ForEach(W, [=] CTRBOX_HD(size_t c) {
    float s = 0.0f;
    for (uint32_t row = 0; row < B; ++row) s += dub[size_t{row} * W + c];
    db[c] = s;
  });
}

}  // namespace ctrbox

#endif  // CTRBOX_MODEL_CROSS_MIX_H_
