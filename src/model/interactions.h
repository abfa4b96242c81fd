// The feature interactions a CTR model composes with its MLP and wide part (docs/model.md,
// "Architectures"): DeepFM's second-order term, DCN-v2's cross layers and DLRM's pairwise dot
// products. Written once as CTRBOX_HD functions over one row (or one element), so that the CPU
// model (model/ctr_model.cc) and the GPU step (gpu/step.h) run the same arithmetic in
// the same order: the GPU emulation is bit-identical to the CPU model.
//
// With S slots of pooled embeddings e_s (dim d each) at columns [D, D + S*d) of the input
// x0 = [dense | e_1 | ... | e_S] (width W0 = D + S*d):
//
//   fm   = 1/2 sum_k ((sum_s e_sk)^2 - sum_s e_sk^2)          added to the logit
//   dot  = (e_i . e_j) for i < j, in row-major pair order      appended to the MLP's input
//          (with model.bottom_mlp, x0 = [z | e_1 | ... | e_S] where z = BottomMLP(dense), of
//          width dim, and z takes part in the dot products as vector 0)
//   x_{l+1} = x0 * (x_l W_l + b_l) + x_l,  l = 0..L-1          the MLP reads x_L (stacked)
//                                          (W_l = U_l V_l^T with model.cross_rank)
//
// Matrices are stored row-major as [in x out] like the Mlp's weights; the cross layers'
// parameters sit after the MLP's in the dense parameter vector (CrossLayout).
#ifndef CTRBOX_MODEL_INTERACTIONS_H_
#define CTRBOX_MODEL_INTERACTIONS_H_

#include <cstddef>
#include <cstdint>

#include "util/hd.h"

namespace ctrbox {

// Where the cross layers' parameters live in the dense parameter vector. Full rank: W_l
// [W0 x W0] at w_offset(l). Low rank r (DCN-v2's W_l = U_l V_l^T, model.cross_rank): V_l
// [W0 x r] at w_offset(l), then U_l [r x W0] at u_offset(l), so x_l W_l = (x_l V_l) U_l. Then
// b_l [W0].
struct CrossLayout {
  uint32_t width = 0;   // W0
  uint32_t layers = 0;  // L
  uint32_t rank = 0;    // r; 0: full rank
  size_t base = 0;      // offset of layer 0's first weight

  CTRBOX_HD size_t matrix_params() const {
    return rank > 0 ? 2 * size_t{width} * rank : size_t{width} * width;
  }
  CTRBOX_HD size_t layer_params() const { return matrix_params() + width; }
  CTRBOX_HD size_t w_offset(uint32_t l) const { return base + l * layer_params(); }
  CTRBOX_HD size_t u_offset(uint32_t l) const { return w_offset(l) + size_t{width} * rank; }
  CTRBOX_HD size_t b_offset(uint32_t l) const { return w_offset(l) + matrix_params(); }
  size_t num_params() const { return layers * layer_params(); }
};

// The number of pairs i < j of S slots, and the index of pair (i, j) in row-major order.
CTRBOX_HD inline uint32_t DotPairs(uint32_t S) { return S * (S - 1) / 2; }
CTRBOX_HD inline uint32_t DotPairIndex(uint32_t i, uint32_t j, uint32_t S) {
  return i * (2 * S - i - 1) / 2 + (j - i - 1);
}

// The slots (i, j) of pair p: the inverse of DotPairIndex.
CTRBOX_HD inline void DotPairOf(uint32_t p, uint32_t S, uint32_t* i, uint32_t* j) {
  uint32_t a = 0;
  while (p >= S - 1 - a) {
    p -= S - 1 - a;
    ++a;
  }
  *i = a;
  *j = a + 1 + p;
}

// The FM second-order term of one row's pooled embeddings emb [S x dim].
CTRBOX_HD inline float FmTerm(const float* emb, uint32_t S, uint32_t dim) {
  float total = 0.0f;
  for (uint32_t k = 0; k < dim; ++k) {
    float sum = 0.0f, squares = 0.0f;
    for (uint32_t s = 0; s < S; ++s) {
      const float v = emb[size_t{s} * dim + k];
      sum += v;
      squares += v * v;
    }
    total += sum * sum - squares;
  }
  return 0.5f * total;
}

// d fm / d e_sk = sum_t e_tk - e_sk.
CTRBOX_HD inline float FmGrad(const float* emb, uint32_t S, uint32_t dim, uint32_t s, uint32_t k) {
  float sum = 0.0f;
  for (uint32_t t = 0; t < S; ++t) sum += emb[size_t{t} * dim + k];
  return sum - emb[size_t{s} * dim + k];
}

// Pair p's dot product (p < DotPairs(S) for slots i < j).
CTRBOX_HD inline float DotValue(const float* emb, uint32_t dim, uint32_t i, uint32_t j) {
  float acc = 0.0f;
  for (uint32_t k = 0; k < dim; ++k) acc += emb[size_t{i} * dim + k] * emb[size_t{j} * dim + k];
  return acc;
}

// d loss / d e_sk through the dot products, from their gradients ddot [DotPairs(S)]: the sum
// over the other slots t, in slot order, of ddot(s, t) * e_tk.
CTRBOX_HD inline float DotGrad(const float* emb, const float* ddot, uint32_t S, uint32_t dim,
                               uint32_t s, uint32_t k) {
  float acc = 0.0f;
  for (uint32_t t = 0; t < S; ++t) {
    if (t == s) continue;
    const uint32_t p = s < t ? DotPairIndex(s, t, S) : DotPairIndex(t, s, S);
    acc += ddot[p] * emb[size_t{t} * dim + k];
  }
  return acc;
}

// One element of a dot vector's gradient: what the MLP (or the cross layers) sent back, plus
// the dot products' share, plus the FM term's (dlogit * FmGrad, slots only), in that order.
// The dot vectors are the slots' pooled embeddings, after the bottom MLP's output z when the
// model has one (model.bottom_mlp: DLRM's dense vector joins the dot products).
struct EmbGradTerms {
  const float* vecs;  // the row's dot vectors [nvec x dim]: (z,) e_1 .. e_S
  const float* ddot;  // the row's dot-product gradients [DotPairs(nvec)] (null: no dots)
  uint32_t nvec;      // shift + S
  uint32_t shift;     // vectors before the slots' (1 with a bottom MLP)
  float dlogit;       // the row's logit gradient
  bool fm;
};
CTRBOX_HD inline float EmbInputGrad(float base, const EmbGradTerms& t, uint32_t dim, uint32_t v,
                                    uint32_t k) {
  float g = base;
  if (t.ddot != nullptr) g += DotGrad(t.vecs, t.ddot, t.nvec, dim, v, k);
  if (t.fm && v >= t.shift) {
    g += t.dlogit * FmGrad(t.vecs + size_t{t.shift} * dim, t.nvec - t.shift, dim, v - t.shift, k);
  }
  return g;
}

// Cross layer, forward, one element i of a row (c = i's column): u holds x_l W_l on entry and
// x_l W_l + b_l on return; returns x_{l+1}[i].
CTRBOX_HD inline float CrossForward(float x0, float xl, float* u, float bias) {
  *u += bias;
  return x0 * *u + xl;
}

}  // namespace ctrbox

#endif  // CTRBOX_MODEL_INTERACTIONS_H_
