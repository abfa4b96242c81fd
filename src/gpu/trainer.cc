#include "gpu/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "exec/exec.h"
#include "gpu/step_buffers.h"
#include "gpu/step_impl.h"

#if defined(CTRBOX_WITH_CUDA)
#include "gpu/cuda_backend.h"
#endif

namespace ctrbox {

namespace {

// The host emulation: every GPU an executor on the same pool, run one call at a time.
class HostGpuTrainer : public GpuStepTrainer<HostExec> {
 public:
  // The compute queues run on `pool` (the train stage's); the copy queues on the calling
  // thread (the pull stage's): a ThreadPool takes one caller at a time.
  HostGpuTrainer(CtrModel* model, const CtrAccessor& accessor, const GpuOptions& options,
                 ThreadPool* pool)
      : options_(options) {
    compute_.reserve(options.gpus);
    copy_.reserve(options.gpus);
    for (uint32_t g = 0; g < options.gpus; ++g) {
      compute_.emplace_back(pool);
      copy_.emplace_back();
    }
    std::vector<HostExec*> compute, copy;
    for (HostExec& e : compute_) compute.push_back(&e);
    for (HostExec& e : copy_) copy.push_back(&e);
    step_ = std::make_unique<GpuStep<HostExec>>(model, accessor, options, compute, copy);
  }
  std::string Describe() const override {
    return fmt::format("host emulation of {} GPU{} (scatter {})", options_.gpus,
                       options_.gpus == 1 ? "" : "s", ScatterModeName(options_.scatter));
  }

 private:
  GpuOptions options_;
  std::vector<HostExec> compute_, copy_;
};

}  // namespace

StatusOr<std::unique_ptr<GpuTrainer>> GpuTrainer::Create(CtrModel* model,
                                                         const CtrAccessor& accessor,
                                                         const GpuOptions& options,
                                                         ThreadPool* pool) {
  if (options.gpus == 0) return InvalidArgumentError("gpu.count must be at least 1");
  if (options.emulate) {
    return std::unique_ptr<GpuTrainer>(new HostGpuTrainer(model, accessor, options, pool));
  }
#if defined(CTRBOX_WITH_CUDA)
  return CreateCudaTrainer(model, accessor, options);
#else
  return FailedPreconditionError(
      "device: gpu needs the CUDA backend, and this ctrbox was built without it (nvcc was not "
      "found at build time; or set gpu.emulate=true to run the GPU step on the CPU)");
#endif
}

int CudaDeviceCount(std::string* why) {
#if defined(CTRBOX_WITH_CUDA)
  return CudaDevices(why);
#else
  *why = "built without the CUDA backend (nvcc not found at build time)";
  return 0;
#endif
}

GpuSumNodes MostSumNodes(const CtrModel::SumOrder& order, uint32_t gpus) {
  GpuSumNodes most;
  if (!order.canonical || order.batch_rows == 0 || gpus > kMaxCanonicalGpus) return most;
  most.canonical = true;
  std::vector<uint32_t> firsts, ends;
  CtrModel::ShareNodes(order, &firsts, &ends);
  most.rank = static_cast<uint32_t>(firsts.size());
  if (gpus <= 1) {
    most.gpu = most.rank;
    return most;
  }
  // A minibatch of the share's first c blocks (the last one of a pass may be short) is cut
  // among the GPUs at block edges, GPU g taking blocks [c g / G, c (g + 1) / G).
  const std::vector<uint32_t> leaves = CtrModel::ShareLeaves(order);
  most.gpu = 1;
  for (uint32_t c = 1; c <= leaves.size(); ++c) {
    for (uint32_t g = 0; g < gpus; ++g) {
      GpuSumCut d;
      CutNodes(leaves.data(), c * g / gpus, c * (g + 1) / gpus, &d);
      most.gpu = std::max(most.gpu, d.nodes);
    }
  }
  return most;
}

uint64_t GpuPassBytesBound(const GpuPassShape& p, const ValueLayout& L, uint32_t gpus,
                           const GpuSumNodes& nodes) {
  const uint64_t fetch = 4 * (uint64_t{L.dim} + 2), grad = 4 * (uint64_t{L.dim} + 3);
  const uint64_t row = RowBlock::BytesPerRow(L) - 8;  // the key is counted apart
  // Every GPU: the examples without their keys, predictions, and per occurrence its fetch
  // position, cell and place in the occurrence lists; per (minibatch, GPU) slice its uniq
  // list's offsets (at most a slice's distinct keys + 1); per distinct key of a minibatch its
  // fetched row and a gradient record per node of the GPU's cut.
  const uint64_t feed = p.content_bytes - 8 * p.key_uses + 4 * p.rows + 12 * p.key_uses +
                        4 * (p.batch_keys + p.batches * gpus) +
                        p.max_batch_keys * (fetch + grad * nodes.gpu);
  // Owners together: each key's row, key, hash slots (fewer than 4 per key, at least 16 per
  // GPU) and gradient accumulator; each asked key its key, row and touched entry, and the
  // per-minibatch send and gradient buffers: the asking GPUs' records per node of their cuts
  // (and, in a job of several ranks, the touched rows' summed records going to the host); with
  // canonical sums on several GPUs, the touched rows' records per node of the rank's share.
  const uint64_t recv_nodes = gpus > 1 ? nodes.gpu : 1;
  const uint64_t sums = gpus > 1 && nodes.canonical ? nodes.rank * grad : 0;
  const uint64_t own = p.keys * (row + 8 + 4 * 12 + grad) + gpus * 16 * 12 +
                       p.batch_keys * (8 + 4 + 4) +
                       gpus * p.max_batch_keys * (fetch + grad * (recv_nodes + 1) + sums);
  return gpus * feed + own + gpus * 4 * 4;  // + special, status, created
}

uint64_t CudaDeviceMemory(int device, std::string* why) {
#if defined(CTRBOX_WITH_CUDA)
  return CudaTotalMemory(device, why);
#else
  (void)device;
  *why = "built without the CUDA backend (nvcc not found at build time)";
  return 0;
#endif
}

Status ResolveGpuStagedMemory(GpuOptions* options) {
  if (options->emulate || options->staged_memory != 0) return Status::OK();
  std::string why;
  if (CudaDeviceCount(&why) == 0) return FailedPreconditionError("device: gpu: " + why);
  const uint64_t total = CudaDeviceMemory(0, &why);
  if (total == 0) return FailedPreconditionError("device: gpu: " + why);
  options->staged_memory = total / 2;
  return Status::OK();
}

}  // namespace ctrbox
