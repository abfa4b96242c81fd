// The CUDA GpuTrainer (docs/gpu.md): GpuStep on CudaExec (exec/cuda_exec.cuh), one compute
// and one copy stream per GPU, with NCCL all-reduce when every GPU is its own device.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "exec/cuda_check.h"
#include "exec/cuda_exec.cuh"
#include "gpu/cuda_backend.h"
#include "gpu/step_impl.h"

namespace ctrbox {
namespace {

class CudaGpuTrainer : public GpuStepTrainer<CudaExec> {
 public:
  CudaGpuTrainer(const GpuOptions& options, int devices) : options_(options), devices_(devices) {}

  Status Init(CtrModel* model, const CtrAccessor& accessor) {
    const uint32_t n = options_.gpus;
    for (uint32_t g = 0; g < n; ++g) {
      const int device = DeviceOf(g);
      CTRBOX_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
      // Keep freed memory in the pool: passes reallocate similar sizes.
      cudaMemPool_t pool;
      CTRBOX_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, device));
      uint64_t keep = ~uint64_t{0};
      CTRBOX_CUDA_RETURN_IF_ERROR(
          cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
      compute_.push_back(std::make_unique<CudaExec>(device, options_.precision, status_));
      copy_.push_back(std::make_unique<CudaExec>(device, options_.precision, status_));
    }
    // Peer access between distinct devices, where the hardware allows it (copies work
    // without it, through the host).
    for (uint32_t ga = 0; ga < std::min<uint32_t>(devices_, n); ++ga) {
      for (uint32_t gb = 0; gb < std::min<uint32_t>(devices_, n); ++gb) {
        const int a = DeviceOf(ga), b = DeviceOf(gb);
        int can = 0;
        if (a != b && cudaDeviceCanAccessPeer(&can, a, b) == cudaSuccess && can) {
          cudaSetDevice(a);
          const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
          if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
            CTRBOX_CUDA_RETURN_IF_ERROR(e);
          }
          cudaGetLastError();  // clears cudaErrorPeerAccessAlreadyEnabled
        }
      }
    }
    // NCCL when every GPU is its own device (one communicator per device).
    if (n > 1 && static_cast<int>(n) <= devices_) {
      comms_.resize(n);
      std::vector<int> list(n);
      for (uint32_t g = 0; g < n; ++g) list[g] = DeviceOf(g);
      CTRBOX_CUDA_RETURN_IF_ERROR(ncclCommInitAll(comms_.data(), static_cast<int>(n), list.data()));
    }
    RETURN_IF_ERROR(status_->Get());
    std::vector<CudaExec*> compute, copy;
    for (auto& e : compute_) compute.push_back(e.get());
    for (auto& e : copy_) copy.push_back(e.get());
    step_ = std::make_unique<GpuStep<CudaExec>>(model, accessor, options_, compute, copy,
                                                comms_.empty() ? nullptr : &NcclAllReduce, this);
    for (auto& e : compute_) e->Synchronize();
    return compute_[0]->status();
  }

  ~CudaGpuTrainer() override {
    for (auto& e : compute_) e->Synchronize();
    for (auto& e : copy_) e->Synchronize();
    step_.reset();
    for (ncclComm_t c : comms_) ncclCommDestroy(c);
  }

  std::string Describe() const override {
    std::string out;
    for (uint32_t g = 0; g < std::min<uint32_t>(devices_, options_.gpus); ++g) {
      const int d = DeviceOf(g);
      cudaDeviceProp prop;
      if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
      if (!out.empty()) out += ", ";
      out += std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
             std::to_string(prop.minor) + ", " + std::to_string(prop.totalGlobalMem >> 30) +
             " GiB)";
    }
    return std::to_string(options_.gpus) + " GPU partition" + (options_.gpus == 1 ? "" : "s") +
           " on " + out + ", gemm " + std::string(GemmPrecisionName(options_.precision)) +
           ", scatter " + std::string(ScatterModeName(options_.scatter)) +
           (comms_.empty() ? "" : ", NCCL all-reduce");
  }

  static bool NcclAllReduce(void* ctx, const std::vector<float*>& ptrs, size_t n) {
    auto* self = static_cast<CudaGpuTrainer*>(ctx);
    self->status_->Record(CheckCall(ncclGroupStart(), "ncclGroupStart()", __FILE__, __LINE__));
    for (size_t g = 0; g < ptrs.size(); ++g) {
      cudaSetDevice(self->compute_[g]->device());
      self->status_->Record(CheckCall(ncclAllReduce(ptrs[g], ptrs[g], n, ncclFloat, ncclSum,
                                                    self->comms_[g], self->compute_[g]->stream()),
                                      "ncclAllReduce(grads)", __FILE__, __LINE__));
    }
    self->status_->Record(CheckCall(ncclGroupEnd(), "ncclGroupEnd()", __FILE__, __LINE__));
    return true;
  }

 private:
  GpuOptions options_;
  // The device of logical GPU g.
  int DeviceOf(uint32_t g) const {
    return static_cast<int>((options_.first_device + g) % devices_);
  }
  int devices_;
  std::shared_ptr<FirstError> status_ = std::make_shared<FirstError>();  // shared by every queue
  std::vector<std::unique_ptr<CudaExec>> compute_, copy_;
  std::vector<ncclComm_t> comms_;
};

}  // namespace

int CudaDevices(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("no usable GPU: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
    cudaGetLastError();
    return 0;
  }
  if (n == 0) *why = "no CUDA device found";
  return n;
}

uint64_t CudaTotalMemory(int device, std::string* why) {
  cudaDeviceProp prop;
  const cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) {
    *why = std::string("cannot read the GPU's properties: ") + cudaGetErrorName(e) + ": " +
           cudaGetErrorString(e);
    cudaGetLastError();
    return 0;
  }
  return prop.totalGlobalMem;
}

StatusOr<std::unique_ptr<GpuTrainer>> CreateCudaTrainer(CtrModel* model,
                                                        const CtrAccessor& accessor,
                                                        const GpuOptions& options) {
  std::string why;
  const int devices = CudaDevices(&why);
  if (devices == 0) return FailedPreconditionError("device: gpu: " + why);
  auto trainer = std::make_unique<CudaGpuTrainer>(options, devices);
  RETURN_IF_ERROR(trainer->Init(model, accessor));
  return std::unique_ptr<GpuTrainer>(std::move(trainer));
}

}  // namespace ctrbox
