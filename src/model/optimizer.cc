#include "model/optimizer.h"

#include <cmath>

namespace ctrbox {

bool ParseOptimizerKind(std::string_view name, OptimizerKind* out) {
  if (name == "adagrad")
    *out = OptimizerKind::kAdagrad;
  else if (name == "sgd")
    *out = OptimizerKind::kSgd;
  else if (name == "adam")
    *out = OptimizerKind::kAdam;
  else
    return false;
  return true;
}

std::string_view OptimizerKindName(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kAdagrad:
      return "adagrad";
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdam:
      return "adam";
  }
  return "unknown";
}

uint32_t SparseOptimizer::StateFloats(uint32_t n) const {
  switch (o_.kind) {
    case OptimizerKind::kAdagrad:
      return n;
    case OptimizerKind::kSgd:
      return 0;
    case OptimizerKind::kAdam:
      return 2 * n + 2;
  }
  return 0;
}

void SparseOptimizer::Update(float* w, float* state, const float* g, uint32_t n) const {
  const float lr = o_.lr, eps = o_.epsilon;
  switch (o_.kind) {
    case OptimizerKind::kAdagrad:
      for (uint32_t i = 0; i < n; ++i) {
        state[i] += g[i] * g[i];
        w[i] -= lr * g[i] / (std::sqrt(state[i]) + eps);
      }
      return;
    case OptimizerKind::kSgd:
      for (uint32_t i = 0; i < n; ++i) w[i] -= lr * g[i];
      return;
    case OptimizerKind::kAdam: {
      float* m = state;
      float* v = state + n;
      float& c1 = state[2 * n];  // 1 - beta1^t
      float& c2 = state[2 * n + 1];
      c1 = 1.0f - (1.0f - c1) * o_.beta1;
      c2 = 1.0f - (1.0f - c2) * o_.beta2;
      const float step = lr / c1, inv_sqrt_c2 = 1.0f / std::sqrt(c2);
      for (uint32_t i = 0; i < n; ++i) {
        m[i] = o_.beta1 * m[i] + (1.0f - o_.beta1) * g[i];
        v[i] = o_.beta2 * v[i] + (1.0f - o_.beta2) * g[i] * g[i];
        w[i] -= step * m[i] / (std::sqrt(v[i]) * inv_sqrt_c2 + eps);
      }
      return;
    }
  }
}

DenseOptimizer::DenseOptimizer(OptimizerOptions o, size_t num_params) : o_(o) {
  if (o_.kind == OptimizerKind::kAdam) {
    m_.assign(num_params, 0.0f);
    v_.assign(num_params, 0.0f);
  } else if (o_.kind == OptimizerKind::kAdagrad) {
    v_.assign(num_params, 0.0f);
  }
}

void DenseOptimizer::BeginStep() {
  ++t_;
  if (o_.kind == OptimizerKind::kAdam) {
    const double b1t = std::pow(static_cast<double>(o_.beta1), static_cast<double>(t_));
    const double b2t = std::pow(static_cast<double>(o_.beta2), static_cast<double>(t_));
    step_size_ = static_cast<float>(o_.lr / (1.0 - b1t));
    bias2_sqrt_ = static_cast<float>(std::sqrt(1.0 - b2t));
  }
}

void DenseOptimizer::Update(float* p, const float* g, size_t offset, size_t n) {
  const float lr = o_.lr, eps = o_.epsilon;
  switch (o_.kind) {
    case OptimizerKind::kSgd:
      for (size_t i = offset; i < offset + n; ++i) p[i] -= lr * g[i];
      return;
    case OptimizerKind::kAdagrad:
      for (size_t i = offset; i < offset + n; ++i) {
        v_[i] += g[i] * g[i];
        p[i] -= lr * g[i] / (std::sqrt(v_[i]) + eps);
      }
      return;
    case OptimizerKind::kAdam: {
      const float b1 = o_.beta1, b2 = o_.beta2, step = step_size_, inv_b2 = 1.0f / bias2_sqrt_;
      float* m = m_.data();
      float* v = v_.data();
      for (size_t i = offset; i < offset + n; ++i) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        p[i] -= step * m[i] / (std::sqrt(v[i]) * inv_b2 + eps);
      }
      return;
    }
  }
}

}  // namespace ctrbox
