// The one checked helper every CUDA runtime, cuBLAS and NCCL call and every kernel launch
// of the CUDA backend goes through: a failure becomes a Status naming the call (its source
// text), where it is, and the library's own name and description of the error.
// Include only from .cu files.
#ifndef CTRBOX_MODEL_CUDA_CHECK_H_
#define CTRBOX_MODEL_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "util/status.h"

namespace ctrbox {

inline Status CudaCallStatus(const std::string& what, const char* file, int line,
                             const std::string& error) {
  std::string f = file;
  const size_t slash = f.rfind('/');
  if (slash != std::string::npos) f = f.substr(slash + 1);
  return InternalError("CUDA backend: " + what + " failed at " + f + ":" + std::to_string(line) +
                       ": " + error);
}

inline Status CheckCall(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return Status::OK();
  return CudaCallStatus(what, file, line,
                        std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e));
}

inline Status CheckCall(cublasStatus_t e, const char* what, const char* file, int line) {
  if (e == CUBLAS_STATUS_SUCCESS) return Status::OK();
  return CudaCallStatus(what, file, line,
                        std::string(cublasGetStatusName(e)) + ": " + cublasGetStatusString(e));
}

inline Status CheckCall(ncclResult_t e, const char* what, const char* file, int line) {
  if (e == ncclSuccess) return Status::OK();
  return CudaCallStatus(what, file, line, std::string("NCCL: ") + ncclGetErrorString(e));
}

}  // namespace ctrbox

// Evaluates a CUDA / cuBLAS / NCCL call; on failure returns its Status from the function.
#define CTRBOX_CUDA_RETURN_IF_ERROR(call)                                                \
  do {                                                                                   \
    ::ctrbox::Status _ctrbox_s = ::ctrbox::CheckCall((call), #call, __FILE__, __LINE__); \
    if (!_ctrbox_s.ok()) return _ctrbox_s;                                               \
  } while (0)

#endif  // CTRBOX_MODEL_CUDA_CHECK_H_
