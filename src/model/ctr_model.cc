// CtrModel (model/ctr_model.h): construction, its description and value layout, the buffers
// of a minibatch. The rest by concern: ctr_model_interactions.cc, ctr_model_step.cc,
// ctr_model_updates.cc; model_options.cc the options' checks.
#include "model/ctr_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "exec/exec.h"
#include "model/ctr_model_internal.h"
#include "util/blas.h"
#include "util/hash.h"
#include "util/random.h"

namespace ctrbox {

using model_internal::LogLoss;
using model_internal::Sigmoid;

namespace {

uint32_t DenseWidth(const Schema& schema, const ModelOptions& m) {
  return m.bottom_mlp.empty() ? schema.num_dense : m.bottom_mlp.back();
}

// The embedding columns: every slot's dimension (model.slot_dims) in slot order.
uint32_t EmbWidth(const Schema& schema, const ModelOptions& m) {
  if (!m.MultiTable()) return schema.num_slots * m.embedding_dim;
  uint32_t w = 0;
  for (uint32_t s = 0; s < schema.num_slots; ++s) w += m.SlotDim(s);
  return w;
}

uint32_t InputWidth(const Schema& schema, const ModelOptions& m) {
  return DenseWidth(schema, m) + EmbWidth(schema, m);
}

// The dot vectors: the slots' embeddings, after z with a bottom MLP.
uint32_t DotVectors(const Schema& schema, const ModelOptions& m) {
  return schema.num_slots + (m.bottom_mlp.empty() ? 0 : 1);
}

uint32_t MlpInputWidth(const Schema& schema, const ModelOptions& m) {
  return InputWidth(schema, m) + (m.dot ? DotPairs(DotVectors(schema, m)) : 0);
}

Towers MakeTowers(const Schema& schema, const ModelOptions& m) {
  if (!m.HasTowers()) return Towers();
  return Towers(MlpInputWidth(schema, m), m.dense_groups, m.TowerWidths(), 0);
}

}  // namespace

CtrModel::CtrModel(Schema schema, ModelOptions model, OptimizerOptions sparse,
                   OptimizerOptions dense, uint64_t seed)
    : schema_(schema),
      options_(std::move(model)),
      sparse_opt_(sparse),
      mlp_(MlpInputWidth(schema, options_), options_.mlp),
      dense_width_(DenseWidth(schema, options_)),
      input_width_(InputWidth(schema, options_)),
      towers_(MakeTowers(schema, options_)),
      cross_{input_width_, options_.cross_experts > 0 ? 0 : options_.cross_layers,
             options_.cross_experts > 0 ? 0 : options_.cross_rank,
             towers_.on() ? towers_.num_params() : mlp_.num_params()},
      bottom_(schema.num_dense, options_.bottom_mlp, /*head=*/false),
      bottom_base_(cross_.base + cross_.num_params()),
      mix_{input_width_, options_.cross_experts > 0 ? options_.cross_layers : 0,
           options_.cross_experts, options_.cross_rank, bottom_base_ + bottom_.num_params()},
      params_(mix_.base + mix_.num_params()),
      grads_(params_.size()),
      dense_opt_(dense, params_.size()),
      quant_(options_.quant.bits, options_.quant.range),
      quant_seed_(Mix64(seed ^ 0x51A7'0000'0000'0002ULL)) {
  blas::UseSingleThreadedBlas();
  assert(options_.SlotDimsError(schema_.num_slots).empty());
  emb_width_ = EmbWidth(schema_, options_);
  row_dim_ = options_.MaxDim();
  for (uint32_t s = 0, col = 0; s < schema_.num_slots; ++s) {
    slot_col_.push_back(col);
    slot_dim_.push_back(options_.SlotDim(s));
    col += slot_dim_.back();
  }
  // With cross layers or a bottom MLP the gradient reaches every input column (the dense ones
  // feed the cross products, or z its MLP).
  dmi_begin_ = cross_.layers > 0 || mix_.layers > 0 || bottom_.num_layers() > 0 ? 0 : dense_width_;
  if (towers_.on()) {
    towers_.Init(params_.data(), seed);
  } else {
    mlp_.Init(params_.data(), seed);
  }
  bottom_.Init(params_.data() + bottom_base_, Mix64(seed ^ 0xB0770DULL));
  InitInteractionWeights(seed);
  PlanTiles();
}

void CtrModel::InitInteractionWeights(uint64_t seed) {
  if (cross_.layers > 0) {
    // Weights Glorot-uniform (W_l, or V_l and U_l), b_l zero, as DCN-v2's reference code.
    Random rng(Mix64(seed ^ 0xC2055ULL));
    const float fan = cross_.rank > 0 ? static_cast<float>(cross_.width + cross_.rank)
                                      : 2.0f * static_cast<float>(cross_.width);
    const float bound = std::sqrt(6.0f / fan);
    for (uint32_t l = 0; l < cross_.layers; ++l) {
      float* w = params_.data() + cross_.w_offset(l);
      for (size_t i = 0; i < cross_.matrix_params(); ++i) {
        w[i] = (2.0f * rng.UniformFloat() - 1.0f) * bound;
      }
    }
  }
  if (mix_.layers > 0) {
    // V_k, C_k, U_k and the gates Glorot-uniform, b zero.
    Random rng(Mix64(seed ^ 0xC2055'3E7ULL));
    const uint32_t W = mix_.width, R = mix_.rank, K = mix_.experts;
    auto glorot = [&](size_t at, uint32_t in, uint32_t out) {
      const float bound = std::sqrt(6.0f / static_cast<float>(in + out));
      for (size_t i = 0; i < size_t{in} * out; ++i) {
        params_[at + i] = (2.0f * rng.UniformFloat() - 1.0f) * bound;
      }
    };
    for (uint32_t l = 0; l < mix_.layers; ++l) {
      for (uint32_t k = 0; k < K; ++k) {
        glorot(mix_.v_offset(l, k), W, R);
        glorot(mix_.c_offset(l, k), R, R);
        glorot(mix_.u_offset(l, k), R, W);
      }
      glorot(mix_.g_offset(l), W, K);
    }
  }
}

void CtrModel::PlanTiles() {
  for (uint32_t l = 0; !towers_.on() && l < mlp_.num_layers(); ++l) {
    for (uint32_t c0 = 0; c0 < mlp_.out(l); c0 += kTileColumns) {
      tiles_.push_back(Tile{TileKind::kMlp, l, c0, std::min(mlp_.out(l), c0 + kTileColumns)});
    }
  }
  for (uint32_t t = 0; t < towers_.count(); ++t) {
    const Mlp& m = towers_.tower(t);
    for (uint32_t l = 0; l < m.num_layers(); ++l) {
      for (uint32_t c0 = 0; c0 < m.out(l); c0 += kTileColumns) {
        tiles_.push_back(Tile{TileKind::kTower, l, c0, std::min(m.out(l), c0 + kTileColumns), t});
      }
    }
  }
  if (towers_.on()) tiles_.push_back(Tile{TileKind::kTowerOut, 0, 0, 1});
  for (uint32_t l = 0; l < mix_.layers; ++l) {
    for (uint32_t k = 0; k < mix_.experts; ++k) {
      tiles_.push_back(Tile{TileKind::kMixExpert, l, 0, 1, k});
    }
    tiles_.push_back(Tile{TileKind::kMixLayer, l, 0, 1});
  }
  for (uint32_t l = 0; l < cross_.layers; ++l) {
    for (uint32_t c0 = 0; c0 < cross_.width; c0 += kTileColumns) {
      tiles_.push_back(Tile{TileKind::kCross, l, c0, std::min(cross_.width, c0 + kTileColumns)});
    }
    for (uint32_t c0 = 0; c0 < cross_.rank; c0 += kTileColumns) {
      tiles_.push_back(Tile{TileKind::kCrossV, l, c0, std::min(cross_.rank, c0 + kTileColumns)});
    }
  }
  for (uint32_t l = 0; l < bottom_.num_layers(); ++l) {
    for (uint32_t c0 = 0; c0 < bottom_.out(l); c0 += kTileColumns) {
      tiles_.push_back(Tile{TileKind::kBottom, l, c0, std::min(bottom_.out(l), c0 + kTileColumns)});
    }
  }
  // Rows of the tile's matrix (the multiply-adds per column of its GEMM).
  auto in_of = [&](const Tile& t) {
    switch (t.kind) {
      case TileKind::kMlp:
        return mlp_.in(t.layer);
      case TileKind::kCross:
        return cross_.rank > 0 ? cross_.rank : cross_.width;
      case TileKind::kCrossV:
        return cross_.width;
      case TileKind::kBottom:
        return bottom_.in(t.layer);
      case TileKind::kTower:
        return towers_.tower(t.tower).in(t.layer);
      case TileKind::kTowerOut:
        return towers_.out_width();
      case TileKind::kMixExpert:
        return static_cast<uint32_t>(mix_.expert_params());
      case TileKind::kMixLayer:
        return mix_.width * (mix_.experts + 1);
    }
    return 0u;
  };
  std::stable_sort(tiles_.begin(), tiles_.end(), [&](const Tile& a, const Tile& b) {
    return uint64_t{in_of(a)} * (a.c1 - a.c0) > uint64_t{in_of(b)} * (b.c1 - b.c0);
  });
}

std::string CtrModel::Describe() const {
  std::string s = fmt::format("{} dense", schema_.num_dense);
  if (bottom_.num_layers() > 0) {
    s += " -> bottom MLP ";
    for (size_t i = 0; i < options_.bottom_mlp.size(); ++i) {
      s += fmt::format("{}{}", i > 0 ? "-" : "", options_.bottom_mlp[i]);
    }
  }
  if (options_.MultiTable()) {  // "26 slots (0-9 x 32, 10-25 x 8)"
    s += fmt::format(" + {} slots (", schema_.num_slots);
    for (uint32_t a = 0; a < schema_.num_slots;) {
      uint32_t b = a;
      while (b + 1 < schema_.num_slots && slot_dim_[b + 1] == slot_dim_[a]) ++b;
      s += fmt::format("{}{}{} x {}", a > 0 ? ", " : "", a, b > a ? fmt::format("-{}", b) : "",
                       slot_dim_[a]);
      a = b + 1;
    }
    s += ")";
  } else {
    s += fmt::format(" + {} slots x {}", schema_.num_slots, options_.embedding_dim);
  }
  if (cross_.layers > 0) {
    s += fmt::format(" -> {} cross layer{}", cross_.layers, cross_.layers > 1 ? "s" : "");
    if (cross_.rank > 0) s += fmt::format(" (rank {})", cross_.rank);
  }
  if (mix_.layers > 0) {
    s += fmt::format(" -> {} cross layer{} ({} experts of rank {})", mix_.layers,
                     mix_.layers > 1 ? "s" : "", mix_.experts, mix_.rank);
  }
  s += towers_.on() ? fmt::format(" -> {} towers x MLP ", towers_.count()) : " -> MLP ";
  // The towers' widths when each has its own (model.tower_mlp): "a-b | c-d".
  const std::vector<std::vector<uint32_t>> shapes =
      options_.tower_mlp.empty() ? std::vector<std::vector<uint32_t>>{options_.mlp}
                                 : options_.tower_mlp;
  for (size_t t = 0; t < shapes.size(); ++t) {
    s += t > 0 ? " | " : "";
    for (size_t i = 0; i < shapes[t].size(); ++i) {
      s += fmt::format("{}{}", i > 0 ? "-" : "", shapes[t][i]);
    }
    if (shapes[t].empty()) s += "(linear)";
  }
  if (!options_.dense_groups.empty()) {
    s += " (dense groups ";
    for (size_t g = 0; g < options_.dense_groups.size(); ++g) {
      s += g > 0 ? " | " : "";
      for (size_t i = 0; i < options_.dense_groups[g].size(); ++i) {
        s += fmt::format("{}{}", i > 0 ? "+" : "", options_.dense_groups[g][i]);
      }
    }
    s += ")";
  }
  if (options_.dot) s += fmt::format(" (+ {} dots)", DotPairs(DotVectors(schema_, options_)));
  if (options_.wide) s += " + wide";
  if (options_.fm) s += " + fm";
  return s + fmt::format("; {} dense parameters", params_.size());
}

double CtrModel::FlopsPerExample() const {
  // A cross layer's matrices: one GEMM forward, one backward to the input, one to the weights.
  return (towers_.on() ? towers_.FlopsPerExample() : mlp_.FlopsPerExample()) +
         bottom_.FlopsPerExample() + mix_.FlopsPerExample() +
         2.0 * 3.0 * cross_.layers * static_cast<double>(cross_.matrix_params());
}

ValueLayout CtrModel::LayoutFor(const ModelOptions& model, const OptimizerOptions& sparse) {
  const SparseOptimizer opt(sparse);
  ValueLayout l{model.MaxDim(),     opt.StateFloats(model.MaxDim()),
                opt.StateFloats(1), model.quant.bits,
                model.quant.range,  sparse.state_bits};
  const std::vector<uint32_t> dims = model.TableDims();
  if (dims.size() > 1) {
    l.tables = static_cast<uint32_t>(dims.size());
    for (size_t t = 0; t < dims.size(); ++t) {
      l.table_dim[t] = dims[t];
      l.table_state[t] = opt.StateFloats(dims[t]);
    }
  }
  return l;
}

ValueLayout CtrModel::value_layout() const { return LayoutFor(options_, sparse_opt_.options()); }

void CtrModel::EnsureBuffers(uint32_t rows) {
  if (rows <= capacity_) return;
  capacity_ = rows;
  const uint32_t hidden = towers_.on() ? 0 : mlp_.num_layers() - 1;
  x_.resize(size_t{rows} * input_width_);
  logits_.resize(rows);
  dlogit_.resize(rows);
  wide_sum_.resize(rows);
  dx_.resize(size_t{rows} * emb_width_);
  acts_.resize(hidden);
  grads_hidden_.resize(hidden);
  act_ptrs_.resize(hidden);
  grad_ptrs_.resize(hidden);
  for (uint32_t l = 0; l < hidden; ++l) {
    acts_[l].resize(size_t{rows} * mlp_.out(l));
    grads_hidden_[l].resize(size_t{rows} * mlp_.out(l));
  }
  const uint32_t T = towers_.count();
  tw_tin_.resize(T);
  tw_dtin_.resize(T);
  tw_injf_.resize(T);
  tw_injl_.resize(T);
  tw_acts_.resize(T);
  tw_grads_.resize(T);
  for (uint32_t t = 0; t < T; ++t) {
    const Mlp& m = towers_.tower(t);
    tw_tin_[t].resize(size_t{rows} * m.in(0));
    tw_dtin_[t].resize(size_t{rows} * m.in(0));
    tw_injf_[t].resize(size_t{rows} * towers_.first(t));
    tw_injl_[t].resize(size_t{rows} * towers_.last(t));
    tw_acts_[t].resize(m.num_layers());
    tw_grads_[t].resize(m.num_layers());
    for (uint32_t l = 0; l < m.num_layers(); ++l) {
      tw_acts_[t][l].resize(size_t{rows} * m.out(l));
      tw_grads_[t][l].resize(size_t{rows} * m.out(l));
    }
  }
  if (!options_.HasInteractions()) return;
  dmi_.resize(size_t{rows} * (mlp_.in(0) - dmi_begin_));
  if (options_.dot) mlp_in_.resize(size_t{rows} * mlp_.in(0));
  const size_t cells = size_t{rows} * input_width_;
  cross_x_.resize(cross_.layers);
  cross_u_.resize(cross_.layers);
  cross_gu_.resize(cross_.layers);
  cross_low_.resize(cross_.rank > 0 ? cross_.layers : 0);
  cross_glow_.resize(cross_low_.size());
  for (uint32_t l = 0; l < cross_.layers; ++l) {
    cross_x_[l].resize(cells);
    cross_u_[l].resize(cells);
    cross_gu_[l].resize(cells);
    if (cross_.rank > 0) {
      cross_low_[l].resize(size_t{rows} * cross_.rank);
      cross_glow_[l].resize(size_t{rows} * cross_.rank);
    }
  }
  const uint32_t ML = mix_.layers, K = mix_.experts, R = mix_.rank;
  for (auto* v : {&mix_x_, &mix_a_, &mix_c_, &mix_u_, &mix_gate_, &mix_du_, &mix_dc_, &mix_da_,
                  &mix_dgate_, &mix_dub_}) {
    v->resize(ML);
  }
  for (uint32_t l = 0; l < ML; ++l) {
    mix_x_[l].resize(cells);
    mix_dub_[l].resize(cells);
    mix_u_[l].resize(K * cells);
    mix_du_[l].resize(K * cells);
    for (auto* v : {&mix_a_, &mix_c_, &mix_dc_, &mix_da_}) (*v)[l].resize(size_t{K} * rows * R);
    mix_gate_[l].resize(size_t{rows} * K);
    mix_dgate_[l].resize(size_t{rows} * K);
  }
  if (ML > 0) {
    mix_g_.resize(cells);
    mix_acc_.resize(cells);
    mix_tmp_.resize(cells);
  }
  if (cross_.layers > 0 || ML > 0) {
    cross_g_.resize(cells);
    cross_t_.resize(cells);
    cross_acc_.resize(cells);
  }
  if (bottom_.num_layers() > 0) {
    bottom_in_.resize(size_t{rows} * schema_.num_dense);
    bottom_gz_.resize(size_t{rows} * dense_width_);
    bottom_acts_.resize(bottom_.num_layers());
    bottom_grads_.resize(bottom_.num_layers());
    for (uint32_t l = 0; l < bottom_.num_layers(); ++l) {
      bottom_acts_[l].resize(size_t{rows} * bottom_.out(l));
      bottom_grads_[l].resize(size_t{rows} * bottom_.out(l));
    }
  }
}

}  // namespace ctrbox
