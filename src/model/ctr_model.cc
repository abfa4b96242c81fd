#include "model/ctr_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "gpu/exec.h"
#include "util/blas.h"
#include "util/hash.h"
#include "util/random.h"

namespace ctrbox {
namespace {

float Sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// Binary cross-entropy from the logit, stable for large |z|.
double LogLoss(float z, float y) {
  double zd = z;
  return std::max(zd, 0.0) - zd * y + std::log1p(std::exp(-std::fabs(zd)));
}

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

std::string ModelOptions::SlotDimsError(uint32_t num_slots) const {
  if (slot_dims.empty()) return "";
  std::vector<bool> seen;
  for (const SlotDims& g : slot_dims) {
    if (g.dim == 0 || g.dim > 4096) {
      return fmt::format("model.slot_dims: a dimension must be in [1, 4096], not {}", g.dim);
    }
    if (g.slots.empty()) return "model.slot_dims: a group names no slot";
    for (uint32_t s : g.slots) {
      if (num_slots > 0 && s >= num_slots) {
        return fmt::format("model.slot_dims names slot {} but the data has {} slots (0 to {})", s,
                           num_slots, num_slots - 1);
      }
      if (seen.size() <= s) seen.resize(s + 1);
      if (seen[s]) return fmt::format("model.slot_dims names slot {} twice", s);
      seen[s] = true;
    }
  }
  const size_t tables = TableDims().size();
  if (tables > kMaxTables) {
    return fmt::format("model.slot_dims gives {} dimensions (with model.embedding_dim); at most {}",
                       tables, kMaxTables);
  }
  if (tables > 1 && (fm || dot)) {
    return fmt::format(
        "{} needs one embedding dimension for every slot, but model.slot_dims gives {} (with "
        "model.embedding_dim's, which counts even when slot_dims names every slot: to give "
        "every slot one width, set model.embedding_dim instead)",
        fm ? "model.fm" : "model.dot", tables);
  }
  for (const auto& group : shared_slots) {
    for (uint32_t s : group) {
      if (SlotTable(s) != SlotTable(group.front())) {
        return fmt::format(
            "model.shared_slots groups slots {} and {}, which share one table, "
            "but model.slot_dims gives them dimensions {} and {}",
            group.front(), s, SlotDim(group.front()), SlotDim(s));
      }
    }
  }
  return "";
}

std::string TowersError(const ModelOptions& m, int64_t num_dense) {
  if (m.towers > 16) return fmt::format("model.towers is at most 16, not {}", m.towers);
  if (!m.tower_mlp.empty()) {
    if (m.tower_mlp.size() != m.towers) {
      return fmt::format("model.tower_mlp has {} shapes but model.towers is {}: one per tower",
                         m.tower_mlp.size(), m.towers);
    }
    for (const auto& shape : m.tower_mlp) {
      if (shape.empty()) return "every shape of model.tower_mlp needs a hidden layer";
    }
  } else if (m.HasTowers() && m.mlp.empty()) {
    return "model.towers needs hidden layers in model.mlp (every tower is an MLP of its widths)";
  }
  if (m.dense_groups.empty()) return "";
  if (!m.HasTowers()) {
    return "model.dense_groups is set but model.towers is not 2 or more (it would be ignored)";
  }
  if (m.dense_groups.size() != m.towers) {
    return fmt::format("model.dense_groups has {} groups but model.towers is {}: one per tower",
                       m.dense_groups.size(), m.towers);
  }
  if (!m.bottom_mlp.empty()) {
    return "model.dense_groups cannot be combined with model.bottom_mlp: the bottom MLP turns "
           "every dense feature into z, so no tower keeps dense columns of its own";
  }
  if (num_dense == 0) {
    return "model.dense_groups is set but the data has no dense features (the groups' columns)";
  }
  std::vector<bool> seen;
  for (const auto& group : m.dense_groups) {
    if (group.empty()) return "a group of model.dense_groups is empty";
    for (uint32_t d : group) {
      if (num_dense != kUnknownDense && d >= num_dense) {
        return fmt::format(
            "model.dense_groups names dense feature {} but the data has {} (0 to {})", d, num_dense,
            num_dense - 1);
      }
      if (seen.size() <= d) seen.resize(d + 1);
      if (seen[d]) return fmt::format("model.dense_groups names dense feature {} twice", d);
      seen[d] = true;
    }
  }
  return "";
}

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

void CtrModel::BottomForward(uint32_t r0, uint32_t r1) {
  const uint32_t L = bottom_.num_layers(), D = schema_.num_dense, z = dense_width_;
  std::vector<float*> acts(L);
  for (uint32_t l = 0; l < L; ++l) acts[l] = bottom_acts_[l].data() + size_t{r0} * bottom_.out(l);
  bottom_.Forward(params_.data() + bottom_base_, bottom_in_.data() + size_t{r0} * D,
                  static_cast<int>(r1 - r0), acts.data(), nullptr);
  for (uint32_t r = 0; r < r1 - r0; ++r) {
    std::memcpy(x_.data() + (size_t{r0} + r) * input_width_, acts[L - 1] + size_t{r} * z,
                z * sizeof(float));
  }
}

void CtrModel::BottomBackward(uint32_t r0, uint32_t r1) {
  const uint32_t L = bottom_.num_layers();
  std::vector<const float*> acts(L);
  std::vector<float*> grads(L);
  for (uint32_t l = 0; l < L; ++l) {
    acts[l] = bottom_acts_[l].data() + size_t{r0} * bottom_.out(l);
    grads[l] = bottom_grads_[l].data() + size_t{r0} * bottom_.out(l);
  }
  bottom_.BackwardFromTop(params_.data() + bottom_base_, acts.data(),
                          bottom_gz_.data() + size_t{r0} * dense_width_, static_cast<int>(r1 - r0),
                          grads.data());
}

TowerRows CtrModel::TowerBlock(uint32_t r0) {
  TowerRows p;
  p.base = MlpInput() + size_t{r0} * mlp_.in(0);
  for (uint32_t t = 0; t < towers_.count(); ++t) {
    const Mlp& m = towers_.tower(t);
    p.tin.push_back(tw_tin_[t].data() + size_t{r0} * m.in(0));
    p.dtin.push_back(tw_dtin_[t].data() + size_t{r0} * m.in(0));
    p.inj_first.push_back(tw_injf_[t].data() + size_t{r0} * towers_.first(t));
    p.inj_last.push_back(tw_injl_[t].data() + size_t{r0} * towers_.last(t));
    p.acts.emplace_back();
    p.grads.emplace_back();
    for (uint32_t l = 0; l < m.num_layers(); ++l) {
      p.acts.back().push_back(tw_acts_[t][l].data() + size_t{r0} * m.out(l));
      p.grads.back().push_back(tw_grads_[t][l].data() + size_t{r0} * m.out(l));
    }
    p.cols.push_back(towers_.cols(t).data());
    p.inv.push_back(towers_.inv(t).data());
  }
  return p;
}

MixRows CtrModel::MixBlock(uint32_t r0) {
  const uint32_t W = mix_.width, R = mix_.rank, K = mix_.experts;
  MixRows p;
  p.x0 = x_.data() + size_t{r0} * W;
  auto at = [](std::vector<std::vector<float>>& v, size_t off) {
    std::vector<float*> out;
    for (auto& b : v) out.push_back(b.data() + off);
    return out;
  };
  const size_t ow = size_t{r0} * W, orr = size_t{r0} * R, ok = size_t{r0} * K;
  p.x = at(mix_x_, ow);
  p.a = at(mix_a_, orr);
  p.c = at(mix_c_, orr);
  p.u = at(mix_u_, ow);
  p.gate = at(mix_gate_, ok);
  p.du = at(mix_du_, ow);
  p.dc = at(mix_dc_, orr);
  p.da = at(mix_da_, orr);
  p.dgate = at(mix_dgate_, ok);
  p.dub = at(mix_dub_, ow);
  p.g = mix_g_.data() + ow;
  p.acc = mix_acc_.data() + ow;
  p.tmp = mix_tmp_.data() + ow;
  p.kstride_r = size_t{capacity_} * R;
  p.kstride_w = size_t{capacity_} * W;
  return p;
}

const float* CtrModel::CrossOutput() const {
  if (mix_.layers > 0) return mix_x_[mix_.layers - 1].data();
  return CrossInput(cross_.layers);
}

const float* CtrModel::CrossInput(uint32_t l) const {
  return l == 0 ? x_.data() : cross_x_[l - 1].data();
}

const float* CtrModel::MlpInput() const {
  if (options_.dot) return mlp_in_.data();
  return CrossOutput();
}

void CtrModel::InteractionsForward(uint32_t r0, uint32_t r1) {
  const uint32_t W0 = input_width_, S = schema_.num_slots;
  const uint32_t dim = options_.embedding_dim, rows = r1 - r0;
  // The dot vectors start at column vec0: z (with a bottom MLP), then the slots' embeddings.
  const uint32_t shift = bottom_.num_layers() > 0 ? 1 : 0, nvec = S + shift;
  const uint32_t vec0 = dense_width_ - shift * dim;
  const size_t off = size_t{r0} * W0, cells = size_t{rows} * W0;
  const float* x0 = x_.data() + off;
  for (uint32_t l = 0; l < cross_.layers; ++l) {
    const float* xl = CrossInput(l) + off;
    float* u = cross_u_[l].data() + off;
    float* xn = cross_x_[l].data() + off;
    if (const uint32_t R = cross_.rank; R > 0) {  // u = (x_l V_l) U_l
      float* low = cross_low_[l].data() + size_t{r0} * R;
      blas::Sgemm(false, false, static_cast<int>(rows), R, W0, 1.0f, xl, W0,
                  params_.data() + cross_.w_offset(l), R, 0.0f, low, R);
      blas::Sgemm(false, false, static_cast<int>(rows), W0, R, 1.0f, low, R,
                  params_.data() + cross_.u_offset(l), W0, 0.0f, u, W0);
    } else {
      blas::Sgemm(false, false, static_cast<int>(rows), W0, W0, 1.0f, xl, W0,
                  params_.data() + cross_.w_offset(l), W0, 0.0f, u, W0);
    }
    const float* b = params_.data() + cross_.b_offset(l);
    for (size_t i = 0; i < cells; ++i) xn[i] = CrossForward(x0[i], xl[i], &u[i], b[i % W0]);
  }
  if (mix_.layers > 0) {
    HostExec e;  // this thread, as every row block's work
    MixForward(e, mix_, params_.data(), MixBlock(r0), rows);
  }
  if (!options_.dot) return;
  const uint32_t in = mlp_.in(0);
  const float* xL = CrossOutput() + off;
  for (uint32_t r = 0; r < rows; ++r) {
    float* m = mlp_in_.data() + (size_t{r0} + r) * in;
    std::memcpy(m, xL + size_t{r} * W0, W0 * sizeof(float));
    const float* vecs = x0 + size_t{r} * W0 + vec0;
    uint32_t p = W0;
    for (uint32_t i = 0; i < nvec; ++i) {
      for (uint32_t j = i + 1; j < nvec; ++j) m[p++] = DotValue(vecs, dim, i, j);
    }
  }
}

void CtrModel::InteractionsBackward(uint32_t r0, uint32_t r1) {
  const uint32_t W0 = input_width_, S = schema_.num_slots;
  const uint32_t dim = options_.embedding_dim, E = emb_width_, rows = r1 - r0;
  const uint32_t shift = bottom_.num_layers() > 0 ? 1 : 0, nvec = S + shift;
  const uint32_t vec0 = dense_width_ - shift * dim;
  const uint32_t mw = mlp_.in(0) - dmi_begin_;  // a row of dmi_
  const size_t off = size_t{r0} * W0, cells = size_t{rows} * W0;
  const float* x0 = x_.data() + off;
  const float* dmi = dmi_.data() + size_t{r0} * mw;
  // The gradient at x0 from the MLP's side: through the cross layers (x0 enters each layer's
  // product and the chain's start), or as the MLP sent it (columns from dmi_begin_ on); base
  // points at the dot vectors' first column.
  const float* base = dmi + (vec0 - dmi_begin_);
  size_t base_stride = mw;
  if (cross_.layers > 0) {
    float *g = cross_g_.data() + off, *t = cross_t_.data() + off, *acc = cross_acc_.data() + off;
    for (uint32_t r = 0; r < rows; ++r) {
      std::memcpy(g + size_t{r} * W0, dmi + size_t{r} * mw, W0 * sizeof(float));
    }
    std::fill(acc, acc + cells, 0.0f);
    for (uint32_t l = cross_.layers; l-- > 0;) {
      const float* u = cross_u_[l].data() + off;
      float* gu = cross_gu_[l].data() + off;
      for (size_t i = 0; i < cells; ++i) {
        gu[i] = g[i] * x0[i];
        acc[i] += g[i] * u[i];
      }
      if (const uint32_t R = cross_.rank; R > 0) {  // t = (gu U_l^T) V_l^T
        float* glow = cross_glow_[l].data() + size_t{r0} * R;
        blas::Sgemm(false, true, static_cast<int>(rows), R, W0, 1.0f, gu, W0,
                    params_.data() + cross_.u_offset(l), W0, 0.0f, glow, R);
        blas::Sgemm(false, true, static_cast<int>(rows), W0, R, 1.0f, glow, R,
                    params_.data() + cross_.w_offset(l), R, 0.0f, t, W0);
      } else {
        blas::Sgemm(false, true, static_cast<int>(rows), W0, W0, 1.0f, gu, W0,
                    params_.data() + cross_.w_offset(l), W0, 0.0f, t, W0);
      }
      for (size_t i = 0; i < cells; ++i) g[i] += t[i];
    }
    for (size_t i = 0; i < cells; ++i) g[i] += acc[i];
    base = g + vec0;
    base_stride = W0;
  }
  if (mix_.layers > 0) {
    HostExec e;
    float* g = cross_g_.data() + off;
    MixBackward(e, mix_, params_.data(), MixBlock(r0), rows, dmi, mw, g);
    base = g + vec0;
    base_stride = W0;
  }
  if (!options_.fm && !options_.dot) {
    // The gradient as it reached the input: z's (with a bottom MLP), then the embeddings'
    // columns of every slot, of whatever dimension (model.slot_dims).
    for (uint32_t r = 0; r < rows; ++r) {
      const float* b = base + r * base_stride;
      if (shift > 0)
        std::memcpy(bottom_gz_.data() + (size_t{r0} + r) * dim, b, dim * sizeof(float));
      std::memcpy(dx_.data() + (size_t{r0} + r) * E, b + shift * dim, E * sizeof(float));
    }
    return;
  }
  // Per element this is EmbInputGrad (the GPU step's form), reorganised so that the inner
  // loops run over the embedding dimension: every element still adds the same terms in the
  // same order (the dot products' share from 0 over the other slots in slot order, then the
  // FM term from the slot sum in slot order), so the results are the same bits.
  std::vector<float> sums(dim), share(dim);
  for (uint32_t r = 0; r < rows; ++r) {
    const float* vecs = x0 + size_t{r} * W0 + vec0;
    const float* emb = vecs + size_t{shift} * dim;  // the slots'
    const float* ddot = options_.dot ? dmi + size_t{r} * mw + (W0 - dmi_begin_) : nullptr;
    const float dlogit = dlogit_[r0 + r];
    float* dx = dx_.data() + (size_t{r0} + r) * E;
    const float* b = base + r * base_stride;
    if (options_.fm) {
      std::fill(sums.begin(), sums.end(), 0.0f);
      for (uint32_t t = 0; t < S; ++t) {
        for (uint32_t k = 0; k < dim; ++k) sums[k] += emb[size_t{t} * dim + k];
      }
    }
    for (uint32_t v = 0; v < nvec; ++v) {
      if (ddot != nullptr) {
        std::fill(share.begin(), share.end(), 0.0f);
        for (uint32_t t = 0; t < nvec; ++t) {
          if (t == v) continue;
          const float w = ddot[v < t ? DotPairIndex(v, t, nvec) : DotPairIndex(t, v, nvec)];
          const float* et = vecs + size_t{t} * dim;
          for (uint32_t k = 0; k < dim; ++k) share[k] += w * et[k];
        }
      }
      // Vector 0 with a bottom MLP is z: its gradient goes to the bottom MLP.
      float* out = v < shift ? bottom_gz_.data() + (size_t{r0} + r) * dim : dx + (v - shift) * dim;
      for (uint32_t k = 0; k < dim; ++k) {
        float g = b[v * dim + k];
        if (ddot != nullptr) g += share[k];
        if (options_.fm && v >= shift) g += dlogit * (sums[k] - vecs[size_t{v} * dim + k]);
        out[k] = g;
      }
    }
  }
}

void CtrModel::BuildInputs(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                           const RowBlock& rows, uint32_t r0, uint32_t r1) {
  const uint32_t D = schema_.num_dense, S = schema_.num_slots;
  const bool weighted = pass.has_weights();
  for (uint32_t r = r0; r < r1; ++r) {
    const size_t R = size_t{mb.row_begin} + r;
    float* xr = x_.data() + size_t{r} * input_width_;
    const float* dense = pass.dense.data() + R * D;
    // The dense features into the input, or into the bottom MLP's (which writes z there).
    float* fx = bottom_.num_layers() > 0 ? bottom_in_.data() + size_t{r} * D : xr;
    for (uint32_t j = 0; j < D; ++j) {
      fx[j] = options_.dense_log1p ? std::log1p(std::max(dense[j], 0.0f)) : dense[j];
    }
    float wide = 0.0f;
    for (uint32_t s = 0; s < S; ++s) {
      const uint32_t dim = slot_dim_[s];  // the slot's table's (model.slot_dims)
      float* dst = xr + dense_width_ + slot_col_[s];
      std::memset(dst, 0, dim * sizeof(float));
      for (uint32_t p = pass.offsets[R * S + s]; p < pass.offsets[R * S + s + 1]; ++p) {
        const uint32_t l = ws.local[p];
        const float w = weighted ? pass.weights[p] : 1.0f;
        wide += w * rows.wide(l);
        if (!rows.has_emb(l)) continue;
        const float* e = rows.emb(l);
        for (uint32_t d = 0; d < dim; ++d) dst[d] += w * e[d];
      }
    }
    wide_sum_[r] = options_.wide ? wide : 0.0f;
  }
}

void CtrModel::ForwardBlock(uint32_t r0, uint32_t r1) {
  const uint32_t hidden = towers_.on() ? 0 : mlp_.num_layers() - 1;
  std::vector<float*> acts(hidden);
  for (uint32_t l = 0; l < hidden; ++l) acts[l] = acts_[l].data() + size_t{r0} * mlp_.out(l);
  if (bottom_.num_layers() > 0) BottomForward(r0, r1);
  if (cross_.layers > 0 || mix_.layers > 0 || options_.dot) InteractionsForward(r0, r1);
  if (towers_.on()) {
    HostExec e;  // this thread, as every row block's work
    TowersForward(e, towers_, params_.data(), TowerBlock(r0), r1 - r0, logits_.data() + r0);
  } else {
    mlp_.Forward(params_.data(), MlpInput() + size_t{r0} * mlp_.in(0), static_cast<int>(r1 - r0),
                 acts.data(), logits_.data() + r0);
  }
  for (uint32_t r = r0; r < r1; ++r) logits_[r] += wide_sum_[r];
  if (options_.fm) {
    const uint32_t S = schema_.num_slots, dim = options_.embedding_dim;
    for (uint32_t r = r0; r < r1; ++r) {
      logits_[r] += FmTerm(x_.data() + size_t{r} * input_width_ + dense_width_, S, dim);
    }
  }
}

StepStats CtrModel::TrainMinibatch(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                                   RowBlock* rows, const CtrAccessor& accessor, ThreadPool* pool,
                                   float* predictions) {
  const uint32_t B = mb.rows();
  StepStats stats;
  stats.loss_sum = ForwardBackward(pass, ws, mb, *rows, pool, predictions, B);

  // Phase B: weight-gradient tiles with their dense updates, and sparse updates by key chunk.
  dense_opt_.BeginStep();
  const size_t chunks = (mb.uniq.size() + kSparseChunk - 1) / kSparseChunk;
  std::vector<uint32_t> created(chunks, 0);
  RunParallel(pool, tiles_.size() + chunks, [&](size_t task, int) {
    if (task < tiles_.size()) {
      DenseTile(task, B);
      return;
    }
    const size_t c = task - tiles_.size();
    UpdateSparseChunk(pass, ws, mb, c * kSparseChunk,
                      std::min(mb.uniq.size(), (c + 1) * kSparseChunk), rows, accessor,
                      &created[c]);
  });

  for (uint32_t c : created) stats.embeddings_created += c;
  return stats;
}

double CtrModel::ForwardBackward(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                                 const RowBlock& rows, ThreadPool* pool, float* predictions,
                                 uint32_t loss_rows) {
  const uint32_t B = mb.rows();
  EnsureBuffers(std::max(B, 1u));
  const uint32_t hidden = towers_.on() ? 0 : mlp_.num_layers() - 1, D = schema_.num_dense;
  const size_t blocks = (B + kRowBlock - 1) / kRowBlock;
  std::vector<double> block_loss(blocks, 0.0);

  // Phase A (row blocks): inputs, forward, loss gradient, backward to the inputs.
  RunParallel(pool, blocks, [&](size_t blk, int) {
    const uint32_t r0 = static_cast<uint32_t>(blk * kRowBlock), r1 = std::min(B, r0 + kRowBlock);
    BuildInputs(pass, ws, mb, rows, r0, r1);
    ForwardBlock(r0, r1);
    double loss = 0;
    for (uint32_t r = r0; r < r1; ++r) {
      const float y = pass.labels[mb.row_begin + r];
      const float p = Sigmoid(logits_[r]);
      predictions[r] = p;
      loss += LogLoss(logits_[r], y);
      dlogit_[r] = (p - y) / static_cast<float>(loss_rows);
    }
    block_loss[blk] = loss;
    if (towers_.on()) {
      // Into the embedding columns (dx_), or with interactions the MLP input's from dmi_begin_.
      HostExec e;
      const bool inter = options_.HasInteractions();
      const uint32_t begin = inter ? dmi_begin_ : D;
      float* dbase = inter ? dmi_.data() + size_t{r0} * (mlp_.in(0) - dmi_begin_)
                           : dx_.data() + size_t{r0} * (input_width_ - D);
      TowersBackward(e, towers_, params_.data(), TowerBlock(r0), r1 - r0, dlogit_.data() + r0,
                     dbase, begin);
      if (!inter) return;
      InteractionsBackward(r0, r1);
      if (bottom_.num_layers() > 0) BottomBackward(r0, r1);
      return;
    }
    std::vector<const float*> acts(hidden);
    std::vector<float*> grads(hidden);
    for (uint32_t l = 0; l < hidden; ++l) {
      acts[l] = acts_[l].data() + size_t{r0} * mlp_.out(l);
      grads[l] = grads_hidden_[l].data() + size_t{r0} * mlp_.out(l);
    }
    if (!options_.HasInteractions()) {
      const uint32_t emb_width = input_width_ - D;
      mlp_.Backward(params_.data(), acts.data(), dlogit_.data() + r0, static_cast<int>(r1 - r0),
                    grads.data(), dx_.data() + size_t{r0} * emb_width, D);
      return;
    }
    const uint32_t mw = mlp_.in(0) - dmi_begin_;
    mlp_.Backward(params_.data(), acts.data(), dlogit_.data() + r0, static_cast<int>(r1 - r0),
                  grads.data(), dmi_.data() + size_t{r0} * mw, dmi_begin_);
    InteractionsBackward(r0, r1);
    if (bottom_.num_layers() > 0) BottomBackward(r0, r1);
  });

  double loss = 0;
  for (double l : block_loss) loss += l;
  return loss;
}

void CtrModel::UpdateTile(size_t matrix, uint32_t rows, uint32_t ld, size_t bias, uint32_t c0,
                          uint32_t c1) {
  for (uint32_t i = 0; i < rows; ++i) {
    dense_opt_.Update(params_.data(), grads_.data(), matrix + size_t{i} * ld + c0, c1 - c0);
  }
  if (bias != kNoBias) dense_opt_.Update(params_.data(), grads_.data(), bias + c0, c1 - c0);
}

void CtrModel::DenseTile(size_t t, uint32_t batch_rows) {
  DenseTileGrad(t, batch_rows);
  DenseTileUpdate(t);
}

void CtrModel::DenseTileGrad(size_t t, uint32_t batch_rows) {
  const Tile& tile = tiles_[t];
  const uint32_t l = tile.layer, c0 = tile.c0, c1 = tile.c1, width = c1 - c0;
  const int B = static_cast<int>(batch_rows);
  switch (tile.kind) {
    case TileKind::kMlp: {
      const uint32_t last = mlp_.num_layers() - 1;
      const float* xin = l == 0 ? MlpInput() : acts_[l - 1].data();
      const float* g = l == last ? dlogit_.data() : grads_hidden_[l].data();
      mlp_.TileGrad(l, c0, c1, xin, g, B, grads_.data());
      return;
    }
    case TileKind::kTower: {
      const uint32_t t = tile.tower;
      const float* xin = l == 0 ? tw_tin_[t].data() : tw_acts_[t][l - 1].data();
      towers_.tower(t).TileGrad(l, c0, c1, xin, tw_grads_[t][l].data(), B,
                                grads_.data() + towers_.base(t));
      return;
    }
    case TileKind::kTowerOut: {  // dw_t = hL_t^T dlogit, db = the sum of dlogit in row order
      for (uint32_t t = 0; t < towers_.count(); ++t) {
        const uint32_t last = towers_.last(t);
        blas::Sgemm(true, false, static_cast<int>(last), 1, B, 1.0f,
                    tw_acts_[t][towers_.layers(t) - 1].data(), static_cast<int>(last),
                    dlogit_.data(), 1, 0.0f, grads_.data() + towers_.out_w() + towers_.out_begin(t),
                    1);
      }
      float db = 0.0f;
      for (uint32_t r = 0; r < batch_rows; ++r) db += dlogit_[r];
      grads_[towers_.out_b()] = db;
      return;
    }
    case TileKind::kMixExpert: {
      HostExec e;
      MixExpertGrads(e, mix_, MixBlock(0), batch_rows, l, tile.tower, grads_.data());
      return;
    }
    case TileKind::kMixLayer: {
      HostExec e;
      MixLayerGrads(e, mix_, MixBlock(0), batch_rows, l, grads_.data());
      return;
    }
    case TileKind::kBottom: {
      const float* xin = l == 0 ? bottom_in_.data() : bottom_acts_[l - 1].data();
      bottom_.TileGrad(l, c0, c1, xin, bottom_grads_[l].data(), B, grads_.data() + bottom_base_);
      return;
    }
    case TileKind::kCross: {
      // dW_l = x_l^T gu_l (full rank) or dU_l = (x_l V_l)^T gu_l, db_l = column sums of gu_l.
      const uint32_t W0 = cross_.width, R = cross_.rank;
      const float* gu = cross_gu_[l].data();
      const uint32_t k = R > 0 ? R : W0;  // the matrix's rows
      const float* in = R > 0 ? cross_low_[l].data() : CrossInput(l);
      const size_t w = R > 0 ? cross_.u_offset(l) : cross_.w_offset(l);
      blas::Sgemm(true, false, k, width, B, 1.0f, in, k, gu + c0, W0, 0.0f, grads_.data() + w + c0,
                  W0);
      float* db = grads_.data() + cross_.b_offset(l) + c0;
      std::memset(db, 0, width * sizeof(float));
      for (uint32_t r = 0; r < batch_rows; ++r) {
        const float* gr = gu + size_t{r} * W0 + c0;
        for (uint32_t j = 0; j < width; ++j) db[j] += gr[j];
      }
      return;
    }
    case TileKind::kCrossV: {  // dV_l = x_l^T (gu_l U_l^T): columns [c0, c1) of r
      const uint32_t W0 = cross_.width, R = cross_.rank;
      blas::Sgemm(true, false, W0, width, B, 1.0f, CrossInput(l), W0, cross_glow_[l].data() + c0, R,
                  0.0f, grads_.data() + cross_.w_offset(l) + c0, R);
      return;
    }
  }
}

void CtrModel::DenseTileUpdate(size_t t) {
  const Tile& tile = tiles_[t];
  const uint32_t l = tile.layer, c0 = tile.c0, c1 = tile.c1;
  switch (tile.kind) {
    case TileKind::kMlp:
      UpdateTile(mlp_.w_offset(l), mlp_.in(l), mlp_.out(l), mlp_.b_offset(l), c0, c1);
      return;
    case TileKind::kBottom:
      UpdateTile(bottom_base_ + bottom_.w_offset(l), bottom_.in(l), bottom_.out(l),
                 bottom_base_ + bottom_.b_offset(l), c0, c1);
      return;
    case TileKind::kTower: {
      const Mlp& m = towers_.tower(tile.tower);
      const size_t base = towers_.base(tile.tower);
      UpdateTile(base + m.w_offset(l), m.in(l), m.out(l), base + m.b_offset(l), c0, c1);
      return;
    }
    case TileKind::kTowerOut:
      UpdateTile(towers_.out_w(), towers_.out_width(), 1, towers_.out_b(), 0, 1);
      return;
    case TileKind::kMixExpert:
      dense_opt_.Update(params_.data(), grads_.data(), mix_.v_offset(l, tile.tower),
                        mix_.expert_params());
      return;
    case TileKind::kMixLayer:
      dense_opt_.Update(params_.data(), grads_.data(), mix_.g_offset(l),
                        size_t{mix_.width} * (mix_.experts + 1));
      return;
    case TileKind::kCross: {
      const uint32_t R = cross_.rank;
      UpdateTile(R > 0 ? cross_.u_offset(l) : cross_.w_offset(l), R > 0 ? R : cross_.width,
                 cross_.width, cross_.b_offset(l), c0, c1);
      return;
    }
    case TileKind::kCrossV:
      UpdateTile(cross_.w_offset(l), cross_.width, cross_.rank, kNoBias, c0, c1);
      return;
  }
}

void CtrModel::UpdateSparseChunk(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                                 size_t u0, size_t u1, RowBlock* rows, const CtrAccessor& accessor,
                                 uint32_t* created) {
  std::vector<float> record(SparseRecordWidth());
  for (size_t u = u0; u < u1; ++u) {
    SparseRecord(pass, ws, mb, u, record.data());
    if (ApplyRecord(mb.uniq[u], record.data(), rows, accessor)) ++*created;
  }
}

void CtrModel::SparseRecord(const Batch& pass, const WorkingSet& ws, const Minibatch& mb, size_t u,
                            float* record) const {
  const uint32_t S = schema_.num_slots, E = emb_width_, rd = row_dim_;
  const bool weighted = pass.has_weights();
  float* g = record;
  std::fill(g, g + rd, 0.0f);  // a smaller table's key leaves the rest zero
  float g_wide = 0.0f, clicks = 0.0f;
  for (uint32_t q = mb.occ_begin[u]; q < mb.occ_begin[u + 1]; ++q) {
    const uint32_t p = mb.key_begin + mb.occ[q];
    const uint32_t cell = ws.cell[p], r = cell / S, s = cell - r * S;
    const float w = weighted ? pass.weights[p] : 1.0f;
    const uint32_t dim = slot_dim_[s];
    const float* gx = dx_.data() + size_t{r} * E + slot_col_[s];
    for (uint32_t d = 0; d < dim; ++d) g[d] += w * gx[d];
    g_wide += w * dlogit_[r];
    clicks += pass.labels[mb.row_begin + r];
  }
  record[rd] = g_wide;
  record[rd + 1] = static_cast<float>(mb.occ_begin[u + 1] - mb.occ_begin[u]);
  record[rd + 2] = clicks;
}

bool CtrModel::ApplyRecord(uint32_t l, const float* record, RowBlock* rows,
                           const CtrAccessor& accessor) {
  const uint32_t rd = row_dim_;
  rows->show(l) += record[rd + 1];
  rows->click(l) += record[rd + 2];
  rows->unseen(l) = 0;
  if (rows->has_emb(l)) {
    // The key's table's dimension and state (model.slot_dims; else every row's).
    const uint64_t key = rows->key(l);
    const uint32_t dim = rows->layout().DimOf(key);
    sparse_opt_.Update(rows->emb(l), rows->emb_state(l), record, dim);
    // x <- Q(x + update): u drawn from (seed, key, step), independent of the threads.
    quant_.Round(rows->emb(l), dim, options_.quant.rounding, quant_seed_,
                 Mix64(key) + dense_opt_.step());
    // The state likewise, on another stream (a no-op unless state_bits is 16).
    sparse_opt_.RoundState(rows->emb_state(l), rows->layout().StateOf(key),
                           quant_seed_ ^ kStateSalt, Mix64(key) + dense_opt_.step());
  }
  if (options_.wide) {
    float g_wide = record[rd];
    sparse_opt_.Update(&rows->wide(l), rows->wide_state(l), &g_wide, 1);
  }
  return accessor.MaybeCreateEmbedding(rows, l);
}

// ---- the distributed step ---------------------------------------------------------------------

StepStats CtrModel::ComputeGradients(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                                     const RowBlock& rows, ThreadPool* pool, float* predictions,
                                     uint32_t global_rows, std::vector<float>* records) {
  const uint32_t B = mb.rows();
  StepStats stats;
  stats.loss_sum = ForwardBackward(pass, ws, mb, rows, pool, predictions, global_rows);
  if (B == 0) {
    std::fill(grads_.begin(), grads_.end(), 0.0f);
  } else {
    RunParallel(pool, tiles_.size(), [&](size_t t, int) { DenseTileGrad(t, B); });
  }
  const uint32_t width = SparseRecordWidth();
  records->resize(mb.uniq.size() * width);
  const size_t chunks = (mb.uniq.size() + kSparseChunk - 1) / kSparseChunk;
  RunParallel(pool, chunks, [&](size_t c, int) {
    const size_t u1 = std::min(mb.uniq.size(), (c + 1) * kSparseChunk);
    for (size_t u = c * kSparseChunk; u < u1; ++u) {
      SparseRecord(pass, ws, mb, u, records->data() + u * width);
    }
  });
  return stats;
}

void CtrModel::ApplyDense(ThreadPool* pool) {
  dense_opt_.BeginStep();
  RunParallel(pool, tiles_.size(), [&](size_t t, int) { DenseTileUpdate(t); });
}

uint32_t CtrModel::ApplySparse(const uint32_t* local, const float* records, size_t n,
                               RowBlock* rows, const CtrAccessor& accessor, ThreadPool* pool) {
  const uint32_t width = SparseRecordWidth();
  const size_t chunks = (n + kSparseChunk - 1) / kSparseChunk;
  std::vector<uint32_t> created(chunks, 0);
  RunParallel(pool, chunks, [&](size_t c, int) {
    const size_t i1 = std::min(n, (c + 1) * kSparseChunk);
    for (size_t i = c * kSparseChunk; i < i1; ++i) {
      created[c] += ApplyRecord(local[i], records + i * width, rows, accessor);
    }
  });
  uint32_t total = 0;
  for (uint32_t c : created) total += c;
  return total;
}

void CtrModel::Predict(const Batch& examples, const WorkingSet& ws, const Minibatch& mb,
                       const RowBlock& rows, ThreadPool* pool, float* predictions) {
  const uint32_t B = mb.rows();
  EnsureBuffers(B);
  const size_t blocks = (B + kRowBlock - 1) / kRowBlock;
  RunParallel(pool, blocks, [&](size_t blk, int) {
    const uint32_t r0 = static_cast<uint32_t>(blk * kRowBlock), r1 = std::min(B, r0 + kRowBlock);
    BuildInputs(examples, ws, mb, rows, r0, r1);
    ForwardBlock(r0, r1);
    for (uint32_t r = r0; r < r1; ++r) predictions[r] = Sigmoid(logits_[r]);
  });
}

}  // namespace ctrbox
