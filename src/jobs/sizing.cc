#include "jobs/sizing.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "io/reader.h"
#include "jobs/data.h"
#include "util/logging.h"
#include "util/parse.h"

namespace ctrbox {

StatusOr<RowEstimate> EstimateRows(Env* env, const JobConfig& job) {
  RowEstimate e;
  if (IsGenerated(job.data)) {
    e.rows = job.generated.rows;
    e.how = "generated";
    return e;
  }
  if (!job.data.command.empty() || job.data.paths.empty() ||
      job.data.format == DataFormat::kShards) {
    return e;  // unknown
  }
  ASSIGN_OR_RETURN(std::vector<std::string> files,
                   ExpandDataPaths(env, job.data.paths, job.data.format));
  uint64_t bytes = 0;
  for (const std::string& f : files) {
    if (f == "-") return e;
    ASSIGN_OR_RETURN(uint64_t size, env->GetFileSize(f));
    bytes += size;
  }
  if (bytes == 0) return e;
  // The lines of the first 64 KB as read, against the bytes they took as stored.
  DataOptions first = job.data;
  first.paths = {files[0]};
  ASSIGN_OR_RETURN(const TextChunk chunk, ReadFirstChunk(env, first));
  if (chunk.progress == 0) return e;
  const uint64_t lines =
      static_cast<uint64_t>(std::count(chunk.data.begin(), chunk.data.end(), '\n'));
  e.rows = static_cast<uint64_t>(static_cast<double>(lines) * bytes / chunk.progress);
  e.how = fmt::format("estimated from {} file(s) of {}", files.size(), FormatBytes(bytes));
  return e;
}

uint32_t BatchForRows(uint64_t rows) {
  const uint64_t most = std::max<uint64_t>(rows / kMinStepsPerEpoch, 1);
  return static_cast<uint32_t>(std::clamp<uint64_t>(std::bit_floor(most), 128, 2048));
}

Status SizeToTheData(Env* env, int ranks, JobConfig* job) {
  if (!job->size_to_data || job->settings_given.contains("train.batch_size")) {
    return Status::OK();
  }
  ASSIGN_OR_RETURN(RowEstimate e, EstimateRows(env, *job));
  if (e.rows == 0) return Status::OK();  // unknown: the default stands
  uint32_t batch = BatchForRows(e.rows);
  // Each of the ranks trains an equal share of every minibatch.
  if (ranks > 1) batch = std::max<uint32_t>(batch / ranks, 1) * ranks;
  if (batch == job->train.batch_size) return Status::OK();
  // (Below 128 x kMinStepsPerEpoch rows the rule's floor, 128, makes fewer steps: said so.)
  const bool floor = e.rows / batch < kMinStepsPerEpoch;
  LOG_INFO(
      "train.batch_size {} for about {} rows ({}): {} steps an epoch, where the default {} "
      "would make {} (the rule: the largest power of two from 128 to 2048 that makes at least "
      "{} steps an epoch{}); set train.batch_size to choose",
      batch, e.rows, e.how, e.rows / batch, job->train.batch_size, e.rows / job->train.batch_size,
      kMinStepsPerEpoch,
      floor ? fmt::format(", or 128 when the rows are too few for {} steps", kMinStepsPerEpoch)
            : std::string());
  job->train.batch_size = batch;
  return Status::OK();
}

}  // namespace ctrbox
