// PassReader: the read stage's source. It reads the epochs' examples from a fresh reader per
// epoch and cuts them into passes of pass_examples examples; a pass never spans two epochs.
//
// Thread safety: not thread-safe; the read stage's thread owns it.
#ifndef CTRBOX_PIPELINE_PASS_READER_H_
#define CTRBOX_PIPELINE_PASS_READER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "io/reader.h"

namespace ctrbox {

struct PassReaderOptions {
  uint64_t pass_examples = 262144;  // REQUIRES: >= 1
  uint32_t epochs = 1;
};

// Opens the input anew (once per epoch).
using ReaderFactory = std::function<StatusOr<std::unique_ptr<BatchReader>>()>;

class PassReader {
 public:
  PassReader(ReaderFactory open, PassReaderOptions options)
      : open_(std::move(open)), options_(options) {}

  // Opens the first reader up front so the schema is known before training starts.
  Status Open();
  Schema schema() const { return schema_; }
  // Record counts of the epochs read to the end.
  const RecordCounts& counts() const { return counts_; }

  // Fills *examples with the next pass; sets *eof (and leaves it empty) at the end.
  // Fails with the reader's error (I/O, too many malformed records).
  Status Next(Batch* examples, bool* eof);

  // Reads past the first `passes` passes (a resumed job's trained data), which must hold
  // `examples` examples: the same passes the job cut before. FailedPrecondition if not.
  Status Skip(uint64_t passes, uint64_t examples);

 private:
  ReaderFactory open_;
  const PassReaderOptions options_;
  std::unique_ptr<BatchReader> reader_;
  Schema schema_;
  Batch block_;
  size_t begin_ = 0;  // rows of block_ already handed out
  uint32_t epoch_ = 0;
  RecordCounts counts_;
};

}  // namespace ctrbox

#endif  // CTRBOX_PIPELINE_PASS_READER_H_
