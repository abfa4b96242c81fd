#include "pipeline/options.h"

namespace ctrbox {

Status PipelineOptions::Validate() const {
  if (read_threads < 1 || pull_threads < 1 || push_threads < 1 || pass_examples < 1) {
    return InvalidArgumentError(
        "pipeline.read_threads, pipeline.pull_threads, pipeline.push_threads and "
        "pipeline.pass_examples must be >= 1");
  }
  if (background_nice < 0 || background_nice > 19) {
    return InvalidArgumentError("pipeline.background_nice must be in [0, 19] (a nice value)");
  }
  return Status::OK();
}

}  // namespace ctrbox
