#include "model/ctr_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_map>

#include "model/ctr_model_test_util.h"
#include "util/random.h"
#include "util/thread_pool.h"

namespace ctrbox::model_test {
namespace {

TEST(CtrModelTest, GradientsOfEmbeddingsWideAndDenseMatchFiniteDifferences) {
  for (const auto& [name, shape] : Shapes()) {
    SCOPED_TRACE(name);
    for (bool weights : {false, true}) {
      OptimizerOptions sgd;
      sgd.kind = OptimizerKind::kSgd;
      sgd.lr = 1.0f;
      Fixture ref(sgd, sgd, weights, 40, shape), train(sgd, sgd, weights, 40, shape);
      std::vector<float> pred(40);
      std::vector<float> before = train.model.dense_params();
      train.model.TrainMinibatch(train.pass, train.ws, train.ws.batches[0], &train.rows,
                                 train.accessor, nullptr, pred.data());
      // Central differences at h and h/2, Richardson-extrapolated (the cross layers' products
      // curve the loss: this cancels the h^2 error term); where the one-sided differences
      // disagree, the step crossed a ReLU's kink and the point is skipped (few may be).
      size_t checked = 0, skipped = 0;
      auto check = [&](float* v, const std::function<double()>& loss, double analytic,
                       const std::string& what) {
        const float orig = *v, h = 5e-3f;
        const double mid = loss();
        double central[2], up_h = 0, down_h = 0;
        for (int k = 0; k < 2; ++k) {
          const float step = k == 0 ? 2 * h : h;
          *v = orig + step;
          const double up = loss();
          *v = orig - step;
          const double down = loss();
          central[k] = (up - down) / (2 * double(step));
          up_h = up;
          down_h = down;
        }
        *v = orig;
        const double numeric = (4 * central[1] - central[0]) / 3;
        ++checked;
        if (std::fabs((up_h - mid) - (mid - down_h)) / h > 1e-4 + 5e-2 * std::fabs(numeric)) {
          ++skipped;
          return;
        }
        EXPECT_NEAR(analytic, numeric, 1e-4 + 1e-2 * std::fabs(numeric))
            << what << " weights " << weights;
      };
      // Sparse rows: with SGD at lr 1 the update is exactly minus the gradient. With
      // model.slot_dims a row block's rows are the widest table's: a smaller table's key
      // leaves the rest zero and untouched (gradient zero).
      const uint32_t rd = ref.model.value_layout().dim;
      for (size_t l = 0; l < ref.ws.keys.size(); ++l) {
        for (uint32_t d = 0; d <= rd; ++d) {  // d == rd: the wide weight
          RowBlock rows = ref.rows;
          float* v = d < rd ? &rows.emb(l)[d] : &rows.wide(l);
          const float after = d < rd ? train.rows.emb(l)[d] : train.rows.wide(l);
          check(
              v, [&] { return MeanLoss(ref, rows); }, double(*v) - after,
              "key " + std::to_string(l) + " element " + std::to_string(d));
        }
      }
      // Dense parameters (a sample of each layer and cross layer).
      const std::vector<float>& after = train.model.dense_params();
      for (size_t i = 0; i < before.size(); i += 3) {
        check(
            &ref.model.dense_params()[i], [&] { return MeanLoss(ref, ref.rows); },
            double(before[i]) - after[i], "dense parameter " + std::to_string(i));
      }
      EXPECT_LE(skipped * 10, checked) << skipped << " of " << checked << " points at a kink";
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
}

// A plain double-precision reference of the composed model, row at a time, each part from its
// formula (docs/model.md, model/cross_mix.h), with FM in its pairwise form (sum over slot
// pairs of <e_i, e_j>).
class PlainReference {
 public:
  PlainReference(const Fixture& f, const ModelOptions& shape)
      : f_(f), shape_(shape), params_(f.model.dense_params()), Dx_(f.model.dense_width()) {
    // x0: Dx (D, or z's dim), then each slot's embedding of its own dimension (model.slot_dims).
    W0_ = Dx_;
    for (uint32_t s = 0; s < kSchema.num_slots; ++s) {
      sdim_.push_back(shape.SlotDim(s));
      col_.push_back(W0_);
      W0_ += sdim_.back();
    }
  }

  // The logit of the pass's row R.
  double Logit(size_t R) const {
    double wide = 0;
    const std::vector<double> x0 = Input(R, &wide);
    std::vector<double> x = Mix(Cross(x0), x0);
    const double fm = Interactions(x0, &x);
    EXPECT_EQ(x.size(), f_.model.mlp().in(0));
    const double top = shape_.HasTowers() ? TowersTop(x) : TopMlp(x);
    return top + (shape_.wide ? wide : 0.0) + (shape_.fm ? fm : 0.0);
  }

 private:
  // y = in W + b of layer l of `m` at parameter offset `at` (ReLU with `relu`).
  std::vector<double> Layer(const Mlp& m, size_t at, uint32_t l, const std::vector<double>& in,
                            bool relu) const {
    std::vector<double> y(m.out(l));
    for (uint32_t c = 0; c < m.out(l); ++c) {
      double v = params_[at + m.b_offset(l) + c];
      for (uint32_t i = 0; i < m.in(l) && i < in.size(); ++i) {
        v += in[i] * params_[at + m.w_offset(l) + size_t{i} * m.out(l) + c];
      }
      y[c] = relu ? std::max(v, 0.0) : v;
    }
    return y;
  }

  std::vector<double> MatMul(const std::vector<double>& in, size_t at, uint32_t n_in,
                             uint32_t n_out) const {
    std::vector<double> y(n_out, 0.0);
    for (uint32_t c = 0; c < n_out; ++c) {
      for (uint32_t i = 0; i < n_in; ++i) y[c] += in[i] * params_[at + size_t{i} * n_out + c];
    }
    return y;
  }

  // x0 of row R: z = ReLU layers of f(dense) (f(dense) itself without a bottom MLP), then the
  // slots' pooled embeddings; *wide the row's wide part.
  std::vector<double> Input(size_t R, double* wide) const {
    const uint32_t D = kSchema.num_dense, S = kSchema.num_slots;
    const Mlp& bm = f_.model.bottom();
    std::vector<double> fx(D);
    for (uint32_t j = 0; j < D; ++j) fx[j] = std::log1p(std::max(f_.pass.dense[R * D + j], 0.0f));
    for (uint32_t l = 0; l < bm.num_layers(); ++l)
      fx = Layer(bm, f_.model.bottom_base(), l, fx, true);
    EXPECT_EQ(fx.size(), Dx_);
    std::vector<double> x0(W0_, 0.0);
    for (uint32_t j = 0; j < Dx_ && j < fx.size(); ++j) x0[j] = fx[j];
    for (uint32_t s = 0; s < S; ++s) {
      for (uint32_t q = f_.pass.offsets[R * S + s]; q < f_.pass.offsets[R * S + s + 1]; ++q) {
        const uint32_t l = f_.ws.local[q];
        const double w = f_.pass.weights[q];
        *wide += w * f_.rows.wide(l);
        if (!f_.rows.has_emb(l)) continue;
        for (uint32_t k = 0; k < sdim_[s]; ++k) x0[col_[s] + k] += w * f_.rows.emb(l)[k];
        for (uint32_t k = sdim_[s]; k < f_.rows.layout().dim; ++k) {
          EXPECT_EQ(f_.rows.emb(l)[k], 0.0f) << "a smaller table's row past its dimension";
        }
      }
    }
    return x0;
  }

  // The cross layers: x_{l+1} = x0 * (x_l W_l + b_l) + x_l, a low-rank W_l = V_l U_l first
  // made a plain W0 x W0 matrix.
  std::vector<double> Cross(const std::vector<double>& x0) const {
    const CrossLayout& cl = f_.model.cross();
    std::vector<double> x = x0;
    for (uint32_t l = 0; l < cl.layers; ++l) {
      std::vector<double> W(size_t{W0_} * W0_, 0.0);
      for (uint32_t i = 0; i < W0_; ++i) {
        for (uint32_t c = 0; c < W0_; ++c) {
          if (cl.rank == 0) {
            W[size_t{i} * W0_ + c] = params_[cl.w_offset(l) + size_t{i} * W0_ + c];
            continue;
          }
          for (uint32_t q = 0; q < cl.rank; ++q) {
            W[size_t{i} * W0_ + c] += double(params_[cl.w_offset(l) + size_t{i} * cl.rank + q]) *
                                      params_[cl.u_offset(l) + size_t{q} * W0_ + c];
          }
        }
      }
      std::vector<double> next(W0_);
      for (uint32_t c = 0; c < W0_; ++c) {
        double u = params_[cl.b_offset(l) + c];
        for (uint32_t i = 0; i < W0_; ++i) u += x[i] * W[size_t{i} * W0_ + c];
        next[c] = x0[c] * u + x[c];
      }
      x = next;
    }
    return x;
  }

  // The mixture of low-rank experts (model/cross_mix.h).
  std::vector<double> Mix(std::vector<double> x, const std::vector<double>& x0) const {
    const MixLayout& mx = f_.model.mix();
    for (uint32_t l = 0; l < mx.layers; ++l) {
      const uint32_t K = mx.experts, R = mx.rank;
      std::vector<double> logits = MatMul(x, mx.g_offset(l), W0_, K), next = x;
      double top = *std::max_element(logits.begin(), logits.end()), sum = 0;
      for (double& z : logits) sum += (z = std::exp(z - top));
      for (uint32_t k = 0; k < K; ++k) {
        std::vector<double> a = MatMul(x, mx.v_offset(l, k), W0_, R);
        for (double& v : a) v = std::max(v, 0.0);
        std::vector<double> c = MatMul(a, mx.c_offset(l, k), R, R);
        for (double& v : c) v = std::max(v, 0.0);
        std::vector<double> u = MatMul(c, mx.u_offset(l, k), R, W0_);
        for (uint32_t i = 0; i < W0_; ++i) {
          next[i] += logits[k] / sum * x0[i] * (u[i] + params_[mx.b_offset(l) + i]);
        }
      }
      x = next;
    }
    return x;
  }

  // Dot products among z (with a bottom MLP) and the slots' embeddings, appended to *x; the
  // FM sum over the slots' pairs returned. (Only with them: model.slot_dims shapes, which
  // refuse both, have slots of other widths.)
  double Interactions(const std::vector<double>& x0, std::vector<double>* x) const {
    const uint32_t S = kSchema.num_slots, dim = 4;
    const uint32_t shift = f_.model.bottom().num_layers() > 0 ? 1 : 0, vec0 = Dx_ - shift * dim;
    double fm = 0;
    for (uint32_t i = 0; (shape_.dot || shape_.fm) && i < S + shift; ++i) {
      for (uint32_t j = i + 1; j < S + shift; ++j) {
        double d = 0;
        for (uint32_t k = 0; k < dim; ++k) d += x0[vec0 + i * dim + k] * x0[vec0 + j * dim + k];
        if (shape_.dot) x->push_back(d);
        if (i >= shift) fm += d;
      }
    }
    return fm;
  }

  // The towers, read from docs/model.md's description: tower t sees the input less the other
  // towers' dense groups, and the earlier towers' first and last hidden layers.
  double TowersTop(const std::vector<double>& x) const {
    const Towers& tw = f_.model.towers();
    std::vector<std::vector<double>> h1(shape_.towers), hL(shape_.towers);
    double z = params_[tw.out_b()];
    for (uint32_t t = 0; t < shape_.towers; ++t) {
      std::vector<double> in;
      for (uint32_t c = 0; c < x.size(); ++c) {
        bool other = false;  // a dense feature of another tower's group
        for (uint32_t g = 0; g < shape_.dense_groups.size(); ++g) {
          for (uint32_t d : shape_.dense_groups[g]) other |= g != t && d == c;
        }
        if (!other) in.push_back(x[c]);
      }
      for (uint32_t s = 0; s < t; ++s) {
        in.insert(in.end(), h1[s].begin(), h1[s].end());
        if (shape_.TowerWidths()[s].size() > 1) in.insert(in.end(), hL[s].begin(), hL[s].end());
      }
      const Mlp& m = tw.tower(t);
      EXPECT_EQ(in.size(), m.in(0));
      for (uint32_t l = 0; l < m.num_layers(); ++l) {
        in = Layer(m, tw.base(t), l, in, true);
        if (l == 0) h1[t] = in;
      }
      hL[t] = in;
      size_t w = tw.out_w();  // w_t follows the earlier towers' weights
      for (uint32_t s = 0; s < t; ++s) w += hL[s].size();
      for (uint32_t j = 0; j < in.size(); ++j) z += in[j] * params_[w + j];
    }
    return z;
  }

  // The top MLP, its last layer linear.
  double TopMlp(std::vector<double> x) const {
    const Mlp& mlp = f_.model.mlp();
    for (uint32_t l = 0; l < mlp.num_layers(); ++l) {
      x = Layer(mlp, 0, l, x, l + 1 < mlp.num_layers());
    }
    return x[0];
  }

  const Fixture& f_;
  const ModelOptions& shape_;
  const std::vector<float>& params_;
  const uint32_t Dx_;
  uint32_t W0_ = 0;
  std::vector<uint32_t> col_, sdim_;
};

TEST(CtrModelTest, PredictionsMatchAPlainReferenceOfEveryShape) {
  for (const auto& [name, shape] : Shapes()) {
    SCOPED_TRACE(name);
    OptimizerOptions sparse, dense;
    Fixture f(sparse, dense, true, 40, shape);
    const Minibatch& mb = f.ws.batches[0];
    std::vector<float> p(mb.rows());
    f.model.Predict(f.pass, f.ws, mb, f.rows, nullptr, p.data());
    const CtrModel& m = f.model;
    ASSERT_EQ(m.dense_params().size(),
              (shape.HasTowers() ? m.towers().num_params() : m.mlp().num_params()) +
                  m.cross().num_params() + m.bottom().num_params() + m.mix().num_params());
    const PlainReference ref(f, shape);
    for (uint32_t r = 0; r < mb.rows(); ++r) {
      const double logit = ref.Logit(mb.row_begin + r);
      EXPECT_NEAR(p[r], 1.0 / (1.0 + std::exp(-logit)), 2e-6) << "row " << r;
    }
  }
}

TEST(CtrModelTest, DescribeNamesTheShape) {
  OptimizerOptions o;
  EXPECT_EQ(CtrModel(kSchema, SmallModel(), o, o, 1).Describe(),
            "2 dense + 3 slots x 4 -> MLP 8-4 + wide; 161 dense parameters");
  ModelOptions m = SmallModel();
  m.mlp = {};
  m.wide = false;
  m.fm = m.dot = true;
  m.cross_layers = 2;
  m.cross_rank = 3;
  // MLP: (14 + 3 dots) + 1; two rank-3 layers of 2 x 14 x 3 + 14.
  EXPECT_EQ(CtrModel(kSchema, m, o, o, 1).Describe(),
            "2 dense + 3 slots x 4 -> 2 cross layers (rank 3) -> MLP (linear) (+ 3 dots) + fm; "
            "214 dense parameters");
}

// The experts and the towers in the shape line, with their parameter counts worked out.
TEST(CtrModelTest, DescribeNamesTheExpertsAndTheTowers) {
  OptimizerOptions o;
  std::vector<std::pair<ModelOptions, std::string>> cases;
  ModelOptions experts = SmallModel();
  experts.cross_layers = 2;
  experts.cross_rank = 3;
  experts.cross_experts = 4;
  // MLP (14 + 1)*8 + (8 + 1)*4 + 5 = 161; a layer: 4 * (14*3 + 3*3 + 3*14) + 14*4 + 14 = 442.
  cases.emplace_back(experts,
                     "2 dense + 3 slots x 4 -> 2 cross layers (4 experts of rank 3) -> MLP 8-4 + "
                     "wide; 1045 dense parameters");
  ModelOptions towers = SmallModel();
  towers.towers = 2;
  towers.dense_groups = {{0}, {1}};
  // Tower 0 reads 1 dense + 12 embedding columns; tower 1 also tower 0's h1 (8) and hL (4):
  // (13*8+8 + 8*4+4) + (25*8+8 + 8*4+4) + 2*4 + 1.
  cases.emplace_back(towers,
                     "2 dense + 3 slots x 4 -> 2 towers x MLP 8-4 (dense groups 0 | 1) + wide; "
                     "401 dense parameters");
  ModelOptions widths = SmallModel();
  widths.towers = 2;
  widths.tower_mlp = {{8, 4}, {6}};
  // Tower 0: (14*8+8) + (8*4+4) = 156; tower 1 reads 14 + 8 + 4 = 26: 26*6+6 = 162; the
  // output 4 + 6 weights and a bias.
  cases.emplace_back(
      widths, "2 dense + 3 slots x 4 -> 2 towers x MLP 8-4 | 6 + wide; 329 dense parameters");
  for (const auto& [m, want] : cases) EXPECT_EQ(CtrModel(kSchema, m, o, o, 1).Describe(), want);
}

TEST(CtrModelTest, DescribeNamesTheSlotDimensions) {
  OptimizerOptions o;
  ModelOptions m = SmallModel();
  m.slot_dims = {{{0, 1}, 6}};
  // 2 + 6 + 6 + 4 = 18 inputs: 18*8+8 + 8*4+4 + 4+1.
  EXPECT_EQ(CtrModel(kSchema, m, o, o, 1).Describe(),
            "2 dense + 3 slots (0-1 x 6, 2 x 4) -> MLP 8-4 + wide; 193 dense parameters");
}

TEST(CtrModelTest, BitIdenticalWhateverTheThreadCount) {
  OptimizerOptions sparse;  // adagrad
  OptimizerOptions dense;
  dense.kind = OptimizerKind::kAdam;
  dense.lr = 1e-2f;
  dense.epsilon = 1e-8f;
  std::vector<float> ref_params;
  std::string ref_rows;
  for (const auto& [name, shape] : Shapes()) {
    SCOPED_TRACE(name);
    for (int threads : {1, 2, 3}) {
      Fixture f(sparse, dense, true, 16, shape);
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
}

TEST(CtrModelTest, LazyEmbeddingsAppearOncePopular) {
  OptimizerOptions o;
  ModelOptions mo = SmallModel();
  mo.mlp = {8};
  mo.wide = false;
  CtrModel model(kSchema, mo, o, o, 1);
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
}  // namespace ctrbox::model_test
