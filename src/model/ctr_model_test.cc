#include "model/ctr_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "util/random.h"

namespace ctrbox {
namespace {

constexpr Schema kSchema{3, 2};

Batch MakePass(size_t rows, uint64_t seed, bool weights) {
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

struct Fixture {
  Fixture(OptimizerOptions sparse, OptimizerOptions dense, bool weights, size_t batch,
          QuantOptions quant = {})
      : model(kSchema, ModelOptions{4, {8, 4}, true, true, quant}, sparse, dense, 7),
        pass(MakePass(40, 9, weights)),
        accessor(model.value_layout(), AccessorOptions{0.1f, 1.0f, 0.0f, 0.5f, 3}),
        rows(model.value_layout()) {
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

double MeanLoss(Fixture& f, const RowBlock& rows) {
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

TEST(CtrModelTest, GradientsOfEmbeddingsWideAndDenseMatchFiniteDifferences) {
  for (bool weights : {false, true}) {
    OptimizerOptions sgd;
    sgd.kind = OptimizerKind::kSgd;
    sgd.lr = 1.0f;
    Fixture ref(sgd, sgd, weights, 40), train(sgd, sgd, weights, 40);
    std::vector<float> pred(40);
    std::vector<float> before = train.model.dense_params();
    train.model.TrainMinibatch(train.pass, train.ws, train.ws.batches[0], &train.rows,
                               train.accessor, nullptr, pred.data());
    const float h = 1e-2f;
    // Sparse rows: with SGD at lr 1 the update is exactly minus the gradient.
    for (size_t l = 0; l < ref.ws.keys.size(); ++l) {
      for (uint32_t d = 0; d <= 4; ++d) {  // d == 4: the wide weight
        RowBlock rows = ref.rows;
        float& v = d < 4 ? rows.emb(l)[d] : rows.wide(l);
        const float orig = v;
        v = orig + h;
        double up = MeanLoss(ref, rows);
        v = orig - h;
        double down = MeanLoss(ref, rows);
        double numeric = (up - down) / (2 * h);
        float after = d < 4 ? train.rows.emb(l)[d] : train.rows.wide(l);
        double analytic = double(orig) - after;
        EXPECT_NEAR(analytic, numeric, 1e-4 + 1e-2 * std::fabs(numeric))
            << "key " << l << " element " << d << " weights " << weights;
      }
    }
    // Dense parameters (a sample of each layer).
    const std::vector<float>& after = train.model.dense_params();
    for (size_t i = 0; i < before.size(); i += 3) {
      std::vector<float>& p = ref.model.dense_params();
      const float orig = p[i];
      p[i] = orig + h;
      double up = MeanLoss(ref, ref.rows);
      p[i] = orig - h;
      double down = MeanLoss(ref, ref.rows);
      p[i] = orig;
      double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(double(before[i]) - after[i], numeric, 1e-4 + 1e-2 * std::fabs(numeric)) << i;
    }
    // Counters: show is the number of occurrences, click the clicked ones.
    for (size_t l = 0; l < ref.ws.keys.size(); ++l) {
      float show = 0, click = 0;
      for (size_t p = 0; p < train.pass.keys.size(); ++p) {
        if (train.ws.local[p] != l) continue;
        show += 1;
        size_t row = std::upper_bound(train.pass.offsets.begin(), train.pass.offsets.end(), p) -
                     train.pass.offsets.begin() - 1;
        click += train.pass.labels[row / kSchema.num_slots];
      }
      EXPECT_EQ(train.rows.show(l), show);
      EXPECT_EQ(train.rows.click(l), click);
    }
  }
}

TEST(CtrModelTest, BitIdenticalWhateverTheThreadCount) {
  OptimizerOptions sparse;  // adagrad
  OptimizerOptions dense;
  dense.kind = OptimizerKind::kAdam;
  dense.lr = 1e-2f;
  dense.epsilon = 1e-8f;
  std::vector<float> ref_params;
  std::string ref_rows;
  for (int threads : {1, 2, 3}) {
    Fixture f(sparse, dense, true, 16);
    ThreadPool pool(threads);
    std::vector<float> pred(16);
    for (int epoch = 0; epoch < 3; ++epoch) {
      for (const Minibatch& mb : f.ws.batches) {
        f.model.TrainMinibatch(f.pass, f.ws, mb, &f.rows, f.accessor, &pool, pred.data());
      }
    }
    std::string enc;
    for (size_t i = 0; i < f.rows.size(); ++i) f.rows.EncodeRow(i, &enc);
    if (threads == 1) {
      ref_params = f.model.dense_params();
      ref_rows = enc;
    } else {
      ASSERT_EQ(std::memcmp(ref_params.data(), f.model.dense_params().data(),
                            ref_params.size() * sizeof(float)),
                0)
          << threads;
      ASSERT_EQ(enc, ref_rows) << threads;
    }
  }
}

TEST(CtrModelTest, LazyEmbeddingsAppearOncePopular) {
  OptimizerOptions o;
  CtrModel model(kSchema, ModelOptions{4, {8}, false, true, {}}, o, o, 1);
  AccessorOptions ao;
  ao.embedx_threshold = 2.5f;  // with click_coeff 1 and nonclk 0.1: needs clicks
  CtrAccessor acc(model.value_layout(), ao);
  Batch pass = MakePass(200, 2, false);
  WorkingSet ws;
  BuildWorkingSet(pass, 50, nullptr, &ws);
  RowBlock rows(model.value_layout());
  rows.Resize(ws.keys.size());
  for (size_t i = 0; i < ws.keys.size(); ++i) acc.InitRow(&rows, i, ws.keys[i]);
  for (size_t i = 0; i < rows.size(); ++i) ASSERT_FALSE(rows.has_emb(i));
  std::vector<float> pred(50);
  uint32_t created = 0;
  for (const Minibatch& mb : ws.batches) {
    created +=
        model.TrainMinibatch(pass, ws, mb, &rows, acc, nullptr, pred.data()).embeddings_created;
  }
  size_t with = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows.has_emb(i)) {
      ++with;
      EXPECT_GE(acc.Score(rows.show(i), rows.click(i)), 2.5f);
    }
  }
  EXPECT_GT(with, 0u);
  EXPECT_EQ(with, created);
}

TEST(CtrModelTest, QuantizedUpdatesAreTheFloatUpdateRoundedOntoTheGrid) {
  // Differential: from the same rows, a quantized model's step equals the float model's step
  // followed by the rounding: x <- Q(x + update), exactly Q for nearest, and one of the two
  // neighbouring grid points for stochastic.
  for (auto rounding : {QuantRounding::kNearest, QuantRounding::kStochastic}) {
    for (auto kind :
         {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kRowwiseAdagrad}) {
      OptimizerOptions sparse;
      sparse.kind = kind;
      sparse.lr = kind == OptimizerKind::kSgd ? 2.0f : 0.05f;
      OptimizerOptions dense;
      const QuantOptions q{12, 0.5f, rounding};
      Fixture fl(sparse, dense, false, 40), qu(sparse, dense, false, 40, q);
      const Quantizer quant(q.bits, q.range);
      // Start the float model from the quantized model's (on-grid) rows.
      for (size_t i = 0; i < qu.ws.keys.size(); ++i) {
        for (uint32_t d = 0; d < 4; ++d) {
          ASSERT_EQ(quant.Value(quant.Code(qu.rows.emb(i)[d], 0.5f)), qu.rows.emb(i)[d]);
        }
      }
      fl.rows = qu.rows;
      const RowBlock start = qu.rows;
      std::vector<float> pred(40);
      fl.model.TrainMinibatch(fl.pass, fl.ws, fl.ws.batches[0], &fl.rows, fl.accessor, nullptr,
                              pred.data());
      qu.model.TrainMinibatch(qu.pass, qu.ws, qu.ws.batches[0], &qu.rows, qu.accessor, nullptr,
                              pred.data());
      size_t moved = 0;
      for (size_t i = 0; i < qu.ws.keys.size(); ++i) {
        ASSERT_EQ(qu.rows.wide(i), fl.rows.wide(i));  // the wide part stays float
        for (uint32_t d = 0; d < 4; ++d) {
          const float x = fl.rows.emb(i)[d], got = qu.rows.emb(i)[d];
          const int32_t down = quant.Code(x, 0.0f), up = quant.Code(x, 0.9999999f);
          if (rounding == QuantRounding::kNearest) {
            ASSERT_EQ(got, quant.Value(quant.Code(x, 0.5f))) << i << " " << d;
          } else {
            ASSERT_TRUE(got == quant.Value(down) || got == quant.Value(up)) << i << " " << d;
          }
          moved += got != start.emb(i)[d] ? 1 : 0;
        }
      }
      EXPECT_GT(moved, 10u);  // the step did change the stored codes
    }
  }
}

}  // namespace
}  // namespace ctrbox
