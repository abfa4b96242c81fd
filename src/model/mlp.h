// Mlp: the dense tower in -> hidden (ReLU)... -> 1 logit, on a flat parameter vector.
//
// Layer l has weights W_l stored [in_l x out_l] row-major, then bias b_l [out_l]; the last
// layer maps the last hidden width to 1. Initialisation follows torch.nn.Linear
// (uniform in +-1/sqrt(in_l) for weights and biases).
//
// The row-block functions work on any contiguous block of batch rows, so blocks run in
// parallel; TileGrad computes one fixed column tile of one layer's weight gradient. Results
// depend only on the tile and block boundaries, never on which thread runs them.
// Thread safety: immutable after construction.
#ifndef CTRBOX_MODEL_MLP_H_
#define CTRBOX_MODEL_MLP_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ctrbox {

class Mlp {
 public:
  // head false: no output unit, every layer ReLU (a stack such as DLRM's bottom MLP, whose
  // last activation is its output).
  Mlp(uint32_t in, std::vector<uint32_t> hidden, bool head = true);
  bool head() const { return head_; }

  uint32_t num_layers() const { return static_cast<uint32_t>(widths_.size()) - 1; }
  uint32_t in(uint32_t l) const { return widths_[l]; }
  uint32_t out(uint32_t l) const { return widths_[l + 1]; }
  size_t w_offset(uint32_t l) const { return offsets_[l]; }
  size_t b_offset(uint32_t l) const { return offsets_[l] + size_t{in(l)} * out(l); }
  size_t num_params() const { return offsets_.back(); }
  // Multiply-adds of forward + backward per example (for throughput reports).
  double FlopsPerExample() const;

  void Init(float* params, uint64_t seed) const;

  // Forward over `rows` rows: x [rows x in(0)] -> acts[l] [rows x out(l)] for the hidden
  // layers (post-ReLU) -> logits [rows] (without a head: every layer into acts, no logits).
  void Forward(const float* params, const float* x, int rows, float* const* acts,
               float* logits) const;
  // Backward over the same rows: from dlogit [rows] computes grads[l] [rows x out(l)] (the
  // gradient at hidden layer l's pre-activation) and dx [rows x (in(0) - dx_begin)], the
  // gradient of the inputs from column dx_begin on.
  void Backward(const float* params, const float* const* acts, const float* dlogit, int rows,
                float* const* grads, float* dx, uint32_t dx_begin) const;
  // Without a head: from g_top [rows x out(last)], the gradient at the last activation,
  // computes grads[l] for every layer (no input gradient).
  void BackwardFromTop(const float* params, const float* const* acts, const float* g_top, int rows,
                       float* const* grads) const;
  // Column tile [c0, c1) of layer l's gradients over a batch of `rows` rows:
  // dW_l[:, c0:c1] = xin^T g[:, c0:c1] and db_l[c0:c1] = column sums of g, written into
  // grad_params (laid out like params). xin is the layer's input [rows x in(l)], g its
  // pre-activation gradient [rows x out(l)]. into_zeros: dW_l's tile in grad_params is zero
  // already, and the GEMM adds into it instead of first zeroing it (the same bits: OpenBLAS
  // zeroes C for beta = 0, then adds the products either way).
  void TileGrad(uint32_t l, uint32_t c0, uint32_t c1, const float* xin, const float* g, int rows,
                float* grad_params, bool into_zeros = false) const;

 private:
  // From grads[top] down: every lower layer's pre-activation gradient.
  void BackpropHidden(const float* params, const float* const* acts, int rows, float* const* grads,
                      uint32_t top) const;

  bool head_;
  std::vector<uint32_t> widths_;  // in, hidden..., 1 (with a head)
  std::vector<size_t> offsets_;   // start of each layer's params; back() = total
};

}  // namespace ctrbox

#endif  // CTRBOX_MODEL_MLP_H_
