// PassReader: the read stage's source. It reads the epochs' examples from a fresh reader per
// epoch and cuts them into passes of at most pass_examples examples; a pass never spans two
// epochs. With a key window (the memory budget's pass sizing, docs/storage.md) each such pass
// is cut further, between its minibatches (batch_size examples from its start, as the trainer
// cuts them), so that the distinct keys of a pass and the passes before it that can be in
// flight with it stay within window_keys, and (pass_memory, device_pass_bytes) so that the
// bytes a pass holds on the host and on the GPUs stay within their shares. The minibatches
// are the same either way, so where passes end does not change the model (shrinking and
// checkpoints count the passes of pass_examples).
//
// Thread safety: not thread-safe; the read stage's thread owns it.
#ifndef CTRBOX_PIPELINE_PASS_READER_H_
#define CTRBOX_PIPELINE_PASS_READER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/key_hashing.h"
#include "io/reader.h"
#include "io/row_gather.h"
#include "pipeline/key_window.h"

namespace ctrbox {

// What a pass holds, as the pass reader counts it.
struct PassShape {
  uint64_t content_bytes = 0;   // its examples' columns (Batch::ContentBytes) less the
                                // offsets' leading 0
  uint64_t key_uses = 0;        // key occurrences
  uint64_t keys = 0;            // distinct keys
  uint64_t batches = 0;         // minibatches
  uint64_t batch_keys = 0;      // distinct keys of each minibatch, added up
  uint64_t rows = 0;            // examples
  uint64_t max_batch_keys = 0;  // the most distinct keys of one minibatch
};
// At least the bytes the pass holds from read to push, as Pass::Gauge counts them: its
// examples (shrunk to fit), working set and working table with rows of row_bytes.
uint64_t PassBytes(const PassShape& shape, uint64_t row_bytes);

struct PassReaderOptions {
  uint64_t pass_examples = 262144;  // the most examples of a pass; REQUIRES: >= 1
  uint32_t epochs = 1;
  // When set, changes every block read first, before its keys are hashed (per-epoch
  // validation's training side, jobs/holdout.h: the rows held back are left out).
  std::function<void(Batch*)> select;
  // ... then, when not whole, only this rank's share of the rows left is kept, counted from
  // the epoch's start (train.deterministic on ranks of files, io/row_share.h: every rank reads
  // every file and keeps its blocks of each global minibatch).
  RowShare share;
  // Not 0: the reader yields only `share`'s rows already, of epochs of this many rows each
  // (generated rows, io/reader.h NewSynthReader); they are all kept.
  uint64_t shared_epoch_rows = 0;
  // features.hashing: every block read is hashed (io/key_hashing.h) before passes are cut,
  // so that passes are sized by the keys the table will see.
  HashingOptions hashing;
  // model.slot_dims: ... then their keys tagged with their slots' tables.
  KeyTables key_tables;
  // ... then, when set, changed by this in read order (a stream job's admission by count,
  // jobs/admission.h: keys not admitted yet are left out).
  std::function<void(Batch*)> filter;
  // Pass sizing by keys (0: off): the distinct keys of window_passes consecutive passes stay
  // within window_keys, passes holding whole minibatches of batch_size examples. A pass of one
  // minibatch may exceed the window through the passes before it (its pull waits for their
  // push), but not max_keys by itself.
  uint64_t window_keys = 0;
  uint32_t window_passes = 1;
  uint32_t batch_size = 1;
  uint64_t max_keys = UINT64_MAX;
  // model.slot_dims: rows of different sizes. Non-empty, each key weighs its table's resident
  // bytes (table_row_bytes[key >> 60]) and the window's weight stays within window_bytes
  // (a minibatch's alone within max_bytes) instead of its keys within window_keys.
  std::vector<uint64_t> table_row_bytes;
  uint64_t window_bytes = 0, max_bytes = UINT64_MAX;
  // Pass sizing by memory as well (0: off; only with the key window): the bytes that
  // memory_passes consecutive passes hold from read to push — their examples, working sets
  // and working tables with rows of row_bytes (RowBlock::BytesPerRow), bounded from above
  // (PassBytes) — stay within pass_memory: each pass holds at most pass_memory /
  // memory_passes, or one minibatch (a pass holds at least one).
  uint64_t pass_memory = 0;
  uint32_t memory_passes = 1;
  uint64_t row_bytes = 0;
  // Pass sizing by GPU memory (0: off; device: gpu): a pass's GPU bytes (device_bytes of its
  // shape: GpuPassBytesBound) stay within device_pass_bytes, or it is one minibatch. Works
  // with or without the key window (window_keys 0: passes are cut by this alone).
  uint64_t device_pass_bytes = 0;
  std::function<uint64_t(const PassShape&)> device_bytes;
  // A rank of a distributed job with passes sized as above (docs/distributed.md, "Pass
  // sizing"): the ranks cut their shares of every pass at the same minibatch, so the global
  // minibatches stay those of passes of pass_examples. Called on every rank at each step of a
  // cut with `n` values it replaces with their sums over the ranks (AllReduceSum on the read
  // stage's channel). Null: one process.
  std::function<Status(uint64_t* values, size_t n)> agree;
  // With agree: the ranks (owners) and a key's owner. The key window is then the owners':
  // the rows an owner pins for the passes in flight are the keys it owns of every rank's
  // passes, so each rank keeps a window per owner and the ranks add them up (an upper bound:
  // a key two ranks use counts twice) to keep every owner's within window_keys.
  uint32_t owners = 0;
  std::function<uint32_t(uint64_t key)> owner_of;
  // Optional: what to add to the error when one minibatch alone holds more than window_keys
  // distinct keys (`keys` of them): the budget it would need.
  std::function<std::string(uint64_t keys)> key_limit_hint;
};

// Where a pass lies in the passes of pass_examples ("grid passes"): table shrinking and
// checkpoints count grid passes, so they happen at the same points whatever the pass sizing.
struct PassPlace {
  uint64_t grid_index = 0;  // grid passes of the job before this pass's one
  bool first = true;        // the pass begins its grid pass
  bool last = true;         // ... and ends it
};

// How passes were cut, for the train report.
struct PassSizingStats {
  uint64_t passes = 0;
  uint64_t min_examples = 0, max_examples = 0;
  uint64_t closed_by_keys = 0;        // passes closed by the key window (the others by
                                      // pass_examples or the end of an epoch)
  uint64_t max_window_keys = 0;       // the most distinct keys the window held at a cut
  uint64_t max_window_row_bytes = 0;  // ... and their most weight (table_row_bytes) at a cut
  uint64_t max_pass_keys = 0;         // the most distinct keys of one pass
  uint64_t closed_by_memory = 0;      // passes closed by pass_memory
  uint64_t closed_by_device = 0;      // passes closed by device_pass_bytes
  uint64_t max_device_bytes = 0;      // the most GPU bytes (device_bytes) of one pass
  uint64_t max_window_bytes = 0;      // the most bytes (PassBytes) of memory_passes passes
  uint64_t max_pass_bytes = 0;        // the most bytes of one pass
  uint64_t max_batch_bytes = 0;       // the most bytes of one minibatch as a pass: above
                                      // pass_memory / memory_passes, passes of one may exceed it
};

// Opens the input anew (once per epoch).
using ReaderFactory = std::function<StatusOr<std::unique_ptr<BatchReader>>()>;

class PassReader {
 public:
  PassReader(ReaderFactory open, PassReaderOptions options);

  // Opens the first reader up front so the schema is known before training starts.
  Status Open();
  // Closes the input: its readers stop reading ahead (a reader that only probed the schema).
  void Close() { reader_.reset(); }
  Schema schema() const { return schema_; }
  // Record counts of the epochs read to the end.
  const RecordCounts& counts() const { return counts_; }
  // How far reading is through the whole input, every epoch counted (the input's
  // InputProgress; < 0 when unknown: a pipe or a command), and the rows read so far. Safe
  // from any thread: the train stage's progress reads them.
  double InputFraction() const { return fraction_.load(std::memory_order_relaxed); }
  uint64_t rows_read() const { return rows_read_.load(std::memory_order_relaxed); }
  // How the passes cut so far were sized (the passes a resume skipped included).
  const PassSizingStats& sizing() const { return sizing_; }
  const PassReaderOptions& options() const { return options_; }

  // Fills *examples with the next pass; sets *eof (and leaves it empty) at the end.
  // Fails with the reader's error (I/O, too many malformed records), or ResourceExhausted
  // when one minibatch alone holds more than window_keys distinct keys.
  // The pass's rows are copied from the reader's blocks once, at the pass's end, on `pool`
  // (may be null); *examples's memory is reused.
  Status Next(Batch* examples, bool* eof, PassPlace* place = nullptr, ThreadPool* pool = nullptr);

  // Reads past the first `passes` passes (a resumed job's trained data), which must hold
  // `examples` examples (nullopt: not checked; *seen, when given, gets what they held): the
  // same passes the job cut before. FailedPrecondition if not.
  // may_end_early: a rank of a distributed job, whose passes after its input ended were empty
  // (the input may end before `passes` passes, having held `examples` examples).
  Status Skip(uint64_t passes, std::optional<uint64_t> examples, bool may_end_early = false,
              uint64_t* seen = nullptr);
  // Reads past the first `grid_passes` passes of pass_examples (the pieces the window cut
  // them into, whatever they were), which must hold `examples` examples: the data a job of
  // another number of ranks trained, its checkpoint at the end of a grid pass.
  Status SkipGridPasses(uint64_t grid_passes, std::optional<uint64_t> examples,
                        bool may_end_early = false, uint64_t* seen = nullptr);

 private:
  ReaderFactory open_;
  const PassReaderOptions options_;
  std::unique_ptr<BatchReader> reader_;
  enum class Fill { kRows, kRowsThenEpochEnd, kEpochEnd, kEnd };
  // Appends ranges of rows to *out until *rows (their rows, counted up) reaches `limit`, the
  // epoch ends (the rows read are the epoch's last), or the input ends.
  StatusOr<Fill> FillTo(std::vector<RowRange>* out, uint64_t* rows, uint64_t limit);
  // Reads the next minibatch (`limit` rows at most) into pending_: a range of one block (one
  // spanning two blocks is copied into a block of its own).
  StatusOr<Fill> FillPending(uint64_t limit);
  void ClosePass(const Batch& examples, bool by_keys, bool by_memory, bool by_device);
  // The pending minibatch against the limits, with the pass so far.
  struct Verdict {
    bool keys = false, memory = false, device = false;
    KeyWindow::Counts with;
    std::vector<uint64_t> owner_with;  // agreed: each owner's window with the minibatch
    PassShape shape;                   // the pass with the minibatch
    bool any() const { return keys || memory || device; }
  };
  Verdict Judge();
  // The pending minibatch into the pass (ResourceExhausted when over the keys alone).
  Status Take(const Verdict& v);
  // Next with options_.agree: every step agreed with the other ranks. Each votes to take its
  // next minibatch, or to close the pass before it (over a limit), or that its grid pass
  // ended. Any close closes every rank's pass (once a step took something: a pass holds at
  // least one); else the ranks with a minibatch take it; when none has one the grid pass ends
  // on every rank. A rank whose grid pass ended first takes empty steps until then, as one
  // whose grid pass was short trains empty minibatches.
  Status NextAgreed(Batch* examples, bool* eof, PassPlace* place);
  bool SizedByBytes() const { return options_.pass_memory > 0 || options_.device_pass_bytes > 0; }

  Schema schema_;
  std::shared_ptr<Batch> block_;  // the reader's last block (null: none)
  // The last blocks read (block_ among them), for their memory; FreeBlock: one no range holds.
  static constexpr size_t kKeptBlocks = RowGather::kFlushBlocks + 2;
  std::vector<std::shared_ptr<Batch>> blocks_;
  std::shared_ptr<Batch> FreeBlock();
  size_t begin_ = 0;              // rows of block_ already handed out
  RowGather gather_;              // the pass being read
  ThreadPool* pool_ = nullptr;    // Next's
  std::vector<RowRange> ranges_;  // FillTo's scratch
  uint32_t epoch_ = 0;
  uint64_t epoch_rows_ = 0;        // rows of the epoch so far (after select), for options_.share
  uint64_t ended_epoch_rows_ = 0;  // ... of the epoch that ended last
  // With a share: whether the epoch that just ended closes with a pass of the stream (every
  // rank's) that holds none of this rank's rows; the rank then has an empty pass there.
  bool ShareMissesEpochTail() const;
  uint64_t grid_pos_ = 0;            // key-sized: examples of the current grid pass cut so far
  uint64_t grid_count_ = 0;          // grid passes ended
  RowRange pending_;                 // key-sized: the next minibatch, read but not yet in a pass
  bool pending_ends_epoch_ = false;  // ... and it is its epoch's last rows
  bool pending_counted_ = false;     // ... and Judge counted it (then it closed the pass)
  bool grid_ended_ = false;          // agreed: this rank's grid pass ended (the others' not)
  bool grid_open_ = false;           // agreed: the last pass ended mid grid pass
  std::vector<uint64_t> votes_;      // agreed: a step's votes
  std::unique_ptr<KeyWindow> window_;
  std::vector<std::unique_ptr<KeyWindow>> owner_windows_;  // agreed: per owner
  std::vector<std::vector<uint64_t>> owner_keys_;          // ... the pending keys by owner
  PassShape shape_;                                        // memory-sized: the current pass
  // Passes sized by GPU memory alone (no key window, no host memory share, one process): a
  // minibatch is taken without counting its keys while the pass's bound with every key use
  // a distinct key (bound_) fits device_pass_bytes, for then the exact count could not cut
  // it either; once the bound does not fit, the minibatches taken so far (their key ranges in
  // the pass and content bytes: uncounted_) are counted and the pass goes on counted. Counting
  // keys was most of the read stage's work with device: gpu.
  bool DeviceOnly() const {
    return options_.device_pass_bytes > 0 && options_.window_keys == 0 &&
           options_.pass_memory == 0 && !options_.agree && owner_windows_.empty();
  }
  struct Uncounted {
    size_t key_begin, key_end;  // in the pass's batch (the gather's keys)
    uint64_t content_bytes, rows;
  };
  std::vector<Uncounted> uncounted_;
  PassShape bound_;
  bool counting_ = true;  // the current pass is counted key by key
  // Counts the uncounted minibatches into the window and shape_ (as Judge and Take would have).
  void CountUncounted(const Batch& examples);
  std::deque<uint64_t> recent_bytes_;  // ... and the bytes of the passes before it
  uint64_t recent_sum_ = 0;            // (memory_passes - 1 of them), added up: the report's
                                       // max_window_bytes
  RecordCounts counts_;
  std::atomic<double> fraction_{-1.0};
  std::atomic<uint64_t> rows_read_{0};
  PassSizingStats sizing_;
};

}  // namespace ctrbox

#endif  // CTRBOX_PIPELINE_PASS_READER_H_
