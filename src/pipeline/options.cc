#include "pipeline/options.h"

namespace ctrbox {

Status PipelineOptions::Validate() const {
  if (read_threads < 1 || pull_threads < 1 || push_threads < 1 || pass_examples < 1) {
    return InvalidArgumentError(
        "pipeline.read_threads, pipeline.pull_threads, pipeline.push_threads and "
        "pipeline.pass_examples must be >= 1");
  }
  return Status::OK();
}

}  // namespace ctrbox
