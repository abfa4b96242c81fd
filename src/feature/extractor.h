// The extract stage (docs/features.md): the main view's chunks parsed into columns, run
// through the feature graph, and assembled into the Batches every other stage reads; the side
// views loaded once per job.
//
// Thread safety: an Extractor is immutable after Open except its statistics (atomic):
// ExtractChunk runs on every reader worker at once.
#ifndef CTRBOX_FEATURE_EXTRACTOR_H_
#define CTRBOX_FEATURE_EXTRACTOR_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "feature/column.h"
#include "feature/device_layers.h"
#include "feature/graph.h"
#include "feature/ops.h"
#include "feature/view_parse.h"
#include "io/reader.h"
#include "io/text_format.h"
#include "util/thread_pool.h"

namespace ctrbox {

// How a chunk's graph runs (docs/features.md, "Scheduling").
enum class Schedule { kLayered, kSequential };
// Where the fixed-width operators of each layer run (docs/features.md, "On a GPU").
enum class FeatureDevice { kCpu, kEmulatedGpu, kCuda };

// What the extract stage did, over every chunk of the job (epochs and evaluation included).
struct ExtractTotals {
  uint64_t chunks = 0;
  uint64_t rows_in = 0;     // rows the main view's parser made
  uint64_t rows_out = 0;    // examples handed on
  uint64_t filtered = 0;    // rows a filter dropped
  uint64_t duplicates = 0;  // rows a dedupe dropped
  uint64_t bad_rows = 0;    // rows an operator could not compute, or with a bad label
  double parse_seconds = 0, graph_seconds = 0, assemble_seconds = 0;  // worker time
  std::vector<uint64_t> join_hits, join_lookups;  // per join operator, in plan order
  std::string device;                             // where the fixed-width operators ran
  uint64_t device_launches = 0;                   // kernel launches there
  uint64_t side_rows = 0, side_bytes = 0;
  RecordCounts side_counts;

  // The extraction since `earlier` (a snapshot of the same extractor): the counts and times
  // of the chunks read since; the side views (loaded once) as they are.
  ExtractTotals Since(const ExtractTotals& earlier) const;
  // Adds `more`'s chunks (counts and times) to these.
  void Add(const ExtractTotals& more);
};

class Extractor {
 public:
  struct Options {
    size_t chunk_bytes = 4 << 20;
    size_t max_line_bytes = 1 << 20;
    BadInputOptions bad_input;
    Schedule schedule = Schedule::kLayered;
    // Threads of a chunk's fused layers (0 or 1: the reader worker alone). Tests use several
    // to check that any split of the row blocks gives the same columns.
    int layer_threads = 0;
    // The layered schedule's fixed-width operators on a GPU (or its emulation), one launch
    // per layer (fused) or per operator.
    FeatureDevice device = FeatureDevice::kCpu;
    bool fused = true;
    KeySlots key_slots;  // model.shared_slots: the seed slot of each output slot
    // A column of the graph (an int or string of the main view, or one an operator makes)
    // whose value each output row carries in ChunkParseResult::row_ids: predict's per-row
    // scores (`ctrbox predict --id-column`). Empty: none.
    std::string id_column;
    // Records of a server (`ctrbox serve -c`, docs/serve.md): a row's label may be missing or
    // anything (it is not read: 0); each output row's line number goes to
    // ChunkParseResult::row_lines; without main view files, the main view's columns are in
    // their declared order.
    bool serving = false;
  };

  // Loads the side views and reads the main view's header (the first file's first line, for
  // csv/tsv with a header; a command's output must start with the declared columns' names).
  static StatusOr<std::shared_ptr<Extractor>> Open(Env* env,
                                                   std::shared_ptr<const FeaturePlan> plan,
                                                   const DataOptions& main, const Options& options);

  Schema schema() const;
  const FeaturePlan& plan() const { return *plan_; }
  const SideTables& sides() const { return sides_; }

  // The reader's decode: parses `chunk` of the main view and extracts it into r.
  void ExtractChunk(const TextChunk& chunk, ChunkParseResult* r) const;
  // The columns of the parsed `table` for every operator (tests). Fails only on a device
  // error.
  Status RunGraph(ColumnTable* table, Arena* arena) const;
  // ExtractChunk's assembly: row `row` of the graph's output, kept with label y, appended to
  // r's batch (with its line, id and dedupe tags where asked for); the joins' hits counted.
  void AppendRow(const ColumnTable& t, uint32_t row, double y, ChunkParseResult* r) const;
  void CountJoinHits(const ColumnTable& t) const;
  // Parses a chunk into its main-view columns (tests); the table's other columns are empty.
  Status ParseMain(const TextChunk& chunk, Arena* arena, ColumnTable* table,
                   ParseOutcome* outcome) const;

  ExtractTotals totals() const;
  // The stream-wide step that runs on the consumer, in input order, after ExtractChunk: the
  // dedupe (null without one). One per pass over the input (a fresh dedupe).
  static std::function<Status(ChunkParseResult*)> InOrderStep(std::shared_ptr<Extractor> x);
  // Whether every file of `data` (other files of the main view: held-out ones) starts with the
  // header the main view's first file has, or with data (no header), read now, before any row
  // is extracted (the rows themselves would count into the totals). InvalidArgument naming
  // the file otherwise.
  Status CheckHeaders(Env* env, const DataOptions& data) const;

 private:
  Extractor() = default;
  friend class DedupeStep;

  std::shared_ptr<const FeaturePlan> plan_;
  Options options_;
  SideTables sides_;
  RecordCounts side_counts_;
  std::unique_ptr<ViewParser> main_parser_;
  std::unique_ptr<ThreadPool> layer_pool_;
  std::vector<int> joins_;  // operator ids of the joins
  int id_col_ = -1;         // Options::id_column's column id

  // Device layers not in use (one per reader worker at most is in use at a time).
  StatusOr<std::unique_ptr<DeviceLayers>> TakeDevice() const;
  void GiveDevice(std::unique_ptr<DeviceLayers> d) const;
  Status RunOnDevice(DeviceLayers* device, ColumnTable* table, Arena* arena) const;
  mutable std::mutex device_mu_;
  mutable std::vector<std::unique_ptr<DeviceLayers>> idle_devices_;
  mutable std::string device_name_;

  struct Stats {
    std::atomic<uint64_t> chunks{0}, rows_in{0}, rows_out{0}, filtered{0}, duplicates{0},
        bad_rows{0};
    std::atomic<uint64_t> parse_ns{0}, graph_ns{0}, assemble_ns{0}, launches{0};
    std::unique_ptr<std::atomic<uint64_t>[]> join_hits, join_lookups;
  };
  mutable Stats stats_;
};

// A reader of the main view (data's paths or command) through the extractor: the workers
// extract chunks, and a stream-wide dedupe runs in input order. A fresh dedupe per reader (per
// epoch).
StatusOr<std::unique_ptr<BatchReader>> OpenFeatureReader(Env* env, const DataOptions& data,
                                                         std::shared_ptr<Extractor> extractor);

}  // namespace ctrbox

#endif  // CTRBOX_FEATURE_EXTRACTOR_H_
