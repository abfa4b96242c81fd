// The pass engine's own options: how the stages overlap (PipelineOptions, the pipeline.* keys)
// and what the stages read of the job (PassStageOptions). The jobs (src/jobs/) fill them in
// from their JobConfig; the engine sees nothing else of it.
#ifndef CTRBOX_PIPELINE_OPTIONS_H_
#define CTRBOX_PIPELINE_OPTIONS_H_

#include <cstdint>

#include "util/status.h"

namespace ctrbox {

class Extractor;

struct PipelineOptions {
  bool enabled = true;              // overlap the stages (false: one after the other)
  uint64_t pass_examples = 262144;  // examples per pass (the most, when sized by memory)
  // With a memory budget over an SSD tier: cut passes so that the rows the passes in flight
  // pin together fit the budget (docs/storage.md, "Pass sizing").
  bool size_by_memory = true;
  // ... and so that the passes alive at once (read to push: 3 x queue_depth + 4) hold at
  // most this many bytes of examples, working sets and working tables. 0: auto, a quarter
  // of the memory budget and at least kMinPassMemory.
  uint64_t pass_memory = 0;
  static constexpr uint64_t kMinPassMemory = uint64_t{64} << 20;
  // Passes each queue between two stages holds; 0: none, a stage hands its pass straight to
  // the next one (it waits until that one takes it), so the fewest passes are alive at once.
  uint32_t queue_depth = 1;
  // The stages' pools (the job file's defaults: the number of CPUs). The read stage's builds
  // the working sets; the reader's own decode threads are data.reader_threads.
  int read_threads = 1;
  int pull_threads = 2;
  int push_threads = 1;
  // The nice value the job's threads other than the train stage's add to the process's
  // (util/sys.h SetBackgroundNice; docs/pipeline.md, "Threads"): where the job fills the
  // cores, the train stage, the slowest, takes them first. 0: all alike.
  int background_nice = kDefaultBackgroundNice;
  static constexpr int kDefaultBackgroundNice = 10;

  // OK, or InvalidArgument naming the bad pipeline.* keys.
  Status Validate() const;
};

// What the stages take from the job (train.* and dist.* keys).
struct PassStageOptions {
  uint32_t batch_size = 2048;            // train.batch_size: the minibatch
  uint32_t shrink_every_passes = 0;      // train.shrink_every_passes (0: never)
  bool dry_run = false;                  // train.dry_run: every stage, no computation
  double progress_seconds = 2.0;         // train.progress_seconds: between two progress reports
  bool owner_updates = true;             // dist.sparse_updates: owner
  const Extractor* extractor = nullptr;  // the job's extract stage, for its busy time; may be null
};

}  // namespace ctrbox

#endif  // CTRBOX_PIPELINE_OPTIONS_H_
