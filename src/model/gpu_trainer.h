// GpuTrainer: the train stage on GPUs (`device: gpu`; docs/gpu.md). The pass's working
// parameters live in GPU memory, partitioned over the GPUs by key (the HBM-PS of HPS §4),
// the MLP runs on cuBLAS with dense parameters replicated per GPU, and the CPU tiers feed it
// through the pipeline: Stage in the pull stage, Train in the train stage.
//
// Two implementations of one step (model/gpu_step.h): CUDA (built when nvcc is found), and
// a host emulation that runs the same kernel bodies on CPU threads (gpu.emulate), which the
// tests use on machines without a GPU. The host CtrModel stays the source of truth between
// passes: Train writes the trained dense state back into it, so checkpoints, export and
// evaluation are unchanged.
//
// Thread safety: Stage and Train may run concurrently on two threads for different passes.
#ifndef CTRBOX_MODEL_GPU_TRAINER_H_
#define CTRBOX_MODEL_GPU_TRAINER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/batch.h"
#include "model/ctr_model.h"
#include "model/gpu_options.h"
#include "table/accessor.h"
#include "table/value.h"
#include "util/status.h"
#include "util/thread_pool.h"
#include "working/working_set.h"

namespace ctrbox {

class GpuTrainer {
 public:
  // The CUDA backend, or the host emulation when options.emulate (pool: its threads, may be
  // null). `model` must outlive the trainer; it is updated after every pass.
  static StatusOr<std::unique_ptr<GpuTrainer>> Create(CtrModel* model, const CtrAccessor& accessor,
                                                      const GpuOptions& options, ThreadPool* pool);
  virtual ~GpuTrainer() = default;

  // Uploads pass `pass_index` (its rows as pulled) to the GPUs.
  virtual Status Stage(uint64_t pass_index, const Batch& pass, const WorkingSet& ws,
                       const RowBlock& rows) = 0;
  // Trains the staged pass; see GpuStep::Train.
  virtual Status Train(uint64_t pass_index, const Batch& pass, const WorkingSet& ws,
                       const std::vector<uint32_t>& patched, RowBlock* rows, float* predictions,
                       uint64_t* created) = 0;
  // What runs the step ("host emulation, 2 GPUs", "1 x NVIDIA H100 80GB HBM3 (sm_90) ...").
  virtual std::string Describe() const = 0;
};

// The GPUs the driver reports (0 with the reason in *why when there are none, or when this
// binary has no CUDA backend).
int CudaDeviceCount(std::string* why);

}  // namespace ctrbox

#endif  // CTRBOX_MODEL_GPU_TRAINER_H_
