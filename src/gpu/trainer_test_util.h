// The GPU backend's tests' shared cases (gpu/trainer_test.cc, gpu/replay_test.cc): model
// shapes and optimizers, a model trained on the CPU or on the GPU step, and comparisons of
// two runs (bit for bit, or within a float tolerance).
#ifndef CTRBOX_GPU_TRAINER_TEST_UTIL_H_
#define CTRBOX_GPU_TRAINER_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gpu/trainer.h"
#include "io/test_util.h"

namespace ctrbox {
namespace gpu_testing {

inline constexpr Schema kSchema{4, 3};

struct Case {
  OptimizerOptions sparse, dense;
  QuantOptions quant;
  bool weights = false;
  float embedx_threshold = 0.0f;
  ModelOptions shape = DefaultShape();  // quant comes from `quant`

  static ModelOptions DefaultShape() {
    ModelOptions o;
    o.embedding_dim = 8;
    o.mlp = {32, 16};
    o.wide = true;
    return o;
  }
  ModelOptions Model() const {
    ModelOptions o = shape;
    o.quant = quant;
    return o;
  }
};

// A model, its accessor and a pass's pulled rows, built the same way for each backend.
struct Trained {
  explicit Trained(const Case& s)
      : model(kSchema, s.Model(), s.sparse, s.dense, 5),
        accessor(model.value_layout(), AccessorOptions{0.1f, 1.0f, s.embedx_threshold, 0.05f, 9}),
        pass(testing::RandomBatch(kSchema, 700, 3, /*multi_hot=*/true, s.weights)),
        rows(model.value_layout()) {
    ModelKeys(s.shape.hashing, s.shape.KeyTableMap(), &pass);  // model.slot_dims: tagged keys
    BuildWorkingSet(pass, 128, nullptr, &ws);
    rows.Resize(ws.keys.size());
    for (size_t i = 0; i < ws.keys.size(); ++i) accessor.InitRow(&rows, i, ws.keys[i]);
    for (size_t i = 0; i < ws.keys.size(); ++i) {
      rows.wide(i) = 0.01f * static_cast<float>(i % 7) - 0.03f;
    }
    predictions.assign(pass.rows(), -1.0f);
  }

  void TrainOnCpu(int epochs) {
    for (int e = 0; e < epochs; ++e) {
      for (const Minibatch& mb : ws.batches) {
        model.TrainMinibatch(pass, ws, mb, &rows, accessor, nullptr,
                             predictions.data() + mb.row_begin);
      }
    }
  }

  Status TrainOnGpu(const GpuOptions& o, int epochs, uint64_t* created = nullptr,
                    uint64_t* staged = nullptr, GpuStepStats* stats = nullptr) {
    ThreadPool pool(3), stage_pool(2);  // the train and pull stages' pools
    ASSIGN_OR_RETURN(std::unique_ptr<GpuTrainer> gpu,
                     GpuTrainer::Create(&model, accessor, o, &pool));
    for (int e = 0; e < epochs; ++e) {
      RETURN_IF_ERROR(gpu->Stage(e, pass, ws, rows, &stage_pool));
      uint64_t c = 0;
      RETURN_IF_ERROR(gpu->Train(e, pass, ws, {}, &rows, predictions.data(), &c, nullptr, &pool));
      if (created != nullptr) *created += c;
    }
    if (staged != nullptr) *staged = gpu->StagedBytes();
    if (stats != nullptr) *stats = gpu->Stats();
    return Status::OK();
  }

  // The pass as the pass reader counts it (pipeline/pass_reader.h, PassShape).
  GpuPassShape Shape() const {
    GpuPassShape s{pass.rows(), pass.ContentBytes(), pass.keys.size(), ws.keys.size(),
                   ws.batches.size()};
    for (const Minibatch& mb : ws.batches) {
      s.batch_keys += mb.uniq.size();
      s.max_batch_keys = std::max<uint64_t>(s.max_batch_keys, mb.uniq.size());
    }
    return s;
  }

  CtrModel model;
  CtrAccessor accessor;
  Batch pass;
  WorkingSet ws;
  RowBlock rows;
  std::vector<float> predictions;
};

inline std::vector<Case> Cases() {
  std::vector<Case> out;
  Case adagrad;  // sparse adagrad, dense adam (the default job)
  adagrad.dense.kind = OptimizerKind::kAdam;
  adagrad.dense.lr = 1e-3f;
  adagrad.dense.epsilon = 1e-8f;
  out.push_back(adagrad);
  Case adam = adagrad;  // lazy sparse adam, weighted keys, lazily created embeddings
  adam.sparse.kind = OptimizerKind::kAdam;
  adam.sparse.lr = 1e-2f;
  adam.sparse.epsilon = 1e-8f;
  adam.weights = true;
  adam.embedx_threshold = 1.0f;
  out.push_back(adam);
  Case sgd;  // SGD both sides, 8-bit stochastic quantized embeddings
  sgd.sparse.kind = OptimizerKind::kSgd;
  sgd.sparse.lr = 0.5f;
  sgd.dense.kind = OptimizerKind::kSgd;
  sgd.quant = QuantOptions{8, 0.25f, QuantRounding::kStochastic};
  out.push_back(sgd);
  Case dense_adagrad = adagrad;  // dense adagrad, nearest rounding
  dense_adagrad.dense.kind = OptimizerKind::kAdagrad;
  dense_adagrad.dense.lr = 1e-2f;
  dense_adagrad.dense.epsilon = 1e-10f;
  dense_adagrad.quant = QuantOptions{16, 1.0f, QuantRounding::kNearest};
  out.push_back(dense_adagrad);
  Case rowwise = adagrad;  // row-wise sparse Adagrad with 16-bit stochastic codes
  rowwise.sparse.kind = OptimizerKind::kRowwiseAdagrad;
  rowwise.quant = QuantOptions{16, 1.0f, QuantRounding::kStochastic};
  out.push_back(rowwise);
  Case bf16_state = adagrad;  // per-element sparse Adagrad, its state stored as bfloat16
  bf16_state.sparse.state_bits = 16;
  out.push_back(bf16_state);
  // The interactions (model/interactions.h): DeepFM, DCN-v2, DLRM's dots, all three composed
  // with weighted keys and lazy embeddings, and all three without a hidden layer.
  Case deepfm = adagrad;
  deepfm.shape.fm = true;
  out.push_back(deepfm);
  Case dcn = adagrad;
  dcn.shape.cross_layers = 2;
  dcn.shape.wide = false;
  out.push_back(dcn);
  Case low_rank = dcn;  // DCN-v2's low-rank cross layers, Adagrad on the dense side
  low_rank.shape.cross_rank = 5;
  low_rank.dense = dense_adagrad.dense;
  out.push_back(low_rank);
  Case dlrm = adagrad;
  dlrm.shape.dot = true;
  out.push_back(dlrm);
  Case dlrm_bottom = adagrad;  // DLRM with its bottom MLP (z joins the dots)
  dlrm_bottom.shape.dot = true;
  dlrm_bottom.shape.bottom_mlp = {16, 8};
  out.push_back(dlrm_bottom);
  Case all = adam;
  all.shape.fm = all.shape.dot = true;
  all.shape.cross_layers = 1;
  all.shape.bottom_mlp = {8};
  out.push_back(all);
  Case linear = sgd;
  linear.shape.fm = linear.shape.dot = true;
  linear.shape.cross_layers = 1;
  linear.shape.mlp = {};
  out.push_back(linear);
  Case mix = dense_adagrad;  // DCN-Mix: low-rank experts mixed by a softmax gate
  mix.shape.cross_layers = 2;
  mix.shape.cross_rank = 4;
  mix.shape.cross_experts = 3;
  out.push_back(mix);
  // AIBox's joint-learning towers (model/towers.h): with dense groups, and one-layer towers
  // composed with every interaction, weighted keys and lazy embeddings.
  Case towers = adagrad;
  towers.shape.towers = 2;
  towers.shape.dense_groups = {{0, 2}, {1}};
  out.push_back(towers);
  Case own_widths = sgd;  // each tower its own widths (model.tower_mlp), 8-bit codes
  own_widths.shape.towers = 3;
  own_widths.shape.tower_mlp = {{8, 4}, {6}, {5, 7, 3}};
  own_widths.shape.dense_groups = {{2}, {0}, {1}};
  out.push_back(own_widths);
  Case towers_all = adam;
  towers_all.shape.towers = 3;
  towers_all.shape.mlp = {8};
  towers_all.shape.fm = towers_all.shape.dot = true;
  towers_all.shape.cross_layers = 1;
  towers_all.shape.cross_rank = 2;
  towers_all.shape.cross_experts = 2;
  towers_all.shape.bottom_mlp = {8};
  out.push_back(towers_all);
  // model.slot_dims: slots of 12, 8 and 3 values (three tables, rows 12 wide), with row-wise
  // Adagrad (its state is per row: the mean over the key's own dimension), and with lazy
  // sparse Adam, weighted keys, a bottom MLP, a low-rank cross layer and towers.
  Case dims = rowwise;
  dims.shape.slot_dims = {{{0}, 12}, {{2, 3}, 3}};
  out.push_back(dims);
  Case dims_all = adam;
  dims_all.shape.slot_dims = {{{1, 3}, 4}};
  dims_all.shape.bottom_mlp = {8};
  dims_all.shape.cross_layers = 1;
  dims_all.shape.cross_rank = 3;
  dims_all.shape.towers = 2;
  dims_all.shape.mlp = {8};
  out.push_back(dims_all);
  return out;
}

inline std::string CaseName(const Case& s) {
  return std::string(OptimizerKindName(s.sparse.kind)) + " quant " + std::to_string(s.quant.bits) +
         " state bits " + std::to_string(s.sparse.state_bits) + (s.shape.fm ? " fm" : "") +
         (s.shape.dot ? " dot" : "") + " cross " + std::to_string(s.shape.cross_layers) + " rank " +
         std::to_string(s.shape.cross_rank) + " experts " + std::to_string(s.shape.cross_experts) +
         " bottom layers " + std::to_string(s.shape.bottom_mlp.size()) + " hidden " +
         std::to_string(s.shape.mlp.size()) + " towers " + std::to_string(s.shape.towers) +
         " tables " + std::to_string(s.shape.TableDims().size());
}

// The first field in which two runs' rows differ at all ("" if none).
inline std::string FirstDifference(const RowBlock& x, const RowBlock& y) {
  const ValueLayout& L = x.layout();
  auto differ = [](const float* a, const float* b, uint32_t n) {
    return n > 0 && std::memcmp(a, b, n * sizeof(float)) != 0;
  };
  auto bits_differ = [](float a, float b) { return std::memcmp(&a, &b, sizeof(float)) != 0; };
  for (size_t i = 0; i < x.size(); ++i) {
    const std::string row = " of row " + std::to_string(i);
    if (bits_differ(x.show(i), y.show(i)) || bits_differ(x.click(i), y.click(i))) {
      return "counters" + row;
    }
    if (x.flags(i) != y.flags(i) || x.unseen(i) != y.unseen(i)) return "flags" + row;
    if (bits_differ(x.wide(i), y.wide(i))) return "wide" + row;
    if (differ(x.wide_state(i), y.wide_state(i), L.wide_state)) return "wide state" + row;
    for (uint32_t d = 0; d < L.dim; ++d) {
      if (differ(x.emb(i) + d, y.emb(i) + d, 1)) {
        return "embedding[" + std::to_string(d) + "]" + row + ": " + std::to_string(x.emb(i)[d]) +
               " vs " + std::to_string(y.emb(i)[d]);
      }
    }
    if (differ(x.emb_state(i), y.emb_state(i), L.emb_state)) return "embedding state" + row;
  }
  return "";
}

// Relative closeness of two runs' rows, dense parameters and predictions.
inline void ExpectClose(const Trained& a, const Trained& b, double tol, const std::string& what) {
  const RowBlock &x = a.rows, &y = b.rows;
  const ValueLayout& L = x.layout();
  auto near = [&](float u, float v, const char* field, size_t i) {
    ASSERT_NEAR(u, v, tol * (1.0 + std::fabs(u))) << what << ": " << field << " of row " << i;
  };
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(x.show(i), y.show(i)) << what << " row " << i;  // integer sums: exact
    ASSERT_EQ(x.click(i), y.click(i)) << what << " row " << i;
    ASSERT_EQ(x.flags(i), y.flags(i)) << what << " row " << i;
    near(x.wide(i), y.wide(i), "wide", i);
    for (uint32_t d = 0; d < L.dim; ++d) near(x.emb(i)[d], y.emb(i)[d], "emb", i);
    for (uint32_t j = 0; j < L.emb_state; ++j)
      near(x.emb_state(i)[j], y.emb_state(i)[j], "state", i);
  }
  const auto &p = a.model.dense_params(), &q = b.model.dense_params();
  for (size_t i = 0; i < p.size(); ++i)
    ASSERT_NEAR(p[i], q[i], tol * (1.0 + std::fabs(p[i]))) << what << " param " << i;
  for (size_t r = 0; r < a.predictions.size(); ++r) {
    ASSERT_NEAR(a.predictions[r], b.predictions[r], tol) << what << " prediction " << r;
  }
  EXPECT_EQ(a.model.dense_optimizer().step(), b.model.dense_optimizer().step());
}

}  // namespace gpu_testing
}  // namespace ctrbox

#endif  // CTRBOX_GPU_TRAINER_TEST_UTIL_H_
