#include "model/mlp.h"

#include <cmath>
#include <cstring>

#include "util/blas.h"
#include "util/random.h"

namespace ctrbox {

Mlp::Mlp(uint32_t in, std::vector<uint32_t> hidden, bool head) : head_(head) {
  widths_.push_back(in);
  for (uint32_t h : hidden) widths_.push_back(h);
  if (head) widths_.push_back(1);
  offsets_.push_back(0);
  for (uint32_t l = 0; l + 1 < widths_.size(); ++l) {
    offsets_.push_back(offsets_.back() + size_t{widths_[l]} * widths_[l + 1] + widths_[l + 1]);
  }
}

double Mlp::FlopsPerExample() const {
  double macs = 0;
  for (uint32_t l = 0; l < num_layers(); ++l) macs += static_cast<double>(in(l)) * out(l);
  return 2.0 * 3.0 * macs;  // forward, input gradient and weight gradient
}

void Mlp::Init(float* params, uint64_t seed) const {
  Random rng(Mix64(seed ^ 0x6d6c70ULL));
  for (uint32_t l = 0; l < num_layers(); ++l) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(in(l)));
    const size_t n = size_t{in(l)} * out(l) + out(l);
    for (size_t i = 0; i < n; ++i) {
      params[w_offset(l) + i] = (2.0f * rng.UniformFloat() - 1.0f) * bound;
    }
  }
}

void Mlp::Forward(const float* params, const float* x, int rows, float* const* acts,
                  float* logits) const {
  const uint32_t L = num_layers();
  const float* input = x;
  for (uint32_t l = 0; l + (head_ ? 1 : 0) < L; ++l) {
    const uint32_t n = out(l);
    float* y = acts[l];
    blas::Sgemm(false, false, rows, n, in(l), 1.0f, input, in(l), params + w_offset(l), n, 0.0f, y,
                n);
    const float* b = params + b_offset(l);
    for (int r = 0; r < rows; ++r) {
      float* yr = y + size_t(r) * n;
      for (uint32_t j = 0; j < n; ++j) yr[j] = std::max(yr[j] + b[j], 0.0f);
    }
    input = y;
  }
  if (!head_) return;
  const uint32_t last = L - 1, k = in(last);
  const float* w = params + w_offset(last);
  const float b = params[b_offset(last)];
  for (int r = 0; r < rows; ++r) {
    const float* xr = input + size_t(r) * k;
    float s = 0.0f;
    for (uint32_t j = 0; j < k; ++j) s += xr[j] * w[j];
    logits[r] = s + b;
  }
}

void Mlp::Backward(const float* params, const float* const* acts, const float* dlogit, int rows,
                   float* const* grads, float* dx, uint32_t dx_begin) const {
  const uint32_t L = num_layers(), last = L - 1;
  if (L == 1) {  // no hidden layer: the input gradient is dlogit * w
    const float* w = params + w_offset(0);
    const uint32_t width = in(0) - dx_begin;
    for (int r = 0; r < rows; ++r) {
      for (uint32_t j = 0; j < width; ++j) dx[size_t(r) * width + j] = dlogit[r] * w[dx_begin + j];
    }
    return;
  }
  // The last hidden layer's gradient from the output layer.
  {
    const uint32_t n = in(last);
    const float* w = params + w_offset(last);
    const float* a = acts[last - 1];
    float* g = grads[last - 1];
    for (int r = 0; r < rows; ++r) {
      for (uint32_t j = 0; j < n; ++j) {
        size_t i = size_t(r) * n + j;
        g[i] = a[i] > 0.0f ? dlogit[r] * w[j] : 0.0f;
      }
    }
  }
  BackpropHidden(params, acts, rows, grads, last - 1);
  // The inputs' gradient, from column dx_begin on.
  const uint32_t n_out = out(0), width = in(0) - dx_begin;
  blas::Sgemm(false, true, rows, width, n_out, 1.0f, grads[0], n_out,
              params + w_offset(0) + size_t{dx_begin} * n_out, n_out, 0.0f, dx, width);
}

void Mlp::BackwardFromTop(const float* params, const float* const* acts, const float* g_top,
                          int rows, float* const* grads) const {
  const uint32_t L = num_layers();
  if (L == 0) return;
  {
    const size_t total = size_t(rows) * out(L - 1);
    const float* a = acts[L - 1];
    float* g = grads[L - 1];
    for (size_t i = 0; i < total; ++i) g[i] = a[i] > 0.0f ? g_top[i] : 0.0f;
  }
  BackpropHidden(params, acts, rows, grads, L - 1);
}

void Mlp::BackpropHidden(const float* params, const float* const* acts, int rows,
                         float* const* grads, uint32_t top) const {
  // Layer l-1's pre-activation gradient from layer l's: (g_l W_l^T) masked by ReLU.
  for (uint32_t l = top; l >= 1; --l) {
    const uint32_t n_in = in(l), n_out = out(l);
    float* g_prev = grads[l - 1];
    blas::Sgemm(false, true, rows, n_in, n_out, 1.0f, grads[l], n_out, params + w_offset(l), n_out,
                0.0f, g_prev, n_in);
    const float* a = acts[l - 1];
    const size_t total = size_t(rows) * n_in;
    for (size_t i = 0; i < total; ++i) {
      if (a[i] <= 0.0f) g_prev[i] = 0.0f;
    }
  }
}

void Mlp::TileGrad(uint32_t l, uint32_t c0, uint32_t c1, const float* xin, const float* g, int rows,
                   float* grad_params, bool into_zeros) const {
  const uint32_t n_in = in(l), n_out = out(l), width = c1 - c0;
  blas::Sgemm(true, false, n_in, width, rows, 1.0f, xin, n_in, g + c0, n_out,
              into_zeros ? 1.0f : 0.0f, grad_params + w_offset(l) + c0, n_out);
  float* db = grad_params + b_offset(l) + c0;
  std::memset(db, 0, width * sizeof(float));
  for (int r = 0; r < rows; ++r) {
    const float* gr = g + size_t(r) * n_out + c0;
    for (uint32_t j = 0; j < width; ++j) db[j] += gr[j];
  }
}

}  // namespace ctrbox
