// The feature graph's device layers on CUDA (feature/device_layers.h): ExecDeviceLayers on
// the CUDA executor (exec/cuda_exec.cuh) — one stream on GPU 0, memory kept across chunks,
// kernels from the layer's lambda, every call through the one checked path. Built only with
// CTRBOX_CUDA; tested in emulation everywhere (device_layers.cc) and against it on a GPU
// (docs/features.md).
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "exec/cuda_check.h"
#include "exec/cuda_exec.cuh"
#include "feature/device_layers_impl.h"

namespace ctrbox {

StatusOr<std::unique_ptr<DeviceLayers>> NewCudaDeviceLayers(bool fused) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    cudaGetLastError();
    return FailedPreconditionError(
        std::string("features.device: gpu: no usable GPU: ") +
        (e != cudaSuccess ? std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e)
                          : std::string("no CUDA device found")));
  }
  auto exec = std::make_unique<CudaExec>(0, GemmPrecision::kFp32, std::make_shared<FirstError>());
  RETURN_IF_ERROR(exec->status());
  cudaDeviceProp prop;
  std::string name = "GPU 0";
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) name = prop.name;
  return std::unique_ptr<DeviceLayers>(
      new ExecDeviceLayers<CudaExec>(std::move(exec), fused, name));
}

}  // namespace ctrbox
