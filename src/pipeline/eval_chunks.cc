#include "pipeline/eval_chunks.h"

#include <algorithm>

#include "model/ctr_model.h"

namespace ctrbox {

namespace {
constexpr uint64_t kBlock = CtrModel::kPredictBlockRows;
}  // namespace

EvalChunks::EvalChunks(BatchReader* reader, uint64_t chunk_rows, uint64_t chunk_keys)
    : reader_(reader),
      chunk_rows_(std::max<uint64_t>(kBlock, (chunk_rows + kBlock - 1) / kBlock * kBlock)),
      chunk_keys_(chunk_keys) {
  block_.Reset(reader_->schema());
}

Status EvalChunks::FillBlock() {
  while (block_.rows() < kBlock && !eof_) {
    if (at_ == input_.rows()) {
      RETURN_IF_ERROR(reader_->Next(&input_, &eof_));
      at_ = 0;
      if (eof_) break;
    }
    const size_t end = std::min<size_t>(input_.rows(), at_ + (kBlock - block_.rows()));
    block_.AppendRows(input_, at_, end);
    at_ = end;
  }
  return Status::OK();
}

bool EvalChunks::TakeBlock(Batch* chunk) {
  if (chunk_keys_ > 0) {
    const uint64_t* k = block_.keys.data();
    const size_t n = block_.keys.size();
    if (chunk->rows() > 0 && keys_.DistinctWith(k, n) > chunk_keys_) return true;
    keys_.Add(k, n);
  }
  chunk->AppendRows(block_, 0, block_.rows());
  block_.Reset(reader_->schema());
  return chunk->rows() >= chunk_rows_;
}

Status EvalChunks::Next(Batch* chunk) {
  chunk->Reset(reader_->schema());
  keys_.NextPass();
  for (;;) {
    RETURN_IF_ERROR(FillBlock());
    if (block_.rows() == 0) return Status::OK();  // the stream is done
    if (TakeBlock(chunk)) return Status::OK();
  }
}

}  // namespace ctrbox
