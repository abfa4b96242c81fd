// BatchReader: the streaming source of examples for train, eval and convert.
//
// Files are read in order, in chunks, never whole; chunks are parsed (or, for shards,
// decoded) by `threads` workers and handed out in input order, so a run is reproducible
// whatever the thread count. Malformed records are counted, logged and skipped through a
// BadInputTracker; the reader fails once the configured error rate is exceeded.
#ifndef CTRBOX_IO_READER_H_
#define CTRBOX_IO_READER_H_

#include <memory>
#include <string>
#include <vector>

#include "io/bad_input.h"
#include "io/batch.h"
#include "io/text_format.h"
#include "util/env.h"

namespace ctrbox {

struct DataOptions {
  std::vector<std::string> paths;  // files, or directories (read in name order)
  DataFormat format = DataFormat::kCriteo;
  uint32_t num_slots = 0;  // libfm and slots formats
  uint32_t num_dense = 0;  // slots format
  bool labels_optional = false;
  size_t max_line_bytes = 1 << 20;
  size_t chunk_bytes = 4 << 20;
  int threads = 1;           // parse / decode workers
  int max_inflight = 4;      // chunks parsed ahead of the consumer
  BadInputOptions bad_input;
};

// Thread safety: Next() from one thread at a time.
class BatchReader {
 public:
  virtual ~BatchReader() = default;
  virtual Schema schema() const = 0;
  // Sets *batch to the next block of rows (at least one) or sets *eof. An error ends the
  // stream; it names the file and line (or block) at fault.
  virtual Status Next(Batch* batch, bool* eof) = 0;
  // Records read so far.
  virtual RecordCounts counts() const = 0;
};

// The files that `paths` name: files as given, directories expanded to their regular files
// in name order (for shards, only *.ctrshard), hidden files skipped.
StatusOr<std::vector<std::string>> ExpandDataPaths(Env* env, const std::vector<std::string>& paths,
                                                   DataFormat format);

// The schema of `options` (for shards, read from the first file's header).
StatusOr<Schema> ResolveSchema(Env* env, const DataOptions& options);

StatusOr<std::unique_ptr<BatchReader>> OpenReader(Env* env, const DataOptions& options);

}  // namespace ctrbox

#endif  // CTRBOX_IO_READER_H_
