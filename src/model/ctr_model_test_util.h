// The CtrModel tests' fixture (ctr_model_test.cc, ctr_model_predict_test.cc): a small pass,
// a small model, its working set and rows, and the model shapes every check runs.
#ifndef CTRBOX_MODEL_CTR_MODEL_TEST_UTIL_H_
#define CTRBOX_MODEL_CTR_MODEL_TEST_UTIL_H_

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "model/ctr_model.h"
#include "table/accessor.h"
#include "util/random.h"
#include "working/working_set.h"

namespace ctrbox::model_test {

constexpr Schema kSchema{3, 2};

inline Batch MakePass(size_t rows, uint64_t seed, bool weights) {
  Random rng(seed);
  Batch b;
  b.Reset(kSchema);
  BatchBuilder builder(&b);
  for (size_t r = 0; r < rows; ++r) {
    builder.BeginRow(rng.Uniform() < 0.4 ? 1.0f : 0.0f);
    builder.SetDense(0, static_cast<float>(rng.Below(20)));
    builder.SetDense(1, static_cast<float>(rng.Below(3)) - 1.0f);  // negatives clip to 0
    for (uint32_t s = 0; s < kSchema.num_slots; ++s) {
      uint64_t n = rng.Below(3);  // 0..2 keys, shared across rows
      for (uint64_t k = 0; k < n; ++k) {
        builder.AddKey(s, rng.Below(15), weights ? 0.5f + rng.UniformFloat() : 1.0f);
      }
    }
    builder.EndRow();
  }
  return b;
}

inline ModelOptions SmallModel(QuantOptions quant = {}) {
  ModelOptions o;
  o.embedding_dim = 4;
  o.mlp = {8, 4};
  o.wide = true;
  o.quant = quant;
  return o;
}

struct Fixture {
  Fixture(OptimizerOptions sparse, OptimizerOptions dense, bool weights, size_t batch,
          QuantOptions quant = {})
      : Fixture(sparse, dense, weights, batch, SmallModel(quant)) {}
  Fixture(OptimizerOptions sparse, OptimizerOptions dense, bool weights, size_t batch,
          ModelOptions options, size_t pass_rows = 40)
      : model(kSchema, options, sparse, dense, 7),
        pass(MakePass(pass_rows, 9, weights)),
        accessor(model.value_layout(), AccessorOptions{0.1f, 1.0f, 0.0f, 0.5f, 3}),
        rows(model.value_layout()) {
    // Keys as the readers hand them to the model (with model.slot_dims: tagged with tables).
    ModelKeys(options.hashing, options.KeyTableMap(), &pass);
    BuildWorkingSet(pass, batch, nullptr, &ws);
    rows.Resize(ws.keys.size());
    for (size_t i = 0; i < ws.keys.size(); ++i) accessor.InitRow(&rows, i, ws.keys[i]);
    for (size_t i = 0; i < ws.keys.size(); ++i)
      rows.wide(i) = 0.1f * static_cast<float>(i % 5) - 0.2f;
  }
  CtrModel model;
  Batch pass;
  CtrAccessor accessor;
  WorkingSet ws;
  RowBlock rows;
};

inline double MeanLoss(Fixture& f, const RowBlock& rows) {
  const Minibatch& mb = f.ws.batches[0];
  std::vector<float> p(mb.rows());
  f.model.Predict(f.pass, f.ws, mb, rows, nullptr, p.data());
  double loss = 0;
  for (uint32_t r = 0; r < mb.rows(); ++r) {
    double y = f.pass.labels[mb.row_begin + r];
    loss -= y * std::log(double(p[r])) + (1 - y) * std::log(1 - double(p[r]));
  }
  return loss / mb.rows();
}

// The model shapes the gradient checks run: the plain MLP and every interaction, alone and
// composed.
inline std::vector<std::pair<std::string, ModelOptions>> Shapes() {
  std::vector<std::pair<std::string, ModelOptions>> shapes;
  shapes.emplace_back("mlp", SmallModel());
  ModelOptions fm = SmallModel();
  fm.fm = true;
  shapes.emplace_back("fm", fm);
  ModelOptions dot = SmallModel();
  dot.dot = true;
  shapes.emplace_back("dot", dot);
  ModelOptions cross = SmallModel();
  cross.cross_layers = 2;
  shapes.emplace_back("cross", cross);
  ModelOptions low_rank = SmallModel();
  low_rank.cross_layers = 2;
  low_rank.cross_rank = 3;
  low_rank.mlp = {};  // no kinks: the cubic cross terms make finite differences across ReLUs poor
  shapes.emplace_back("cross rank 3, no hidden layer", low_rank);
  ModelOptions dlrm = SmallModel();  // DLRM: a bottom MLP whose z joins the dots
  dlrm.dot = true;
  dlrm.bottom_mlp = {6, 4};
  shapes.emplace_back("dot + bottom MLP", dlrm);
  ModelOptions bottom_cross = SmallModel();  // z into cross layers, FM over the slots only
  bottom_cross.bottom_mlp = {4};
  bottom_cross.cross_layers = 1;
  bottom_cross.fm = true;
  bottom_cross.dot = true;
  bottom_cross.mlp = {};
  shapes.emplace_back("bottom MLP + cross + fm + dot, no hidden layer", bottom_cross);
  ModelOptions all = SmallModel();
  all.fm = all.dot = true;
  all.cross_layers = 1;
  all.mlp = {};  // no hidden layer: the interactions feed the output layer directly
  shapes.emplace_back("fm+dot+cross, no hidden layer", all);
  ModelOptions mix = SmallModel();  // DCN-Mix: 3 low-rank experts per cross layer
  mix.cross_layers = 2;
  mix.cross_rank = 2;
  mix.cross_experts = 3;
  mix.mlp = {};
  shapes.emplace_back("2 mixture cross layers of 3 experts, no hidden layer", mix);
  // With a bottom MLP, dots and FM; no hidden layer (a kink of one there moves the slope less
  // than the one-sided differences can see beside the gates' curvature).
  ModelOptions mix_all = SmallModel();
  mix_all.cross_layers = 1;
  mix_all.cross_rank = 3;
  mix_all.cross_experts = 2;
  mix_all.bottom_mlp = {4};
  mix_all.dot = mix_all.fm = true;
  mix_all.mlp = {};
  shapes.emplace_back("a mixture cross layer + bottom MLP + dot + fm", mix_all);
  ModelOptions towers = SmallModel();  // AIBox: a tower per dense group
  towers.towers = 2;
  towers.dense_groups = {{0}, {1}};
  shapes.emplace_back("2 towers with dense groups", towers);
  ModelOptions towers3 = SmallModel();  // one hidden layer: h1 = hL, tapped once
  towers3.towers = 3;
  towers3.mlp = {6};
  towers3.fm = towers3.dot = true;
  shapes.emplace_back("3 towers of one layer + fm + dot", towers3);
  ModelOptions towers_cross = SmallModel();
  towers_cross.towers = 2;
  towers_cross.dense_groups = {{1}, {0}};
  towers_cross.cross_layers = 1;
  towers_cross.mlp = {5, 3, 4};
  towers_cross.wide = false;
  shapes.emplace_back("2 towers of three layers after a cross layer", towers_cross);
  ModelOptions own_widths = SmallModel();  // model.tower_mlp: each tower its own widths
  own_widths.towers = 3;
  own_widths.tower_mlp = {{6, 4}, {5}, {3, 5, 2}};
  own_widths.dot = true;
  shapes.emplace_back("3 towers of their own widths + dot", own_widths);
  // model.slot_dims: slot 0 of 6 values, slot 1 of embedding_dim's 4, slot 2 of 2 (three
  // tables; row blocks 6 wide).
  ModelOptions dims = SmallModel();
  dims.slot_dims = {{{0}, 6}, {{2}, 2}};
  shapes.emplace_back("slot dims 6 | 4 | 2", dims);
  ModelOptions dims_cross = SmallModel();  // z and a cross layer over mixed widths
  dims_cross.slot_dims = {{{1}, 7}, {{0, 2}, 3}};
  dims_cross.bottom_mlp = {4};
  dims_cross.cross_layers = 1;
  dims_cross.cross_rank = 2;
  dims_cross.mlp = {};
  shapes.emplace_back("slot dims 3 | 7 | 3 + bottom MLP + low-rank cross", dims_cross);
  ModelOptions dims_towers = SmallModel();
  dims_towers.slot_dims = {{{0, 1}, 2}};
  dims_towers.towers = 2;
  dims_towers.dense_groups = {{1}, {0}};
  dims_towers.mlp = {7};
  shapes.emplace_back("slot dims 2 | 2 | 4 + 2 towers", dims_towers);
  ModelOptions dims_mix = SmallModel();
  dims_mix.slot_dims = {{{2}, 5}};
  dims_mix.cross_layers = 1;
  dims_mix.cross_rank = 2;
  dims_mix.cross_experts = 2;
  dims_mix.mlp = {};
  shapes.emplace_back("slot dims 4 | 4 | 5 + a mixture cross layer", dims_mix);
  return shapes;
}

}  // namespace ctrbox::model_test

#endif  // CTRBOX_MODEL_CTR_MODEL_TEST_UTIL_H_
