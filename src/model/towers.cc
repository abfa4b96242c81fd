#include "model/towers.h"

#include <cmath>

#include "util/hash.h"
#include "util/random.h"

namespace ctrbox {

Towers::Towers(uint32_t base_width, const std::vector<std::vector<uint32_t>>& groups,
               const std::vector<std::vector<uint32_t>>& hidden, size_t param_base)
    : base_width_(base_width), param_base_(param_base) {
  const auto count = static_cast<uint32_t>(hidden.size());
  tap_begin_.push_back(0);
  out_begin_.push_back(0);
  for (const auto& h : hidden) {
    tap_begin_.push_back(tap_begin_.back() + (h.size() > 1 ? h.front() + h.back() : h.front()));
    out_begin_.push_back(out_begin_.back() + h.back());
  }
  size_t offset = param_base;
  // owner[c]: the tower whose dense group holds base column c (kNone: every tower reads it).
  std::vector<uint32_t> owner(base_width, kNone);
  for (uint32_t t = 0; t < groups.size(); ++t) {
    for (uint32_t c : groups[t]) owner[c] = t;
  }
  for (uint32_t t = 0; t < count; ++t) {
    std::vector<uint32_t> cols, inv(base_width, kNone);
    for (uint32_t c = 0; c < base_width; ++c) {
      if (owner[c] != kNone && owner[c] != t) continue;
      inv[c] = static_cast<uint32_t>(cols.size());
      cols.push_back(c);
    }
    towers_.emplace_back(static_cast<uint32_t>(cols.size()) + tap_begin_[t], hidden[t],
                         /*head=*/false);
    bases_.push_back(offset);
    offset += towers_.back().num_params();
    cols_.push_back(std::move(cols));
    inv_.push_back(std::move(inv));
  }
  out_w_ = offset;
}

double Towers::FlopsPerExample() const {
  double flops = 2.0 * 3.0 * out_width();  // the output unit
  for (const Mlp& m : towers_) flops += m.FlopsPerExample();
  return flops;
}

void Towers::Init(float* params, uint64_t seed) const {
  for (uint32_t t = 0; t < count(); ++t) {
    towers_[t].Init(params + bases_[t], Mix64(seed ^ (0x70E3'0000ULL + t)));
  }
  // The output unit as torch.nn.Linear(out_width, 1) initialises it.
  Random rng(Mix64(seed ^ 0x70E3'FFFFULL));
  const size_t k = out_width();
  const float bound = 1.0f / std::sqrt(static_cast<float>(k));
  for (size_t i = 0; i <= k; ++i) params[out_w_ + i] = (2.0f * rng.UniformFloat() - 1.0f) * bound;
}

}  // namespace ctrbox
