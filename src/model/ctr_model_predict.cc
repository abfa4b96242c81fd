// CtrModel (model/ctr_model.h): prediction, in blocks of kPredictBlockRows rows.
#include <algorithm>

#include "model/ctr_model.h"
#include "model/ctr_model_internal.h"
#include "util/blas.h"
#include "util/rowwise_gemm.h"

namespace ctrbox {

using model_internal::Sigmoid;

uint32_t CtrModel::PredictMinibatchRows(uint32_t batch_size) {
  const uint32_t block = kPredictBlockRows;
  return (std::max(batch_size, 1u) + block - 1) / block * block;
}

void CtrModel::Predict(const Batch& examples, const WorkingSet& ws, const Minibatch& mb,
                       const RowBlock& rows, ThreadPool* pool, float* predictions) {
  PredictBlocks(mb.rows(), pool, predictions,
                [&](uint32_t r0, uint32_t r1) { BuildInputs(examples, ws, mb, rows, r0, r1); });
}

void CtrModel::PredictInputs(const Batch& examples, const WorkingSet& ws, const Minibatch& mb,
                             const RowBlock& rows, uint32_t at) {
  EnsureBuffers(at + mb.rows());  // keeps the rows built before
  BuildInputs(examples, ws, mb, rows, 0, mb.rows(), at);
}

void CtrModel::PredictBuilt(uint32_t n, ThreadPool* pool, float* predictions) {
  PredictBlocks(n, pool, predictions, nullptr);
}

void CtrModel::PredictBlocks(uint32_t n, ThreadPool* pool, float* predictions,
                             const std::function<void(uint32_t, uint32_t)>& build) {
  EnsureBuffers(n);  // keeps rows built before
  const size_t blocks = (n + kPredictBlockRows - 1) / kPredictBlockRows;
  RunParallel(pool, blocks, [&](size_t blk, int) {
    const uint32_t r0 = static_cast<uint32_t>(blk * kPredictBlockRows);
    const uint32_t r1 = std::min(n, r0 + kPredictBlockRows);
    blas::RowwiseScope rowwise(rowwise_predictions_);  // on the thread that runs the block
    if (build) build(r0, r1);
    ForwardBlock(r0, r1);
    for (uint32_t r = r0; r < r1; ++r) predictions[r] = Sigmoid(logits_[r]);
  });
}

}  // namespace ctrbox
