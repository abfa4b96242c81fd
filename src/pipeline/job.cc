#include "pipeline/job.h"

namespace ctrbox {

Status TrainOptions::Validate() const {
  if (threads < 1) return InvalidArgumentError("train.threads must be >= 1");
  if (batch_size < 1) return InvalidArgumentError("train.batch_size must be >= 1");
  if (epochs < 1) return InvalidArgumentError("train.epochs must be >= 1");
  return Status::OK();
}

Status PipelineOptions::Validate() const {
  if (queue_depth < 1 || pull_threads < 1 || push_threads < 1 || pass_examples < 1) {
    return InvalidArgumentError(
        "pipeline.queue_depth, pipeline.pull_threads, pipeline.push_threads and "
        "pipeline.pass_examples must be >= 1");
  }
  return Status::OK();
}

Status JobConfig::Validate() const {
  RETURN_IF_ERROR(train.Validate());
  RETURN_IF_ERROR(pipeline.Validate());
  if (spec.model.quant.bits == 1 || spec.model.quant.bits > 16) {
    return InvalidArgumentError("storage.quant.bits must be 0 (float32) or 2..16");
  }
  if (resume && ckpt.dir.empty()) {
    return InvalidArgumentError("--resume needs ckpt.dir (--set ckpt.dir=DIR)");
  }
  if (gpu && train.deterministic && gpu_options.scatter == ScatterMode::kAtomic) {
    return InvalidArgumentError(
        "train.deterministic=true needs gpu.scatter=segment (atomic sums have no fixed order)");
  }
  return Status::OK();
}

}  // namespace ctrbox
