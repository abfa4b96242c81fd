// JobConfig: everything one train / eval / predict job needs, as parsed from the YAML job
// file and --set overrides (cli/config.cc documents every key and default).
#ifndef CTRBOX_JOBS_JOB_H_
#define CTRBOX_JOBS_JOB_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/model_spec.h"
#include "exec/options.h"
#include "feature/extractor.h"
#include "feature/graph.h"
#include "io/reader.h"
#include "io/synth.h"
#include "model/ctr_model.h"
#include "pipeline/options.h"
#include "pipeline/pass_reader.h"
#include "table/tiered_table.h"

namespace ctrbox {

struct TrainOptions {
  int threads = 2;
  uint64_t seed = 1;
  // train.deterministic: canonical gradient sums (CtrModel::SumOrder), the same model on any
  // number of ranks dividing the batch's sum blocks and any number of GPUs per rank up to
  // kMaxCanonicalGpus, on the CPU or GPUs (which needs gpu.scatter=segment).
  bool deterministic = false;
  // train.continue (--continue): train the model already in model_dir further. Without it (or
  // --fresh) a model there is refused: re-running a command never continues one unasked.
  bool continue_model = false;
  uint32_t batch_size = 2048;
  uint32_t epochs = 1;
  // Per-epoch validation (docs/model.md, "Validation and early stopping"): this share of the
  // training rows is held back (jobs/holdout.h) and scored after every epoch; the epoch
  // of the lowest validation logloss is the model kept. -1: unset (0.1 with epochs: auto,
  // else 0: no validation).
  double validation_fraction = -1;
  // train.epochs: auto — epochs until the validation logloss has not improved for
  // `patience` epochs in a row, at most max_epochs.
  bool epochs_auto = false;
  uint32_t max_epochs = 0;  // 0: unset (20); set, it needs epochs: auto
  uint32_t patience = 0;    // 0: unset (2); set, it needs epochs: auto
  uint32_t MaxEpochs() const { return max_epochs != 0 ? max_epochs : 20; }
  uint32_t Patience() const { return patience != 0 ? patience : 2; }
  // The epochs the job trains at most.
  uint32_t EpochLimit() const { return epochs_auto ? MaxEpochs() : epochs; }
  double ValidationFraction() const {
    return validation_fraction >= 0 ? validation_fraction : epochs_auto ? 0.1 : 0.0;
  }
  bool validating() const { return ValidationFraction() > 0; }
  uint32_t shrink_every_passes = 0;  // 0: never shrink
  std::string metrics_path;          // "" means <model_dir>/metrics.jsonl
  double progress_seconds = 2.0;
  // Runs every stage on every pass exactly as training would (read, decode, working sets,
  // pulls, with device: gpu the plan and the staging, pushes) but computes nothing: no
  // gradients, no metrics, no model saved, no checkpoint; the report's examples_per_s is the
  // input pipeline's feed rate (docs/pipeline.md, "Dry runs").
  bool dry_run = false;

  // OK, or InvalidArgument naming the first bad key (train.threads, train.batch_size, ...).
  Status Validate() const;
};

// A job of several ranks (docs/distributed.md).
struct DistOptions {
  // An exchange that waits this long for the other ranks fails, and the rank aborts the job
  // (a rank hangs, or its machine stopped answering). Above the longest a rank may work
  // between two exchanges: a pass's read or pull, a checkpoint, the final save.
  double timeout_seconds = 600;
  // dist.sparse_updates: "owner" (true) — only a key's owner applies its sparse updates and
  // each rank gets the rows its next minibatch uses that changed — or "replicated" (false):
  // every rank holding a key applies every update of it. The same model bit for bit; owner
  // updates send fewer bytes as the ranks grow (docs/distributed.md, "Owner updates").
  bool owner_updates = true;
  // The job's ranks (1: one process). Not a key: a distributed job sets it.
  int ranks = 1;
};

// Generated data, used when a job names no data paths.
struct GeneratedData {
  DataFormat layout = DataFormat::kCriteo;
  uint64_t rows = 500000;
  uint64_t test_rows = 100000;
  uint64_t seed = 11;        // train rows; the test rows use seed + 1
  double vocab_scale = 1.0;  // long-tail knobs (io/synth.h)
  double zipf = 0.0;
  // A rank's share of the rows (train and test alike; docs/distributed.md). Not a job key: a
  // distributed job sets it.
  RowShare share;
};

// A rank's input as an explicit list of file segments (data.segments): a job of files resumed
// on another number of ranks (docs/distributed.md, "Resuming files on another number of
// ranks"). Its segments start where the job stood at the checkpoint it was planned from.
struct SegmentPlan {
  uint32_t from_ranks = 0;  // the ranks that committed that checkpoint
  uint64_t passes = 0;      // the job's passes before the stream's first
  uint64_t examples = 0;    // this rank's examples counted before the stream's first
  std::vector<DataSegment> segments;

  nlohmann::json ToJson() const;
  // Corruption naming the field when `j` is no plan.
  static StatusOr<SegmentPlan> FromJson(const nlohmann::json& j);
};

// A stream job (docs/routine.md): partitions of stream.root taken in order as they land, each
// first tested on, then trained on, once.
enum class LateRule { kSkip, kFail, kWait };
std::string_view LateRuleName(LateRule r);
bool ParseLateRule(std::string_view name, LateRule* out);

struct StreamOptions {
  std::string root;  // "": not a stream job
  std::string layout = "{day}/{hour}";
  std::string done_file = "_SUCCESS";
  std::string start;  // the first partition ("": the first ready one when the job starts)
  std::string until;  // stop after this partition ("": run until stopped)
  double poll_seconds = 10;
  // A partition missing while a later one is ready is waited for this long, then skipped or
  // fails the job (on_late); kWait waits without end.
  double max_wait_seconds = 3600;
  LateRule on_late = LateRule::kSkip;
  // Partitions that cannot be the next one yet (docs/routine.md, "Partitions from the future"):
  // a ready partition that begins more than max_ahead_seconds after the clock (layouts of days
  // and hours), or that lies more than max_gap partitions after the next one (0: no limit), is
  // not taken, and makes no partition late, until the clock or the stream reaches it.
  double max_ahead_seconds = 86400;
  uint32_t max_gap = 1000;
  // table.ttl_partitions: keys not trained in the last this many partitions are deleted (0:
  // never).
  uint32_t ttl_partitions = 0;
  // table.admit.*: a key gets a row once seen min_count times (0 or 1: every key), counted
  // by a counting Bloom filter of 2^admit_bloom_bits one-byte counters.
  uint32_t admit_min_count = 0;
  uint32_t admit_bloom_bits = 24;
  bool enabled() const { return !root.empty(); }
};

// Versions for serving (docs/routine.md): a delta every delta_every partitions, a base every
// base_every versions, the newest keep_bases bases kept with their deltas.
struct ServingOptions {
  std::string dir;  // "": nothing published
  uint32_t delta_every = 1;
  uint32_t base_every = 24;
  uint32_t keep_bases = 2;
  uint32_t quant_bits = 0;  // serving rows' embedding codes (0: as the table stores them)
  float quant_range = 1.0f;
};

// Where the job's data comes from: its files (data.paths, data.command, generated data), or a
// stream's partitions, the first one's files in data.paths or, for a resumed stream job, none
// yet (its schema is its checkpoint's; its extract stage opens on the first partition read).
enum class JobData { kFiles, kStream };

struct JobConfig {
  DataOptions data;                     // training (or eval / predict) input
  std::vector<std::string> eval_paths;  // train: data to evaluate on after training
  ByteShare eval_byte_share;            // ... a rank's byte ranges of them (docs/distributed.md)
  GeneratedData generated;
  ModelSpec spec;         // schema filled in from the data
  TieredOptions storage;  // the sparse table's tiers (the layout is set at run time; the
                          // table validates them when it opens: TieredOptions::Validate)
  TrainOptions train;
  PipelineOptions pipeline;
  DistOptions dist;
  std::string model_dir;
  // predict through a feature graph: the column whose value is written beside each row's
  // probability (data.id_column, --id-column).
  std::string id_column;
  bool fresh = false;      // train: ignore a model already in model_dir (and old checkpoints)
  CheckpointOptions ckpt;  // checkpoints of the train job (ckpt.dir empty: none)
  bool resume = false;     // train: continue from the newest checkpoint in ckpt.dir
  bool gpu = false;        // device: gpu — the train stage on GPUs (gpu/trainer.h)
  GpuOptions gpu_options;
  StreamOptions stream;
  ServingOptions serving;
  // Set: data.segments is this plan's (one pass over them: the epochs are in the segments).
  std::optional<SegmentPlan> segment_plan;
  // Set: this rank reads every file of data.paths and trains this share of the rows, blocks
  // of its global minibatches (train.deterministic on ranks of files, docs/distributed.md).
  // Not a job key: ShareJob sets it.
  std::optional<RowShare> file_share;
  // The job YAML's feature graph (docs/features.md); null: the data is read as data.format.
  std::shared_ptr<const FeaturePlan> features;
  // train --format csv / tsv (docs/features.md, "From a CSV file in one command"): the label
  // column of the guessed graph (data.label_column; "": by its name), and the guessed job as
  // a file, which the train command writes beside the model.
  std::string label_column;
  std::string guessed_job;
  // Every key the job set, with its value as given (YAML, --set, the Python module's keys),
  // and the command's flags (--data, --model-dir, ...): the ranks of a distributed job
  // compare them before anything is read (defaults that follow the machine are not here).
  std::map<std::string, std::string> settings_given;
  // What the job leaves unset (train.batch_size) is sized from its data (jobs/sizing.h):
  // set by the config builder (the command line, job files, Python); a JobConfig built in
  // code gets exactly the values it holds.
  bool size_to_data = false;
  // Its extract stage once AttachFeatures opened it (the side views loaded); data.opener
  // reads through it.
  std::shared_ptr<Extractor> extractor;

  // The job's settings are consistent: every options struct's Validate, and the rules
  // between them (--resume needs ckpt.dir; train.deterministic needs gpu.scatter=segment).
  // Called once, by the entry points (RunTrain, RunEval, RunPredict), before anything is
  // opened. Returns InvalidArgument naming the key.
  Status Validate() const;

  // The pass reader's options: passes of pipeline.pass_examples examples, or, with a memory
  // budget over an SSD tier and pipeline.size_by_memory, sized by keys so that the rows of
  // the passes that can be pinned at once (pull to push: 2 x queue_depth + 3, pipelined or
  // not, so both cut the same passes) take at most kPinnedShare of the budget's row bytes,
  // and the passes alive at once at most pipeline.pass_memory bytes.
  // On `ranks` ranks (PassOptionsOnRanks; the GPU pass bound counts the canonical sums' nodes
  // of the rank that takes the most).
  PassReaderOptions PassOptions(uint32_t ranks = 1) const;
  static constexpr double kPinnedShare = 0.6;
  // Evaluation pins one chunk at a time: its distinct keys may take the whole pinned share of
  // the budget, and the copy of their rows it predicts from (a RowBlock) a quarter of the
  // pass memory (the rest for what grows with it: the chunk's examples, its key window and
  // working set, the pull's buffers, measured at about as much again), so that evaluating
  // after training holds no more beside the table than the passes in flight did (the pinned
  // share alone is ~0.45x the budget in rows: 780 MB at a 2 GB budget; half the pass memory
  // made the evaluation the peak of a budgeted run, docs/storage.md "Memory beside the
  // budget"). The chunks do not change a prediction (pipeline/eval_chunks.h). 0 (no limit)
  // without a budget or with pipeline.size_by_memory off.
  uint64_t EvalChunkKeys() const {
    const PassReaderOptions o = PassOptions();
    if (o.window_keys == 0 || o.row_bytes == 0) return o.window_keys;
    return std::max<uint64_t>(1, std::min(o.window_keys, o.pass_memory / 4 / o.row_bytes));
  }

  // What the pass engine's stages read of the job (train.* and dist.* keys).
  PassStageOptions StageOptions() const {
    PassStageOptions o;
    o.batch_size = train.batch_size;
    o.shrink_every_passes = train.shrink_every_passes;
    o.dry_run = train.dry_run;
    o.progress_seconds = train.progress_seconds;
    o.owner_updates = dist.owner_updates;
    o.extractor = extractor.get();
    return o;
  }

  // The table's options for a model of `layout`. storage.lfu_half_life not given (not in
  // settings_given) is kLfuHalfLifeWithoutQueues pulls when the passes go without queues
  // (pipeline.queue_depth 0):
  // the half-life counts pulls, and those passes hold about twice the minibatches of the
  // one-minibatch passes its default of 64 was chosen on (docs/storage.md, "Passes handed on
  // without queues"), so the rows age over as many examples as before.
  TieredOptions StorageFor(const ValueLayout& layout) const;
  static constexpr double kLfuHalfLifeWithoutQueues = 32;
};

// Canonical sums on n ranks for a global minibatch of batch_rows: n divides its number of sum
// blocks (each rank's equal share of a global minibatch is then whole blocks: nodes of the
// sums' tree, CtrModel::SumOrder).
inline bool CanonicalRanks(uint32_t n, uint32_t batch_rows) {
  return n >= 1 && batch_rows % n == 0 && CtrModel::SumBlocksFor(batch_rows) % n == 0;
}
// Canonical sums on the job's train stage: the CPU, or up to kMaxCanonicalGpus GPUs per rank
// (more sum in their own fixed order: docs/distributed.md).
inline bool CanonicalDevice(const JobConfig& job) {
  return !job.gpu || job.gpu_options.gpus <= kMaxCanonicalGpus;
}
// The order of the job's gradient sums on rank `rank` of `ranks` (CtrModel::SumOrder,
// docs/distributed.md): canonical with train.deterministic on the CPU or on the GPUs of a rank
// (the GPU step then sums as the CPU model does: gpu/step_canonical.h), so that any number of
// ranks dividing the batch's sum blocks trains one process's model; the fastest fixed order
// otherwise. (job.train.batch_size is a rank's share on ranks.)
CtrModel::SumOrder SumOrderFor(const JobConfig& job, uint32_t ranks, uint32_t rank);

}  // namespace ctrbox

#endif  // CTRBOX_JOBS_JOB_H_
