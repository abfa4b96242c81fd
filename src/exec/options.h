// Options of the GPU backend (`device: gpu`, gpu.* in docs/config.md).
#ifndef CTRBOX_EXEC_OPTIONS_H_
#define CTRBOX_EXEC_OPTIONS_H_

#include <cstdint>
#include <string_view>

namespace ctrbox {

// The MLP's GEMM precision on the GPU: float32, or tensor cores with TF32 / BF16 inputs and
// float32 accumulation (cuBLAS compute types 32F, 32F_FAST_TF32, 32F_FAST_16BF).
enum class GemmPrecision { kFp32, kTf32, kBf16 };
bool ParseGemmPrecision(std::string_view name, GemmPrecision* out);
std::string_view GemmPrecisionName(GemmPrecision p);

// How gradients of one key are summed: segment (per key over its occurrence list, in a fixed
// order: deterministic, bit-identical to the CPU model with one GPU) or atomic (float atomic
// adds per occurrence and per GPU: no fixed order, so results vary in the last bits).
enum class ScatterMode { kSegment, kAtomic };
bool ParseScatterMode(std::string_view name, ScatterMode* out);
std::string_view ScatterModeName(ScatterMode m);

struct GpuOptions {
  uint32_t gpus = 1;  // GPUs the working table is partitioned over (logical: several may share
                      // one physical GPU, round robin)
  GemmPrecision precision = GemmPrecision::kFp32;
  ScatterMode scatter = ScatterMode::kSegment;
  // Run the GPU backend's step on host threads instead (no GPU needed; slow; for tests and
  // debugging on machines without one).
  bool emulate = false;
  // Record the step of each minibatch shape once and replay it for every minibatch of that
  // shape (CUDA graphs; HostExec's recording in the emulation): one launch per minibatch. With
  // one GPU per process and no ranks; otherwise the step is launched call by call.
  bool replay = true;
  uint32_t staged_passes = 3;  // passes staged at once (the pipeline's queue depth + 2)
  // Logical GPU g runs on device (first_device + g) mod the devices: a job of several ranks
  // on one machine sets it to the rank's place on the machine times gpus, so that the ranks
  // take different devices while there are enough.
  uint32_t first_device = 0;
  // Bytes of GPU memory the staged passes may take together (gpu.staged_memory): the read
  // stage closes a pass before it would take more than staged_memory / staged_passes (docs/gpu.md,
  // "Pass sizing"). 0 at load: half of GPU 0's memory on a GPU, no limit with emulate
  // (ResolveGpuStagedMemory). A value set cuts the passes of a CPU run too.
  uint64_t staged_memory = 0;
};

// train.deterministic's canonical sums run on at most this many GPUs per process (more keep
// their own fixed order): gpu/step_canonical.h.
constexpr uint32_t kMaxCanonicalGpus = 16;

}  // namespace ctrbox

#endif  // CTRBOX_EXEC_OPTIONS_H_
