// The feature graph's device layers on CUDA (feature/device_layers.h): ExecDeviceLayers over
// a small executor — one stream on GPU 0, memory from cudaMalloc kept across chunks, kernels
// from the layer's lambda. Built only with CTRBOX_CUDA; tested in emulation everywhere
// (device_layers.cc) and against it on a GPU (docs/features.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "feature/device_layers_impl.h"
#include "util/cuda_for_each.cuh"

namespace ctrbox {
namespace {

class CudaFeatureExec {
 public:
  template <class T>
  class Buffer {
   public:
    Buffer() = default;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() {
      if (p_ != nullptr) cudaFree(p_);
    }
    T* data() { return p_; }

   private:
    friend class CudaFeatureExec;
    T* p_ = nullptr;
    size_t n_ = 0;
  };

  CudaFeatureExec() {
    Check(cudaSetDevice(0), "cudaSetDevice");
    Check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaFeatureExec() {
    if (stream_ != nullptr) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
  }

  template <class T>
  void Reserve(Buffer<T>* b, size_t n) {
    if (b->n_ >= n || !ok()) return;
    Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");  // the old one is unused
    if (b->p_ != nullptr) cudaFree(b->p_);
    b->p_ = nullptr;
    b->n_ = 0;
    const size_t cap = std::max<size_t>(n + n / 2, 256);
    if (Check(cudaMalloc(&b->p_, cap * sizeof(T)), "cudaMalloc")) b->n_ = cap;
  }
  template <class T>
  void Upload(Buffer<T>* b, const T* src, size_t n) {
    Reserve(b, n);
    if (n == 0 || !ok()) return;
    // Pageable host memory: the call returns once src is staged, so src is reusable.
    Check(cudaMemcpyAsync(b->p_, src, n * sizeof(T), cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync (upload)");
  }
  template <class T>
  void Download(T* dst, const T* src, size_t n) {
    if (n == 0 || !ok()) return;
    Check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync (download)");
    Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  template <class F>
  void ForEach(size_t n, F f) {
    if (n == 0 || !ok()) return;
    constexpr unsigned kThreads = 256;
    const size_t blocks = std::min<size_t>((n + kThreads - 1) / kThreads, 65535);
    ForEachKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream_>>>(n, f);
    Check(cudaGetLastError(), "kernel launch");
  }
  Status status() const {
    return error_.empty() ? Status::OK() : Status(StatusCode::kInternal, error_);
  }

 private:
  bool Check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    if (error_.empty()) {
      error_ = std::string("features on the GPU: ") + what + ": " + cudaGetErrorName(e) + ": " +
               cudaGetErrorString(e);
    }
    cudaGetLastError();
    return false;
  }

  bool ok() const { return error_.empty(); }

  cudaStream_t stream_ = nullptr;
  std::string error_;  // the first error
};

}  // namespace

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
  auto exec = std::make_unique<CudaFeatureExec>();
  RETURN_IF_ERROR(exec->status());
  cudaDeviceProp prop;
  std::string name = "GPU 0";
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) name = prop.name;
  return std::unique_ptr<DeviceLayers>(
      new ExecDeviceLayers<CudaFeatureExec>(std::move(exec), fused, name));
}

}  // namespace ctrbox
