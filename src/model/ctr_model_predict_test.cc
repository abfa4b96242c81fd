// CtrModel's predictions: the same bits in any minibatch of whole blocks (OpenBLAS), and
// from the row alone (row-wise: predict and serve), in every model shape.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <unordered_map>

#include "model/ctr_model.h"
#include "model/ctr_model_test_util.h"
#include "util/thread_pool.h"

namespace ctrbox::model_test {
namespace {

// The fixture's rows predicted in minibatches of `batch` rows (the working set's rows copied
// from the fixture's by key).
std::vector<float> PredictInMinibatches(Fixture& f, size_t batch, ThreadPool* pool) {
  WorkingSet ws;
  BuildWorkingSet(f.pass, batch, nullptr, &ws);
  std::unordered_map<uint64_t, size_t> row_of;
  for (size_t i = 0; i < f.ws.keys.size(); ++i) row_of[f.ws.keys[i]] = i;
  RowBlock rows(f.model.value_layout());
  rows.Resize(ws.keys.size());
  for (size_t i = 0; i < ws.keys.size(); ++i) rows.CopyRow(f.rows, row_of.at(ws.keys[i]), i);
  std::vector<float> p(f.pass.rows());
  for (const Minibatch& mb : ws.batches) {
    f.model.Predict(f.pass, ws, mb, rows, pool, p.data() + mb.row_begin);
  }
  return p;
}

// Predictions come in blocks of kPredictBlockRows rows: a row's bits are the same in any
// minibatch that starts it at the same place of a block (minibatches of whole blocks, one
// block or several, the last short) and at any thread count, in every model shape.
TEST(CtrModelTest, PredictionsDoNotDependOnTheMinibatchOfWholeBlocksAroundTheRow) {
  constexpr size_t kRows = 600;
  constexpr size_t kBlock = CtrModel::kPredictBlockRows;
  ThreadPool pool(3);
  for (const auto& [name, shape] : Shapes()) {
    SCOPED_TRACE(name);
    OptimizerOptions sparse, dense;
    Fixture f(sparse, dense, true, kRows, shape, kRows);
    ASSERT_EQ(f.ws.batches.size(), 1u);
    std::vector<float> whole(kRows);
    f.model.Predict(f.pass, f.ws, f.ws.batches[0], f.rows, nullptr, whole.data());
    for (size_t batch : {kBlock, 2 * kBlock, 5 * kBlock, 16 * kBlock}) {
      SCOPED_TRACE(batch);
      const std::vector<float> p = PredictInMinibatches(f, batch, &pool);
      for (size_t r = 0; r < kRows; ++r) {
        ASSERT_EQ(std::memcmp(&p[r], &whole[r], sizeof(float)), 0)
            << "row " << r << ": " << p[r] << " vs " << whole[r];
      }
    }
  }
}

// Row-wise predictions (predict and serve): a row's bits are the same in any minibatch, at any
// place, alone or among others, in every model shape; and within rounding of the blocked ones.
TEST(CtrModelTest, RowwisePredictionsDependOnTheRowAlone) {
  constexpr size_t kRows = 300;
  for (const auto& [name, shape] : Shapes()) {
    SCOPED_TRACE(name);
    OptimizerOptions sparse, dense;
    Fixture f(sparse, dense, true, kRows, shape, kRows);
    ASSERT_EQ(f.ws.batches.size(), 1u);
    std::vector<float> blocked(kRows), whole(kRows);
    f.model.Predict(f.pass, f.ws, f.ws.batches[0], f.rows, nullptr, blocked.data());
    f.model.set_rowwise_predictions(true);
    f.model.Predict(f.pass, f.ws, f.ws.batches[0], f.rows, nullptr, whole.data());
    for (size_t r = 0; r < kRows; ++r) ASSERT_NEAR(whole[r], blocked[r], 2e-6f) << r;
    ThreadPool pool(3);
    for (size_t batch : {size_t{1}, size_t{3}, size_t{7}, size_t{100}}) {
      SCOPED_TRACE(batch);
      const std::vector<float> p = PredictInMinibatches(f, batch, &pool);
      ASSERT_EQ(std::memcmp(p.data(), whole.data(), kRows * sizeof(float)), 0);
    }
    f.model.set_rowwise_predictions(false);
  }
}

}  // namespace
}  // namespace ctrbox::model_test
