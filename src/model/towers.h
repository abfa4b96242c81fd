// Towers: AIBox's joint learning (AIBox §2.2; docs/model.md "Joint-learning towers").
//
// T MLP towers (of model.mlp's widths, or each its own: model.tower_mlp) replace the single
// MLP. The model's MLP input (the
// "base": f(dense) | pooled embeddings, after the cross layers, with the dot products) is
// shared; its dense columns are split into groups (model.dense_groups), one per tower, and
// tower t reads
//
//   in_t = [ base without the other towers' dense groups | h1_0 hL_0 | ... | h1_{t-1} hL_{t-1} ]
//
// where h1_s and hL_s are tower s's first and last hidden layers (post-ReLU; one of them when
// a tower has one hidden layer). One output unit reads every tower's last hidden layer:
//
//   logit = sum over t of <hL_t, w_t> + b      (+ wide + fm, as in the single-MLP model)
//
// Parameters, from param_base: tower 0's layers (as an Mlp without a head lays them out), ...,
// tower T-1's, then w (w_0 | ... | w_{T-1}, one weight per column of each hL_t) and b.
//
// TowersForward / TowersBackward are written once against an executor (exec/exec.h's
// contract: Gemm, ForEach, Fill): the CPU model runs them on a HostExec per row block and the
// GPU step on its GPUs, so both take the same floating-point steps in the same order. The
// weight gradients are Mlp::TileGrad's (CPU) or a whole-layer GEMM (GPU) per tower layer, and
// for the output unit dw_t = hL_t^T dlogit, db = the sum of dlogit in row order.
// Thread safety: immutable after construction.
#ifndef CTRBOX_MODEL_TOWERS_H_
#define CTRBOX_MODEL_TOWERS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/mlp.h"
#include "util/hd.h"

namespace ctrbox {

class Towers {
 public:
  static constexpr uint32_t kNone = ~0u;

  Towers() = default;  // none (the single MLP)
  // base_width: columns of the base; its columns [0, num dense) are the dense features, which
  // `groups` (one per tower, or none) name. hidden[t]: tower t's widths (at least one each).
  Towers(uint32_t base_width, const std::vector<std::vector<uint32_t>>& groups,
         const std::vector<std::vector<uint32_t>>& hidden, size_t param_base);

  bool on() const { return !towers_.empty(); }
  uint32_t count() const { return static_cast<uint32_t>(towers_.size()); }
  const Mlp& tower(uint32_t t) const { return towers_[t]; }
  uint32_t layers(uint32_t t) const { return towers_[t].num_layers(); }
  size_t base(uint32_t t) const { return bases_[t]; }  // tower t's first parameter
  uint32_t in(uint32_t t) const { return towers_[t].in(0); }
  uint32_t first(uint32_t t) const { return towers_[t].out(0); }
  uint32_t last(uint32_t t) const { return towers_[t].out(layers(t) - 1); }
  // Columns tower t adds to every later tower's input: h1, and hL when it is another layer.
  uint32_t taps(uint32_t t) const { return layers(t) > 1 ? first(t) + last(t) : first(t); }
  // Where tower s's taps start in a later tower t's input (after t's own columns).
  uint32_t tap_col(uint32_t t, uint32_t s) const { return own(t) + tap_begin_[s]; }
  // Tower t's base columns: own(t) of them, in base order (cols(t)[j] feeds input column j);
  // inv(t)[c]: the input column base column c feeds, or kNone (another tower's dense group).
  uint32_t own(uint32_t t) const { return static_cast<uint32_t>(cols_[t].size()); }
  const std::vector<uint32_t>& cols(uint32_t t) const { return cols_[t]; }
  const std::vector<uint32_t>& inv(uint32_t t) const { return inv_[t]; }
  uint32_t base_width() const { return base_width_; }
  size_t out_w() const { return out_w_; }                         // w: out_width() weights
  uint32_t out_width() const { return out_begin_.back(); }        // the sum of the last widths
  uint32_t out_begin(uint32_t t) const { return out_begin_[t]; }  // w_t's first weight in w
  size_t out_b() const { return out_w_ + out_width(); }
  size_t num_params() const { return out_b() + 1 - param_base_; }  // from param_base
  double FlopsPerExample() const;

  void Init(float* params, uint64_t seed) const;  // params: the model's (from 0)

 private:
  std::vector<Mlp> towers_;
  std::vector<size_t> bases_;
  std::vector<std::vector<uint32_t>> cols_, inv_;
  std::vector<uint32_t> tap_begin_, out_begin_;  // prefix sums of taps(t) and last(t)
  uint32_t base_width_ = 0;
  size_t param_base_ = 0, out_w_ = 0;
};

// One call's buffers over B rows (row-major, B rows each; per tower t and layer l).
struct TowerRows {
  const float* base = nullptr;                   // [B x base_width], row stride base_width
  std::vector<float*> tin, dtin;                 // [B x in(t)]: the input and its gradient
  std::vector<std::vector<float*>> acts, grads;  // [B x out(l)]: post-ReLU, pre-activation grad
  // Gradients reaching h1_t and hL_t from later towers (hL_t's unused with one hidden layer).
  std::vector<float*> inj_first, inj_last;
  std::vector<const uint32_t*> cols, inv;  // Towers::cols(t), inv(t) (device copies on a GPU)
};

// z[r] = sum over towers of <hL_t, w_t> + b, for B rows.
template <class Exec>
void TowersForward(Exec& e, const Towers& tw, const float* params, const TowerRows& p, uint32_t B,
                   float* z) {
  const uint32_t T = tw.count(), bw = tw.base_width();
  for (uint32_t t = 0; t < T; ++t) {
    const Mlp& m = tw.tower(t);
    const uint32_t L = tw.layers(t), last = tw.last(t);
    const uint32_t in = tw.in(t), own = tw.own(t);
    float* tin = p.tin[t];
    const float* base = p.base;
    const uint32_t* cols = p.cols[t];
    e.ForEach(size_t{B} * own, [=] CTRBOX_HD(size_t i) {
      const size_t r = i / own, j = i % own;
      tin[r * in + j] = base[r * bw + cols[j]];
    });
    for (uint32_t s = 0; s < t; ++s) {  // earlier towers' first and last hidden layers
      const float* h1 = p.acts[s][0];
      const uint32_t c1 = tw.tap_col(t, s), f = tw.first(s);
      e.ForEach(size_t{B} * f, [=] CTRBOX_HD(size_t i) { tin[(i / f) * in + c1 + i % f] = h1[i]; });
      if (const uint32_t Ls = tw.layers(s); Ls > 1) {
        const float* hl = p.acts[s][Ls - 1];
        const uint32_t cl = c1 + f, n = tw.last(s);
        e.ForEach(size_t{B} * n,
                  [=] CTRBOX_HD(size_t i) { tin[(i / n) * in + cl + i % n] = hl[i]; });
      }
    }
    const float* input = tin;
    const float* pt = params + tw.base(t);
    for (uint32_t l = 0; l < L; ++l) {
      const uint32_t k = m.in(l), n = m.out(l);
      float* y = p.acts[t][l];
      e.Gemm(false, false, static_cast<int>(B), static_cast<int>(n), static_cast<int>(k), input,
             static_cast<int>(k), pt + m.w_offset(l), static_cast<int>(n), y, static_cast<int>(n));
      const float* bias = pt + m.b_offset(l);
      e.ForEach(size_t{B} * n, [=] CTRBOX_HD(size_t i) {
        const float v = y[i] + bias[i % n];
        y[i] = v > 0.0f ? v : 0.0f;
      });
      input = y;
    }
    // The output unit's share of tower t, accumulated in tower order then column order.
    const float* h = p.acts[t][L - 1];
    const float* w = params + tw.out_w() + tw.out_begin(t);
    const bool start = t == 0;
    e.ForEach(B, [=] CTRBOX_HD(size_t r) {
      float s = start ? 0.0f : z[r];
      for (uint32_t j = 0; j < last; ++j) s += h[r * last + j] * w[j];
      z[r] = s;
    });
  }
  const float* b = params + tw.out_b();
  e.ForEach(B, [=] CTRBOX_HD(size_t r) { z[r] = z[r] + *b; });
}

// From dlogit [B] back through the towers (last to first) to every layer's pre-activation
// gradient (p.grads), every tower input's gradient (p.dtin) and the base's columns
// [dbase_begin, base_width) into dbase [B x (base_width - dbase_begin)]: each column the sum
// of the towers' gradients there, from 0 in tower order last to first.
template <class Exec>
void TowersBackward(Exec& e, const Towers& tw, const float* params, const TowerRows& p, uint32_t B,
                    const float* dlogit, float* dbase, uint32_t dbase_begin) {
  const uint32_t T = tw.count();
  // The gradient reaching tower t's last hidden layer from later towers (its first, with one).
  auto inj_top = [&](uint32_t t) { return tw.layers(t) > 1 ? p.inj_last[t] : p.inj_first[t]; };
  for (uint32_t t = 0; t + 1 < T; ++t) {
    e.Fill(p.inj_first[t], 0.0f, size_t{B} * tw.first(t));
    if (tw.layers(t) > 1) e.Fill(p.inj_last[t], 0.0f, size_t{B} * tw.last(t));
  }
  for (uint32_t t = T; t-- > 0;) {
    const Mlp& m = tw.tower(t);
    const float* pt = params + tw.base(t);
    const uint32_t in = tw.in(t), L = tw.layers(t), first = tw.first(t), last = tw.last(t);
    {  // the last hidden layer: the output unit's share, then the later towers'
      const float* w = params + tw.out_w() + tw.out_begin(t);
      const float* inj = t + 1 < T ? inj_top(t) : nullptr;
      const float* a = p.acts[t][L - 1];
      float* g = p.grads[t][L - 1];
      e.ForEach(size_t{B} * last, [=] CTRBOX_HD(size_t i) {
        float v = dlogit[i / last] * w[i % last];
        if (inj != nullptr) v += inj[i];
        g[i] = a[i] > 0.0f ? v : 0.0f;
      });
    }
    for (uint32_t l = L - 1; l >= 1; --l) {
      const uint32_t k = m.in(l), n = m.out(l);
      float* gp = p.grads[t][l - 1];
      e.Gemm(false, true, static_cast<int>(B), static_cast<int>(k), static_cast<int>(n),
             p.grads[t][l], static_cast<int>(n), pt + m.w_offset(l), static_cast<int>(n), gp,
             static_cast<int>(k));
      const float* a = p.acts[t][l - 1];
      const float* inj = l == 1 && t + 1 < T ? p.inj_first[t] : nullptr;  // h1's share
      e.ForEach(size_t{B} * k, [=] CTRBOX_HD(size_t i) {
        float v = gp[i];
        if (inj != nullptr) v += inj[i];
        gp[i] = a[i] > 0.0f ? v : 0.0f;
      });
    }
    float* dtin = p.dtin[t];
    e.Gemm(false, true, static_cast<int>(B), static_cast<int>(in), static_cast<int>(first),
           p.grads[t][0], static_cast<int>(first), pt + m.w_offset(0), static_cast<int>(first),
           dtin, static_cast<int>(in));
    for (uint32_t s = 0; s < t; ++s) {  // to the earlier towers' first and last hidden layers
      float* f1 = p.inj_first[s];
      const uint32_t c1 = tw.tap_col(t, s), f = tw.first(s);
      e.ForEach(size_t{B} * f,
                [=] CTRBOX_HD(size_t i) { f1[i] += dtin[(i / f) * in + c1 + i % f]; });
      if (tw.layers(s) > 1) {
        float* fl = p.inj_last[s];
        const uint32_t cl = c1 + f, n = tw.last(s);
        e.ForEach(size_t{B} * n,
                  [=] CTRBOX_HD(size_t i) { fl[i] += dtin[(i / n) * in + cl + i % n]; });
      }
    }
  }
  const uint32_t dw = tw.base_width() - dbase_begin;
  e.Fill(dbase, 0.0f, size_t{B} * dw);
  for (uint32_t t = T; t-- > 0;) {
    const float* dtin = p.dtin[t];
    const uint32_t* inv = p.inv[t];
    const uint32_t in = tw.in(t), begin = dbase_begin;
    e.ForEach(size_t{B} * dw, [=] CTRBOX_HD(size_t i) {
      const uint32_t k = inv[begin + i % dw];
      if (k != Towers::kNone) dbase[i] += dtin[(i / dw) * in + k];
    });
  }
}

}  // namespace ctrbox

#endif  // CTRBOX_MODEL_TOWERS_H_
