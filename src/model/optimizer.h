// Optimizers: sparse ones update embedding rows and wide weights; dense ones the MLP.
// Formulas follow PyTorch's Adagrad / SGD / Adam (docs/model.md).
#ifndef CTRBOX_MODEL_OPTIMIZER_H_
#define CTRBOX_MODEL_OPTIMIZER_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "util/bf16.h"
#include "util/hash.h"
#include "util/hd.h"
#include "util/random.h"

namespace ctrbox {

// kRowwiseAdagrad is sparse only (FBGEMM's rowwise_adagrad): one sum-of-squares value per
// n-vector, fed the mean of the squared gradient elements.
enum class OptimizerKind { kAdagrad, kSgd, kAdam, kRowwiseAdagrad };
bool ParseOptimizerKind(std::string_view name, OptimizerKind* out);
std::string_view OptimizerKindName(OptimizerKind k);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdagrad;
  float lr = 0.05f;
  float epsilon = 1e-10f;  // adagrad: 1e-10, adam: 1e-8 (PyTorch defaults)
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  // Sparse adagrad and rowwise_adagrad: the stored bits of a state value, 0 (float32) or 16
  // (bfloat16, rounded stochastically after every update: RoundState).
  uint32_t state_bits = 0;
};

// Updates sparse rows. Adam is "lazy": a row's moments and step count advance only when the
// row receives a gradient. State floats per n-vector: adagrad n (sum of squares), sgd 0,
// adam 2n + 2 (moments, then 1 - beta1^t and 1 - beta2^t), rowwise_adagrad 1 (the sum over
// steps of mean_i g_i^2; every element then steps by lr * g_i / (sqrt(sum) + eps)). All state
// starts at 0.
// Thread safety: immutable; Update on distinct rows may run concurrently. A value type the
// GPU backend copies to the device (Update is the same code there).
class SparseOptimizer {
 public:
  explicit SparseOptimizer(OptimizerOptions o) : o_(o) {}
  uint32_t StateFloats(uint32_t n) const;
  CTRBOX_HD void Update(float* w, float* state, const float* g, uint32_t n) const {
    const float lr = o_.lr, eps = o_.epsilon;
    switch (o_.kind) {
      case OptimizerKind::kAdagrad:
        for (uint32_t i = 0; i < n; ++i) {
          state[i] += g[i] * g[i];
          w[i] -= lr * g[i] / (std::sqrt(state[i]) + eps);
        }
        return;
      case OptimizerKind::kRowwiseAdagrad: {
        float sum_sq = 0.0f;
        for (uint32_t i = 0; i < n; ++i) sum_sq += g[i] * g[i];
        state[0] += sum_sq / static_cast<float>(n);
        const float step = lr / (std::sqrt(state[0]) + eps);
        for (uint32_t i = 0; i < n; ++i) w[i] -= step * g[i];
        return;
      }
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
  // With state_bits 16: rounds state[0..count) to bfloat16 values (util/bf16.h), element d's
  // draw taken from (seed, stream) only, so the result never depends on threads or order.
  // Inline: the GPU backend's sparse update calls it on the device.
  CTRBOX_HD void RoundState(float* state, uint32_t count, uint64_t seed, uint64_t stream) const {
    if (o_.state_bits != 16) return;
    Random rng(Mix64(seed ^ Mix64(stream)));
    for (uint32_t d = 0; d < count; d += 4) {
      const uint64_t r = rng.Next();  // four 16-bit draws
      for (uint32_t k = 0; k < 4 && d + k < count; ++k) {
        state[d + k] = RoundBf16(state[d + k], static_cast<uint32_t>(r >> (16 * k)));
      }
    }
  }
  const OptimizerOptions& options() const { return o_; }

 private:
  OptimizerOptions o_;
};

// One dense step's constants: what DenseOptimizer::Update applies to every parameter, as a
// value the GPU backend passes to its update kernel.
struct DenseStep {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0, epsilon = 0, beta1 = 0, beta2 = 0;
  float step_size = 0, inv_bias2_sqrt = 1;  // adam: lr / (1 - beta1^t), 1 / sqrt(1 - beta2^t)

  // Updates one parameter p with gradient g; m and v are its state (unused by SGD; Adagrad
  // keeps its sum of squares in v).
  CTRBOX_HD void Apply(float* p, float g, float* m, float* v) const {
    switch (kind) {
      case OptimizerKind::kSgd:
        *p -= lr * g;
        return;
      case OptimizerKind::kAdagrad:
      case OptimizerKind::kRowwiseAdagrad:  // refused for dense (a row is one parameter here)
        *v += g * g;
        *p -= lr * g / (std::sqrt(*v) + epsilon);
        return;
      case OptimizerKind::kAdam:
        *m = beta1 * *m + (1.0f - beta1) * g;
        *v = beta2 * *v + (1.0f - beta2) * g * g;
        *p -= step_size * *m / (std::sqrt(*v) * inv_bias2_sqrt + epsilon);
        return;
    }
  }
};

// Updates the dense parameters (a flat vector). Adam keeps m, v and a global step.
// Thread safety: BeginStep from one thread; then Update on disjoint ranges concurrently.
class DenseOptimizer {
 public:
  DenseOptimizer(OptimizerOptions o, size_t num_params);
  // Starts a step (advances t); call once per minibatch before the Updates.
  void BeginStep();
  // Updates params[i] with grads[i] for i in [offset, offset + n).
  void Update(float* params, const float* grads, size_t offset, size_t n);
  // The constants of the step BeginStep started.
  DenseStep CurrentStep() const;
  // The constants step t will have (after BeginStep has brought step() to t): a replayed GPU
  // step reads a pass's from device memory, made before the pass.
  DenseStep StepAt(uint64_t t) const;

  const OptimizerOptions& options() const { return o_; }
  uint64_t step() const { return t_; }
  // Optimizer state for checkpoints: m, v (empty for SGD) and the step.
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  const std::vector<float>& m() const { return m_; }
  const std::vector<float>& v() const { return v_; }
  void set_step(uint64_t t) { t_ = t; }

 private:
  OptimizerOptions o_;
  std::vector<float> m_, v_;
  uint64_t t_ = 0;
  float step_size_ = 0, bias2_sqrt_ = 1;
};

}  // namespace ctrbox

#endif  // CTRBOX_MODEL_OPTIMIZER_H_
