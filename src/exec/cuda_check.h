// The one checked path for CUDA: every CUDA runtime, cuBLAS and NCCL call and every kernel
// launch of ctrbox (the GPU step's executor, exec/cuda_exec.cuh, and through it the feature
// graph's device layers) goes through CheckCall, so a failure becomes a Status naming the
// call (its source text), where it is, and the library's own name and description of the
// error. FirstError keeps the first such Status of a group of executors.
// Include only from CUDA sources (.cu, .cuh).
#ifndef CTRBOX_EXEC_CUDA_CHECK_H_
#define CTRBOX_EXEC_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <mutex>
#include <string>

#include "exec/cublas_lazy.h"
#include "util/status.h"

namespace ctrbox {

inline Status CudaCallStatus(const std::string& what, const char* file, int line,
                             const std::string& error) {
  std::string f = file;
  const size_t slash = f.rfind('/');
  if (slash != std::string::npos) f = f.substr(slash + 1);
  return InternalError("CUDA: " + what + " failed at " + f + ":" + std::to_string(line) + ": " +
                       error);
}

inline Status CheckCall(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return Status::OK();
  cudaGetLastError();  // a launch error is sticky for cudaGetLastError: clear it once reported
  return CudaCallStatus(what, file, line,
                        std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e));
}

inline Status CheckCall(cublasStatus_t e, const char* what, const char* file, int line) {
  if (e == CUBLAS_STATUS_SUCCESS) return Status::OK();
  return CudaCallStatus(what, file, line,
                        std::string(cublas_lazy::cublasGetStatusName(e)) + ": " +
                            cublas_lazy::cublasGetStatusString(e));
}

inline Status CheckCall(ncclResult_t e, const char* what, const char* file, int line) {
  if (e == ncclSuccess) return Status::OK();
  return CudaCallStatus(what, file, line, std::string("NCCL: ") + ncclGetErrorString(e));
}

// The first error of a group of executors that may run on several threads (the GPU step's
// copy and compute queues run on the pull and the train threads); once one is kept, the
// executors of the group queue no more work. Thread-safe.
class FirstError {
 public:
  void Record(Status s) {
    if (s.ok()) return;
    std::lock_guard<std::mutex> l(mu_);
    if (status_.ok()) (void)(status_ = std::move(s));
  }
  Status Get() const {
    std::lock_guard<std::mutex> l(mu_);
    return status_;
  }
  bool ok() const {
    std::lock_guard<std::mutex> l(mu_);
    return status_.ok();
  }

 private:
  mutable std::mutex mu_;
  Status status_;
};

}  // namespace ctrbox

// Evaluates a CUDA / cuBLAS / NCCL call; on failure returns its Status from the function.
#define CTRBOX_CUDA_RETURN_IF_ERROR(call)                                                \
  do {                                                                                   \
    ::ctrbox::Status _ctrbox_s = ::ctrbox::CheckCall((call), #call, __FILE__, __LINE__); \
    if (!_ctrbox_s.ok()) return _ctrbox_s;                                               \
  } while (0)

// Evaluates a call and keeps its failure in the FirstError `errors` (a FirstError*).
#define CTRBOX_CUDA_RECORD(errors, call) \
  (errors)->Record(::ctrbox::CheckCall((call), #call, __FILE__, __LINE__))

#endif  // CTRBOX_EXEC_CUDA_CHECK_H_
