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
  else if (name == "rowwise_adagrad")
    *out = OptimizerKind::kRowwiseAdagrad;
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
    case OptimizerKind::kRowwiseAdagrad:
      return "rowwise_adagrad";
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
    case OptimizerKind::kRowwiseAdagrad:
      return n == 0 ? 0 : 1;
  }
  return 0;
}

DenseOptimizer::DenseOptimizer(OptimizerOptions o, size_t num_params) : o_(o) {
  if (o_.kind == OptimizerKind::kAdam) {
    m_.assign(num_params, 0.0f);
    v_.assign(num_params, 0.0f);
  } else if (o_.kind == OptimizerKind::kAdagrad || o_.kind == OptimizerKind::kRowwiseAdagrad) {
    v_.assign(num_params, 0.0f);
  }
}

namespace {

// Adam's bias corrections at step t: lr / (1 - beta1^t) and sqrt(1 - beta2^t).
void AdamScalars(const OptimizerOptions& o, uint64_t t, float* step_size, float* bias2_sqrt) {
  const double b1t = std::pow(static_cast<double>(o.beta1), static_cast<double>(t));
  const double b2t = std::pow(static_cast<double>(o.beta2), static_cast<double>(t));
  *step_size = static_cast<float>(o.lr / (1.0 - b1t));
  *bias2_sqrt = static_cast<float>(std::sqrt(1.0 - b2t));
}

}  // namespace

void DenseOptimizer::BeginStep() {
  ++t_;
  if (o_.kind == OptimizerKind::kAdam) AdamScalars(o_, t_, &step_size_, &bias2_sqrt_);
}

DenseStep DenseOptimizer::CurrentStep() const {
  return DenseStep{o_.kind, o_.lr, o_.epsilon, o_.beta1, o_.beta2, step_size_, 1.0f / bias2_sqrt_};
}

DenseStep DenseOptimizer::StepAt(uint64_t t) const {
  float step_size = step_size_, bias2_sqrt = bias2_sqrt_;
  if (o_.kind == OptimizerKind::kAdam) AdamScalars(o_, t, &step_size, &bias2_sqrt);
  return DenseStep{o_.kind, o_.lr, o_.epsilon, o_.beta1, o_.beta2, step_size, 1.0f / bias2_sqrt};
}

void DenseOptimizer::Update(float* p, const float* g, size_t offset, size_t n) {
  const DenseStep step = CurrentStep();
  float* m = m_.empty() ? nullptr : m_.data();
  float* v = v_.empty() ? nullptr : v_.data();
  for (size_t i = offset; i < offset + n; ++i) {
    step.Apply(p + i, g[i], m == nullptr ? nullptr : m + i, v == nullptr ? nullptr : v + i);
  }
}

}  // namespace ctrbox
