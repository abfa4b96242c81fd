// Optimizers: sparse ones update embedding rows and wide weights; dense ones the MLP.
// Formulas follow PyTorch's Adagrad / SGD / Adam (docs/model.md).
#ifndef CTRBOX_MODEL_OPTIMIZER_H_
#define CTRBOX_MODEL_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace ctrbox {

enum class OptimizerKind { kAdagrad, kSgd, kAdam };
bool ParseOptimizerKind(std::string_view name, OptimizerKind* out);
std::string_view OptimizerKindName(OptimizerKind k);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdagrad;
  float lr = 0.05f;
  float epsilon = 1e-10f;  // adagrad: 1e-10, adam: 1e-8 (PyTorch defaults)
  float beta1 = 0.9f;
  float beta2 = 0.999f;
};

// Updates sparse rows. Adam is "lazy": a row's moments and step count advance only when the
// row receives a gradient. State floats per n-vector: adagrad n (sum of squares), sgd 0,
// adam 2n + 2 (moments, then 1 - beta1^t and 1 - beta2^t). All state starts at 0.
// Thread safety: immutable; Update on distinct rows may run concurrently.
class SparseOptimizer {
 public:
  explicit SparseOptimizer(OptimizerOptions o) : o_(o) {}
  uint32_t StateFloats(uint32_t n) const;
  void Update(float* w, float* state, const float* g, uint32_t n) const;
  const OptimizerOptions& options() const { return o_; }

 private:
  OptimizerOptions o_;
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
