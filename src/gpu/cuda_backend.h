// The CUDA backend behind GpuTrainer (gpu/trainer.h); only built with CTRBOX_CUDA.
#ifndef CTRBOX_GPU_CUDA_BACKEND_H_
#define CTRBOX_GPU_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/trainer.h"

namespace ctrbox {

StatusOr<std::unique_ptr<GpuTrainer>> CreateCudaTrainer(CtrModel* model,
                                                        const CtrAccessor& accessor,
                                                        const GpuOptions& options);
// The number of CUDA devices; 0 with the driver's reason in *why.
int CudaDevices(std::string* why);
// totalGlobalMem of `device` (0 with the reason in *why).
uint64_t CudaTotalMemory(int device, std::string* why);

// The device hash index (gpu/hbm_index.h) on GPU 0, for tests: inserts keys[i] with row i
// from concurrent threads, then for every probe finds its row (kNoRow if absent) and
// accumulates 1 into that row of a one-float-per-row accumulator.
Status CudaIndexCheck(const std::vector<uint64_t>& keys, const std::vector<uint64_t>& probes,
                      std::vector<uint32_t>* found, std::vector<float>* acc);

// Throughput of the working table's operations on GPU 0 (bench/gpu_bench): `keys` distinct
// keys with rows of `dim` floats, `probes` lookups of present keys (uniform), medians of
// `reps` timed runs after a warm-up. Bytes count what each operation must move at least.
struct IndexBench {
  std::string device;
  double insert_keys_per_s = 0;
  double find_keys_per_s = 0;        // key -> row
  double gather_keys_per_s = 0;      // key -> row -> the row's embedding copied out
  double accumulate_keys_per_s = 0;  // key -> row -> dim atomic adds of a gradient
  double gather_bytes_per_s = 0, accumulate_bytes_per_s = 0;
  double copy_bytes_per_s = 0;  // device-to-device cudaMemcpy, read + write: the reference
};
StatusOr<IndexBench> CudaIndexBenchmark(size_t keys, size_t probes, uint32_t dim, int reps);

// A pass's key occurrences deduplicated on GPU 0 (gpu/cuda_keys.cu; bench/host_stages_bench):
// upload, radix sort with positions, run-length encode into the distinct keys, each
// occurrence's pass-local id, and the distinct keys and ids back to the host. Seconds of each
// (GPU time between events) and of the whole (host wall time), medians of `reps` runs after a
// warm-up; same_keys_as_host: the distinct keys equal distinct_sorted (the host working set's,
// sorted) and every occurrence's id names its own key.
struct KeyDedupBench {
  std::string device;
  uint64_t occurrences = 0, distinct = 0;
  double upload_seconds = 0, sort_seconds = 0, unique_seconds = 0, ids_seconds = 0,
         download_seconds = 0, total_seconds = 0;
  bool same_keys_as_host = false;
};
StatusOr<KeyDedupBench> CudaKeyDedupBenchmark(const std::vector<uint64_t>& occurrences,
                                              const std::vector<uint64_t>& distinct_sorted,
                                              int reps);

}  // namespace ctrbox

#endif  // CTRBOX_GPU_CUDA_BACKEND_H_
