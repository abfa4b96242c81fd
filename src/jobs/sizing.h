// Defaults that fit the data (docs/model.md, "Defaults that fit the data"): a job that does
// not set train.batch_size gets one sized from its data's rows, so that a few thousand rows
// train as many steps as a model needs; the rule and its measurements are in the doc.
#ifndef CTRBOX_JOBS_SIZING_H_
#define CTRBOX_JOBS_SIZING_H_

#include <cstdint>
#include <string>

#include "jobs/job.h"
#include "util/env.h"
#include "util/status.h"

namespace ctrbox {

// The rows of a job's training data, estimated: generated rows exactly; text files from
// their sizes and the lines of their first 64 KB (the bytes as stored: compressed files too);
// unknown (0) for a command, standard input or shards.
struct RowEstimate {
  uint64_t rows = 0;
  std::string how;  // for the log: "generated", "estimated from 3 files of 12.5 MB"
};
StatusOr<RowEstimate> EstimateRows(Env* env, const JobConfig& job);

// The batch a job of `rows` rows per epoch trains with: the largest power of two from 128 to
// 2048 that still gives an epoch at least kMinStepsPerEpoch steps.
inline constexpr uint64_t kMinStepsPerEpoch = 256;
uint32_t BatchForRows(uint64_t rows);

// Sets what the job leaves to the data (train.batch_size, unless given; a multiple of the
// ranks), saying so in the log.
Status SizeToTheData(Env* env, int ranks, JobConfig* job);

}  // namespace ctrbox

#endif  // CTRBOX_JOBS_SIZING_H_
