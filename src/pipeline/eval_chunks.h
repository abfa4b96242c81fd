// EvalChunks: cuts a stream of examples into the chunks that evaluation predicts at once, so
// that a held-out evaluation inside a train job and `ctrbox eval` of the saved model predict
// every row in the same block shape at the same place (docs/pipeline.md, "Evaluation").
//
// A chunk is a whole number of prediction blocks (CtrModel::kPredictBlockRows rows, counted
// from the stream's first row; the stream's last chunk may end in a short block), of at most
// chunk_rows rows (rounded up to a block) and, when chunk_keys is not 0, of at most chunk_keys
// distinct keys (a single block with more is a chunk of its own). The model predicts each
// block with one BLAS call per layer, and a row's result depends on its block's shape and its
// place there (model/ctr_model.h, Predict): so a row's prediction depends on the stream and
// the model only, not on the batch size, the chunk limits or the thread count.
//
// Thread safety: not thread-safe.
#ifndef CTRBOX_PIPELINE_EVAL_CHUNKS_H_
#define CTRBOX_PIPELINE_EVAL_CHUNKS_H_

#include <cstdint>

#include "io/batch.h"
#include "io/reader.h"
#include "pipeline/key_window.h"
#include "util/status.h"

namespace ctrbox {

class EvalChunks {
 public:
  // `reader` must outlive this.
  EvalChunks(BatchReader* reader, uint64_t chunk_rows, uint64_t chunk_keys);

  // The next chunk into *chunk (reset first); an empty chunk at the end of the stream.
  Status Next(Batch* chunk);

 private:
  // Moves the pending block (block_) into *chunk, or leaves it for the next chunk when its
  // keys would take the chunk over chunk_keys; returns whether the chunk is full.
  bool TakeBlock(Batch* chunk);
  // Reads until block_ holds a whole prediction block or the stream ends.
  Status FillBlock();

  BatchReader* reader_;
  const uint64_t chunk_rows_, chunk_keys_;
  Batch input_;       // the reader's last batch
  size_t at_ = 0;     // its rows already taken
  bool eof_ = false;  // the reader is done
  Batch block_;       // the next prediction block, whole unless the stream ended
  KeyWindow keys_{1};
};

}  // namespace ctrbox

#endif  // CTRBOX_PIPELINE_EVAL_CHUNKS_H_
