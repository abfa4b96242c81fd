// The device hash index (gpu/hbm_index.h) on a GPU: a test against a host map and the
// throughput benchmark of its operations (bench/gpu_bench).
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "exec/cuda_check.h"
#include "exec/cuda_exec.cuh"
#include "gpu/cuda_backend.h"
#include "gpu/hbm_index.h"

namespace ctrbox {
namespace {

// A device copy of a hash index over `keys` (row i for keys[i]), built by concurrent inserts.
struct DeviceIndex {
  CudaExec::Buffer<uint64_t> keys, bucket_keys;
  CudaExec::Buffer<uint32_t> bucket_rows, special, failed;
  HbmIndex view;

  void Build(CudaExec& e, const std::vector<uint64_t>& host_keys) {
    e.Upload(&keys, host_keys.data(), host_keys.size());
    const size_t cap = HbmCapacity(host_keys.size());
    e.Reserve(&bucket_keys, cap);
    e.Reserve(&bucket_rows, cap);
    e.Reserve(&special, 1);
    e.Reserve(&failed, 1);
    view = HbmIndex{bucket_keys.data(), bucket_rows.data(), special.data(), cap - 1};
    Insert(e, host_keys.size());
  }
  void Insert(CudaExec& e, size_t n) {
    const size_t cap = view.mask + 1;
    e.Fill(bucket_keys.data(), kEmptyKey, cap);
    e.Fill(special.data(), kNoRow, 1);
    e.Fill(failed.data(), 0u, 1);
    const HbmIndex idx = view;
    const uint64_t* k = keys.data();
    uint32_t* bad = failed.data();
    e.ForEach(n, [=] __device__(size_t i) {
      if (!idx.Insert(k[i], static_cast<uint32_t>(i))) AtomicAddU32(bad, 1);
    });
  }
};

}  // namespace

Status CudaIndexCheck(const std::vector<uint64_t>& keys, const std::vector<uint64_t>& probes,
                      std::vector<uint32_t>* found, std::vector<float>* acc) {
  std::string why;
  if (CudaDevices(&why) == 0) return FailedPreconditionError(why);
  auto status = std::make_shared<FirstError>();
  CudaExec e(0, GemmPrecision::kFp32, status);
  {
    DeviceIndex index;
    index.Build(e, keys);
    CudaExec::Buffer<uint64_t> p;
    CudaExec::Buffer<uint32_t> rows;
    CudaExec::Buffer<float> sums;
    e.Upload(&p, probes.data(), probes.size());
    e.Reserve(&rows, probes.size());
    e.Reserve(&sums, keys.size());
    e.Fill(sums.data(), 0.0f, keys.size());
    const HbmIndex idx = index.view;
    const uint64_t* pk = p.data();
    uint32_t* out = rows.data();
    float* s = sums.data();
    e.ForEach(probes.size(), [=] __device__(size_t i) {
      out[i] = idx.Find(pk[i]);
      const float one = 1.0f;
      idx.Accumulate(pk[i], &one, 1, s, 1);
    });
    uint32_t failed = 0;
    e.Download(&failed, index.failed.data(), 1);
    if (failed != 0) return InternalError(std::to_string(failed) + " inserts failed");
    found->resize(probes.size());
    acc->resize(keys.size());
    e.Download(found->data(), rows.data(), probes.size());
    e.Download(acc->data(), sums.data(), keys.size());
    e.Synchronize();
  }
  return status->Get();
}

StatusOr<IndexBench> CudaIndexBenchmark(size_t n_keys, size_t n_probes, uint32_t dim, int reps) {
  std::string why;
  if (CudaDevices(&why) == 0) return FailedPreconditionError(why);
  auto status = std::make_shared<FirstError>();
  IndexBench out;
  cudaDeviceProp prop;
  CTRBOX_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0));
  out.device = prop.name;
  CudaExec e(0, GemmPrecision::kFp32, status);
  // Distinct keys (a bijective mix of 0..n-1), probes uniform over them.
  std::vector<uint64_t> keys(n_keys), probes(n_probes);
  for (size_t i = 0; i < n_keys; ++i) keys[i] = Mix64(i * 2 + 1);
  for (size_t i = 0; i < n_probes; ++i) probes[i] = keys[Mix64(~i) % n_keys];
  DeviceIndex index;
  index.Build(e, keys);
  CudaExec::Buffer<uint64_t> p;
  CudaExec::Buffer<uint32_t> rows;
  CudaExec::Buffer<float> emb, out_emb, grad, acc, copy_a, copy_b;
  e.Upload(&p, probes.data(), n_probes);
  e.Reserve(&rows, n_probes);
  e.Reserve(&emb, n_keys * dim);
  e.Reserve(&acc, n_keys * dim);
  e.Reserve(&out_emb, n_probes * dim);
  e.Reserve(&grad, n_probes * dim);
  e.Fill(emb.data(), 0.5f, n_keys * dim);
  e.Fill(acc.data(), 0.0f, n_keys * dim);
  e.Fill(grad.data(), 0.25f, n_probes * dim);
  const size_t copy_n = size_t{256} << 20;  // 1 GiB of floats
  e.Reserve(&copy_a, copy_n);
  e.Reserve(&copy_b, copy_n);
  e.Fill(copy_a.data(), 1.0f, copy_n);
  RETURN_IF_ERROR(status->Get());

  cudaEvent_t t0, t1;
  CTRBOX_CUDA_RETURN_IF_ERROR(cudaEventCreate(&t0));
  CTRBOX_CUDA_RETURN_IF_ERROR(cudaEventCreate(&t1));
  auto time = [&](auto&& body) -> double {  // median seconds of reps runs after a warm-up
    std::vector<double> s;
    for (int r = 0; r <= reps; ++r) {
      cudaEventRecord(t0, e.stream());
      body();
      cudaEventRecord(t1, e.stream());
      cudaEventSynchronize(t1);
      float ms = 0;
      cudaEventElapsedTime(&ms, t0, t1);
      if (r > 0) s.push_back(ms / 1e3);
    }
    std::sort(s.begin(), s.end());
    return s[s.size() / 2];
  };
  const HbmIndex idx = index.view;
  const uint64_t* pk = p.data();
  uint32_t* row_out = rows.data();
  const float* e_in = emb.data();
  float* e_out = out_emb.data();
  const float* g_in = grad.data();
  float* a = acc.data();
  const size_t np = n_probes;
  const uint32_t d = dim;
  const double insert_s = time([&] { index.Insert(e, n_keys); });
  const double find_s =
      time([&] { e.ForEach(np, [=] __device__(size_t i) { row_out[i] = idx.Find(pk[i]); }); });
  // One thread per (probe, element): the lookup repeats per element, as the gather of the
  // step's exchange does (rows found once per pass there; here every time).
  const double gather_s = time([&] {
    e.ForEach(np * d, [=] __device__(size_t i) {
      const size_t k = i / d, j = i % d;
      const uint32_t r = idx.Find(pk[k]);
      e_out[i] = e_in[size_t{r} * d + j];
    });
  });
  const double acc_s = time([&] {
    e.ForEach(np, [=] __device__(size_t i) { idx.Accumulate(pk[i], g_in + i * d, d, a, d); });
  });
  const float* ca = copy_a.data();
  float* cb = copy_b.data();
  const double copy_s = time([&] {
    cudaMemcpyAsync(cb, ca, copy_n * sizeof(float), cudaMemcpyDeviceToDevice, e.stream());
  });
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  RETURN_IF_ERROR(status->Get());
  // Minimum bytes: the probe key (8), the bucket's key and row (12), then the row's floats.
  const double row_bytes = 4.0 * dim;
  out.insert_keys_per_s = n_keys / insert_s;
  out.find_keys_per_s = np / find_s;
  out.gather_keys_per_s = np / gather_s;
  out.gather_bytes_per_s = np * (20.0 + 2 * row_bytes) / gather_s;  // read row, write copy
  out.accumulate_keys_per_s = np / acc_s;
  out.accumulate_bytes_per_s = np * (20.0 + 3 * row_bytes) / acc_s;  // read grad, row RMW
  out.copy_bytes_per_s = 2.0 * copy_n * sizeof(float) / copy_s;
  return out;
}

}  // namespace ctrbox
