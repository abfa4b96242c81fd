// A pass's keys deduplicated on the GPU, measured against the host's working set (issue 54,
// "keys on the GPU where it pays"; bench/host_stages_bench prints both). What AIBox and the
// parameter server do on the GPU: the pass's key occurrences uploaded, sorted with their
// positions (radix sort), run-length encoded into the distinct keys, each occurrence given its
// key's pass-local id (a scan of the runs' heads, scattered back to the occurrence order), and
// the distinct keys and the ids brought back for the pull. It is the lower bound of a GPU
// working set: the per-minibatch lists the host's BuildWorkingSet also makes are not built.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cub/cub.cuh>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "exec/cuda_check.h"
#include "exec/cuda_exec.cuh"
#include "gpu/cuda_backend.h"

namespace ctrbox {
namespace {

// The device buffers of one dedup, sized once.
struct Dedup {
  CudaExec::Buffer<uint64_t> keys, sorted, distinct;
  CudaExec::Buffer<uint32_t> pos, sorted_pos, counts, heads, ids, local, runs;
  CudaExec::Buffer<char> temp;
  size_t temp_bytes = 0;
};

}  // namespace

StatusOr<KeyDedupBench> CudaKeyDedupBenchmark(const std::vector<uint64_t>& occurrences,
                                              const std::vector<uint64_t>& distinct_sorted,
                                              int reps) {
  std::string why;
  if (CudaDevices(&why) == 0) return FailedPreconditionError(why);
  const size_t n = occurrences.size();
  if (n == 0 || n >= (size_t{1} << 31)) {
    return InvalidArgumentError("key dedup benchmark: 1 to 2^31 - 1 occurrences");
  }
  auto status = std::make_shared<FirstError>();
  CudaExec e(0, GemmPrecision::kFp32, status);
  KeyDedupBench out;
  cudaDeviceProp prop;
  CTRBOX_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0));
  out.device = prop.name;
  out.occurrences = n;
  Dedup d;
  e.Reserve(&d.keys, n);
  e.Reserve(&d.sorted, n);
  e.Reserve(&d.distinct, n);
  e.Reserve(&d.pos, n);
  e.Reserve(&d.sorted_pos, n);
  e.Reserve(&d.counts, n);
  e.Reserve(&d.heads, n);
  e.Reserve(&d.ids, n);
  e.Reserve(&d.local, n);
  e.Reserve(&d.runs, 1);
  const int ni = static_cast<int>(n);
  {  // the largest temporary storage any of the three CUB calls asks for
    size_t a = 0, b = 0, c = 0;
    CTRBOX_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
        nullptr, a, d.keys.data(), d.sorted.data(), d.pos.data(), d.sorted_pos.data(), ni));
    CTRBOX_CUDA_RETURN_IF_ERROR(cub::DeviceRunLengthEncode::Encode(
        nullptr, b, d.sorted.data(), d.distinct.data(), d.counts.data(), d.runs.data(), ni));
    CTRBOX_CUDA_RETURN_IF_ERROR(
        cub::DeviceScan::InclusiveSum(nullptr, c, d.heads.data(), d.ids.data(), ni));
    d.temp_bytes = std::max({a, b, c, size_t{1}});
    e.Reserve(&d.temp, d.temp_bytes);
  }
  RETURN_IF_ERROR(status->Get());
  std::vector<uint64_t> host_distinct(n);
  std::vector<uint32_t> host_local(n);
  uint32_t runs = 0;
  struct Events {  // destroyed on every return
    cudaEvent_t e[6] = {};
    ~Events() {
      for (cudaEvent_t x : e) {
        if (x != nullptr) cudaEventDestroy(x);
      }
    }
  } events;
  cudaEvent_t* ev = events.e;
  for (int k = 0; k < 6; ++k) CTRBOX_CUDA_RETURN_IF_ERROR(cudaEventCreate(&ev[k]));
  cudaStream_t s = e.stream();
  std::vector<double> upload, sort, unique, ids, download, total;
  for (int r = 0; r <= reps; ++r) {  // the first run warms up
    const auto t0 = std::chrono::steady_clock::now();
    CTRBOX_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev[0], s));
    CTRBOX_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d.keys.data(), occurrences.data(),
                                                n * sizeof(uint64_t), cudaMemcpyHostToDevice, s));
    uint32_t* pos = d.pos.data();
    e.ForEach(n, [=] __device__(size_t i) { pos[i] = static_cast<uint32_t>(i); });
    CTRBOX_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev[1], s));
    size_t bytes = d.temp_bytes;
    CTRBOX_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(d.temp.data(), bytes, d.keys.data(),
                                                                d.sorted.data(), d.pos.data(),
                                                                d.sorted_pos.data(), ni, 0, 64, s));
    CTRBOX_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev[2], s));
    bytes = d.temp_bytes;
    CTRBOX_CUDA_RETURN_IF_ERROR(
        cub::DeviceRunLengthEncode::Encode(d.temp.data(), bytes, d.sorted.data(), d.distinct.data(),
                                           d.counts.data(), d.runs.data(), ni, s));
    CTRBOX_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev[3], s));
    // Each sorted occurrence's id: the number of runs started at or before it, minus one.
    const uint64_t* sk = d.sorted.data();
    uint32_t* heads = d.heads.data();
    e.ForEach(n, [=] __device__(size_t i) { heads[i] = (i == 0 || sk[i] != sk[i - 1]) ? 1 : 0; });
    bytes = d.temp_bytes;
    CTRBOX_CUDA_RETURN_IF_ERROR(
        cub::DeviceScan::InclusiveSum(d.temp.data(), bytes, d.heads.data(), d.ids.data(), ni, s));
    const uint32_t *sp = d.sorted_pos.data(), *id = d.ids.data();
    uint32_t* local = d.local.data();
    e.ForEach(n, [=] __device__(size_t i) { local[sp[i]] = id[i] - 1; });
    CTRBOX_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev[4], s));
    CTRBOX_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(&runs, d.runs.data(), sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
    // The count, before the distinct keys' bytes are known.
    CTRBOX_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    CTRBOX_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_distinct.data(), d.distinct.data(),
                                                size_t{runs} * sizeof(uint64_t),
                                                cudaMemcpyDeviceToHost, s));
    CTRBOX_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_local.data(), d.local.data(),
                                                n * sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
    CTRBOX_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev[5], s));
    CTRBOX_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CTRBOX_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    RETURN_IF_ERROR(status->Get());
    float ms[5];
    for (int k = 0; k < 5; ++k)
      CTRBOX_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms[k], ev[k], ev[k + 1]));
    if (r == 0) continue;
    upload.push_back(ms[0] * 1e-3);
    sort.push_back(ms[1] * 1e-3);
    unique.push_back(ms[2] * 1e-3);
    ids.push_back(ms[3] * 1e-3);
    download.push_back(ms[4] * 1e-3);
    total.push_back(wall);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  out.upload_seconds = median(upload);
  out.sort_seconds = median(sort);
  out.unique_seconds = median(unique);
  out.ids_seconds = median(ids);
  out.download_seconds = median(download);
  out.total_seconds = median(total);
  out.distinct = runs;
  // The differential check: the same distinct keys as the host's working set (sorted), and
  // every occurrence's id naming its own key.
  host_distinct.resize(runs);
  bool same = host_distinct == distinct_sorted;
  for (size_t i = 0; same && i < n; ++i) {
    same = host_local[i] < runs && host_distinct[host_local[i]] == occurrences[i];
  }
  out.same_keys_as_host = same;
  return out;
}

}  // namespace ctrbox
