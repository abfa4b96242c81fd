// BatchReader: the streaming source of examples for train, eval and convert.
//
// Files are read in order, in chunks, never whole; chunks are parsed (or, for shards,
// decoded) by `threads` workers and handed out in input order, so a run is reproducible
// whatever the thread count. Malformed records are counted, logged and skipped through a
// BadInputTracker; the reader fails once the configured error rate is exceeded.
#ifndef CTRBOX_IO_READER_H_
#define CTRBOX_IO_READER_H_

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/bad_input.h"
#include "io/batch.h"
#include "io/line_chunker.h"
#include "io/row_share.h"
#include "io/text_format.h"
#include "util/env.h"

namespace ctrbox {

// A rank's share of each input file by bytes (docs/distributed.md): the lines that start in
// part `index` of `count` equal byte ranges of every file. count 1: whole files. Plain text
// files only (a compressed file, standard input or a command cannot be split).
struct ByteShare {
  uint32_t index = 0, count = 1;
};

// Part `share.index` of `share.count` equal byte ranges of a file of `size` bytes: [first,
// second). A line belongs to the part its first byte is in.
std::pair<uint64_t, uint64_t> ByteRange(uint64_t size, ByteShare share);

// Whether `path` can be read by byte ranges: a plain (uncompressed) text file.
StatusOr<bool> SplitsByBytes(Env* env, const std::string& path, DataFormat format);

// One piece of a rank's input when its input is an explicit list (a job of files resumed on
// another number of ranks, docs/distributed.md "Resuming files on another number of ranks"):
// the lines that start in part `part` of `path`, less the first `skip` rows they hold.
struct DataSegment {
  std::string path;
  ByteShare part;
  uint64_t skip = 0;
  bool operator==(const DataSegment&) const = default;
};

struct DataOptions {
  std::vector<std::string> paths;  // files, or directories (read in name order)
  std::string command;             // text formats: read this shell command's stdout instead
  DataFormat format = DataFormat::kCriteo;
  uint32_t num_slots = 0;  // libffm and slots formats (libsvm, libfm: with slot_from position)
  uint32_t num_dense = 0;  // slots format
  SlotFrom slot_from = SlotFrom::kOne;  // libsvm and libfm (data.slot_from)
  bool labels_optional = false;
  size_t max_line_bytes = 1 << 20;
  size_t chunk_bytes = 4 << 20;
  int threads = 1;       // parse / decode workers
  int max_inflight = 4;  // chunks parsed ahead of the consumer
  BadInputOptions bad_input;
  ByteShare byte_share;  // text formats
  // Set: read these segments in order (none: no rows) instead of `paths`, which still give
  // the schema. Text formats (any part) and shards (part 0 of 1).
  std::optional<std::vector<DataSegment>> segments;
  KeySlots key_slots;  // model.shared_slots (text formats and generated rows)
  // Optional: once true, a read waiting on standard input or data.command gives up within
  // ~0.1 s with Cancelled (and the command is stopped), so that a stalled producer cannot hold
  // up a Ctrl-C. Regular files are never waited on.
  const std::atomic<bool>* cancel = nullptr;
  // Optional: opens the reader of these options instead of `format`'s (the feature
  // extractor of a job with a features graph, docs/features.md). It gets the options as the
  // caller has them (a rank's share of the paths, the evaluation paths).
  std::function<StatusOr<std::unique_ptr<class BatchReader>>(Env*, const DataOptions&)> opener;
};

// Thread safety: Next() from one thread at a time.
// How far a reader is through its input: `done` of `total` units (bytes of the files as
// stored — compressed bytes for compressed files —, or generated rows). total 0: unknown.
struct InputProgress {
  uint64_t done = 0, total = 0;
  bool known() const { return total > 0; }
  double fraction() const { return known() ? std::min(1.0, double(done) / double(total)) : 0.0; }
};

class BatchReader {
 public:
  virtual ~BatchReader() = default;
  virtual Schema schema() const = 0;
  // Sets *batch to the next block of rows (at least one) or sets *eof. An error ends the
  // stream; it names the file and line (or block) at fault.
  virtual Status Next(Batch* batch, bool* eof) = 0;
  // Records read so far.
  virtual RecordCounts counts() const = 0;
  // The input consumed by the rows Next has returned so far (safe from any thread).
  virtual InputProgress progress() const { return {}; }
};

// The files that `paths` name: files as given, directories expanded to their regular files
// in name order (for shards, only *.ctrshard), hidden files skipped.
StatusOr<std::vector<std::string>> ExpandDataPaths(Env* env, const std::vector<std::string>& paths,
                                                   DataFormat format);

// A cheap fingerprint of a data file's content, for --resume to tell an input edited in place
// (same size) from the one a checkpoint was taken on: XXH3 over the size, the first and last
// 1 MiB and 64 blocks of 16 KiB spread evenly between (at most ~3 MiB read per file, however
// large). An edit that touches no sampled byte and keeps the size goes unseen.
StatusOr<uint64_t> DataFileFingerprint(Env* env, const std::string& path);

// The schema of `options` (for shards, read from the first file's header).
StatusOr<Schema> ResolveSchema(Env* env, const DataOptions& options);
// k when every row of the data's first 64 KB has the same number k >= 2 of idx:1 tokens (a
// one-hot file with a feature per field, as libFM's are), else 0.
StatusOr<uint32_t> OneHotFields(Env* env, const DataOptions& options);

StatusOr<std::unique_ptr<BatchReader>> OpenReader(Env* env, const DataOptions& options);

// How a text reader with its own decoder turns chunks of whole lines into rows (the feature
// extractor, feature/extractor.h). `decode` runs on the reader's workers, on any chunk in any
// order; `in_order` (optional) runs on the consumer thread on each decoded chunk in input
// order before its rows are handed out, and may drop rows (a stream-wide dedupe). An error of
// either ends the stream.
struct ChunkDecoder {
  Schema schema;
  std::function<void(const TextChunk&, ChunkParseResult*)> decode;
  std::function<Status(ChunkParseResult*)> in_order;
};
// The chunks of whole lines of options' files (every regular file of a directory), or of its
// command's output, one after the other (decompressed as sniffed; format is ignored).
StatusOr<std::unique_ptr<ChunkSource>> OpenTextChunks(Env* env, const DataOptions& options);
// The whole lines of about the first `bytes` of options' input (the whole input, not a rank's
// byte range), for a look at it before reading: an empty chunk when there is none.
StatusOr<TextChunk> ReadFirstChunk(Env* env, const DataOptions& options, size_t bytes = 64 << 10);

// A reader of options' files or command (format is ignored) through `decoder`, with the
// threads, chunking, progress and bad-input accounting of OpenReader.
StatusOr<std::unique_ptr<BatchReader>> OpenTextReaderWith(Env* env, const DataOptions& options,
                                                          ChunkDecoder decoder);

// Sends SIGTERM to the process group of every running data.command. Async-signal-safe: for a
// handler that ends the process at once (a second Ctrl-C), so no command is left orphaned.
void KillDataCommands();

struct SynthOptions;
// Rows [0, rows) of a synthetic data set (io/synth.h) — or `share` of them —, generated by
// `threads` workers in blocks of block_rows (of unit rows with a share) and handed out in
// order.
std::unique_ptr<BatchReader> NewSynthReader(const SynthOptions& options, uint64_t rows, int threads,
                                            uint64_t block_rows = 16384, RowShare share = {});

}  // namespace ctrbox

#endif  // CTRBOX_IO_READER_H_
