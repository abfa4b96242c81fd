// The GPU backend against the CPU model (docs/gpu.md). On every machine: the host emulation
// of the GPU step (the same kernel bodies, exchange and update order) must equal the CPU
// model bit for bit with one GPU, and stay within a float tolerance with several GPUs or
// atomic scatter. On a machine with a GPU: the CUDA backend against the CPU model and the
// device hash index against a host map; without one these tests skip, saying why.
#include "gpu/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>

#include "gpu/hbm_index.h"
#include "io/test_util.h"
#include "util/random.h"

#if defined(CTRBOX_WITH_CUDA)
#include "gpu/cuda_backend.h"
#endif

namespace ctrbox {
namespace {

constexpr Schema kSchema{4, 3};

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
                    uint64_t* staged = nullptr) {
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

std::vector<Case> Cases() {
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

std::string CaseName(const Case& s) {
  return std::string(OptimizerKindName(s.sparse.kind)) + " quant " + std::to_string(s.quant.bits) +
         " state bits " + std::to_string(s.sparse.state_bits) + (s.shape.fm ? " fm" : "") +
         (s.shape.dot ? " dot" : "") + " cross " + std::to_string(s.shape.cross_layers) + " rank " +
         std::to_string(s.shape.cross_rank) + " experts " + std::to_string(s.shape.cross_experts) +
         " bottom layers " + std::to_string(s.shape.bottom_mlp.size()) + " hidden " +
         std::to_string(s.shape.mlp.size()) + " towers " + std::to_string(s.shape.towers) +
         " tables " + std::to_string(s.shape.TableDims().size());
}

// The first field in which two runs' rows differ at all ("" if none).
std::string FirstDifference(const RowBlock& x, const RowBlock& y) {
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
void ExpectClose(const Trained& a, const Trained& b, double tol, const std::string& what) {
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

TEST(GpuEmulationTest, OneGpuIsBitIdenticalToTheCpuModel) {
  for (const Case& s : Cases()) {
    Trained cpu(s), gpu(s);
    cpu.TrainOnCpu(2);
    GpuOptions o;
    o.emulate = true;
    uint64_t created = 0;
    ASSERT_TRUE(gpu.TrainOnGpu(o, 2, &created).ok());
    SCOPED_TRACE(CaseName(s));
    EXPECT_EQ(FirstDifference(gpu.rows, cpu.rows), "");
    EXPECT_EQ(gpu.model.dense_params(), cpu.model.dense_params());
    EXPECT_EQ(gpu.model.dense_optimizer().m(), cpu.model.dense_optimizer().m());
    EXPECT_EQ(gpu.model.dense_optimizer().v(), cpu.model.dense_optimizer().v());
    EXPECT_EQ(gpu.predictions, cpu.predictions);
    if (s.embedx_threshold > 0) {
      EXPECT_GT(created, 0u);
    }
  }
}

// gpu.staged_memory sizes passes by GpuPassBytesBound: it must bound what a staged pass's GPU
// buffers take (one staged pass: StagedBytes), on one GPU and several, and not loosely.
TEST(GpuEmulationTest, GpuPassBytesBoundBoundsWhatAStagedPassTakes) {
  for (const Case& s : Cases()) {
    for (uint32_t gpus : {1u, 2u, 3u}) {
      SCOPED_TRACE(CaseName(s) + " gpus " + std::to_string(gpus));
      Trained t(s);
      GpuOptions o;
      o.emulate = true;
      o.gpus = gpus;
      uint64_t staged = 0;
      ASSERT_TRUE(t.TrainOnGpu(o, 1, nullptr, &staged).ok());
      const uint64_t bound = GpuPassBytesBound(t.Shape(), t.model.value_layout(), gpus);
      EXPECT_LE(staged, bound);
      EXPECT_GE(staged, bound / 2);
    }
  }
}

TEST(GpuEmulationTest, SeveralGpusAndAtomicScatterMatchOneGpuWithinFloatTolerance) {
  for (const Case& s : Cases()) {
    Trained one(s);
    GpuOptions o;
    o.emulate = true;
    ASSERT_TRUE(one.TrainOnGpu(o, 2).ok());
    for (uint32_t gpus : {2u, 3u, 8u}) {
      for (ScatterMode scatter : {ScatterMode::kSegment, ScatterMode::kAtomic}) {
        Trained many(s);
        GpuOptions m = o;
        m.gpus = gpus;
        m.scatter = scatter;
        ASSERT_TRUE(many.TrainOnGpu(m, 2).ok());
        // Sums over GPUs run in another order: float rounding only. A quantized value may
        // land on the neighbouring grid point (Δ = 2w / 255 at 8 bits).
        const double tol = s.quant.bits == 8 || s.sparse.state_bits == 16 ? 2.5e-3 : 2e-4;
        ExpectClose(one, many, tol,
                    std::to_string(gpus) + " GPUs, " + std::string(ScatterModeName(scatter)) +
                        ", " + CaseName(s));
      }
    }
  }
}

TEST(GpuEmulationTest, RowsChangedAfterStagingAreTrainedFromTheirNewValues) {
  Case s = Cases()[0];
  Trained cpu(s), gpu(s);
  GpuOptions o;
  o.emulate = true;
  o.gpus = 2;
  ThreadPool pool(2);
  auto trainer = GpuTrainer::Create(&gpu.model, gpu.accessor, o, &pool);
  ASSERT_TRUE(trainer.ok());
  ASSERT_TRUE((*trainer)->Stage(0, gpu.pass, gpu.ws, gpu.rows, nullptr).ok());
  // After staging, a pass in flight hands over newer values of some rows (the pipeline's
  // patch): the GPU must train from those.
  std::vector<uint32_t> patched;
  for (uint32_t l = 0; l < gpu.rows.size(); l += 3) {
    patched.push_back(l);
    if (l % 2 == 0) patched.push_back(l);  // a row handed over by two passes in flight
    for (RowBlock* r : {&cpu.rows, &gpu.rows}) {
      r->wide(l) += 0.5f;
      r->show(l) += 2.0f;
      if (r->has_emb(l)) r->emb(l)[0] = -r->emb(l)[0];
    }
  }
  cpu.TrainOnCpu(1);
  uint64_t created = 0;
  ASSERT_TRUE((*trainer)
                  ->Train(0, gpu.pass, gpu.ws, patched, &gpu.rows, gpu.predictions.data(), &created,
                          nullptr, &pool)
                  .ok());
  ExpectClose(cpu, gpu, 2e-4, "patched rows");
  // Training a pass that was not staged is an error, not a crash.
  Status st = (*trainer)->Train(7, gpu.pass, gpu.ws, {}, &gpu.rows, gpu.predictions.data(),
                                &created, nullptr, nullptr);
  EXPECT_FALSE(st.ok());
}

TEST(GpuBackendTest, WithoutCudaDeviceGpuFailsClearly) {
  std::string why;
  if (CudaDeviceCount(&why) > 0) GTEST_SKIP() << "a GPU is present; the CUDA tests run instead";
  Trained r(Cases()[0]);
  GpuOptions o;  // not emulated
  auto t = GpuTrainer::Create(&r.model, r.accessor, o, nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("gpu"), std::string::npos) << t.status().ToString();
}

// ---- on a GPU ------------------------------------------------------------------------------

// GTEST_SKIP returns from the function it is in: a macro, so that is the test.
#define SKIP_WITHOUT_GPU()                                             \
  do {                                                                 \
    std::string why;                                                   \
    if (CudaDeviceCount(&why) == 0) GTEST_SKIP() << "no GPU: " << why; \
  } while (0)

TEST(CudaBackendTest, MatchesTheCpuModelAfterTwoPasses) {
  SKIP_WITHOUT_GPU();
  for (const Case& s : Cases()) {
    Trained cpu(s);
    cpu.TrainOnCpu(2);
    for (uint32_t gpus : {1u, 2u}) {
      for (ScatterMode scatter : {ScatterMode::kSegment, ScatterMode::kAtomic}) {
        Trained gpu(s);
        GpuOptions o;
        o.gpus = gpus;
        o.scatter = scatter;
        Status st = gpu.TrainOnGpu(o, 2);
        ASSERT_TRUE(st.ok()) << st.ToString();
        const double tol = s.quant.bits == 8 || s.sparse.state_bits == 16 ? 2.5e-3 : 5e-4;
        ExpectClose(cpu, gpu, tol,
                    "CUDA, " + std::to_string(gpus) + " GPUs, " +
                        std::string(ScatterModeName(scatter)) + ", " + CaseName(s));
      }
    }
  }
}

TEST(CudaBackendTest, TensorCoreGemmsStayCloseToFloat32) {
  SKIP_WITHOUT_GPU();
  Case s = Cases()[0];
  Trained cpu(s);
  cpu.TrainOnCpu(1);
  for (GemmPrecision p : {GemmPrecision::kTf32, GemmPrecision::kBf16}) {
    Trained gpu(s);
    GpuOptions o;
    o.precision = p;
    ASSERT_TRUE(gpu.TrainOnGpu(o, 1).ok());
    ExpectClose(cpu, gpu, p == GemmPrecision::kTf32 ? 5e-3 : 3e-2,
                std::string(GemmPrecisionName(p)));
  }
}

#if defined(CTRBOX_WITH_CUDA)
TEST(CudaBackendTest, DeviceHashIndexMatchesAHostMap) {
  SKIP_WITHOUT_GPU();
  Random rng(4);
  std::vector<uint64_t> keys;
  std::unordered_map<uint64_t, uint32_t> ref;
  while (keys.size() < 300000) {
    uint64_t k = rng.Below(8) == 0 ? rng.Below(1000) : rng.Next();
    if (keys.size() == 1234) k = kEmptyKey;
    if (ref.emplace(k, static_cast<uint32_t>(keys.size())).second) keys.push_back(k);
  }
  std::vector<uint64_t> probes = keys;
  for (int i = 0; i < 100000; ++i) probes.push_back(rng.Next());
  std::vector<uint32_t> found;
  std::vector<float> acc;
  Status st = CudaIndexCheck(keys, probes, &found, &acc);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(found.size(), probes.size());
  for (size_t i = 0; i < probes.size(); ++i) {
    auto it = ref.find(probes[i]);
    ASSERT_EQ(found[i], it == ref.end() ? kNoRow : it->second) << i;
  }
  // Every probe of a present key accumulated 1 into its row (keys probed once: 1 each).
  for (size_t r = 0; r < keys.size(); ++r) ASSERT_EQ(acc[r], 1.0f) << r;
}
#endif

}  // namespace
}  // namespace ctrbox
