// CudaGemms: the GEMMs of one CUDA stream (exec/cuda_exec.cuh's Gemm). Row-major
// C = op(A) op(B) as column-major C^T = op(B)^T op(A)^T: cuBLASLt with the algorithm its
// heuristic chose for the shape (and the operands' alignment) the first time, kept
// (cublasGemmEx asked the heuristic again on every call: ~38 us of host time a GEMM on an H200
// machine, more than the GEMMs of a minibatch took on the GPU); cublasGemmEx where the
// heuristic offers none. The libraries are opened at their first call (exec/cublas_lazy.h).
// Include only from CUDA sources, through cuda_exec.cuh.
#ifndef CTRBOX_EXEC_CUDA_GEMM_CUH_
#define CTRBOX_EXEC_CUDA_GEMM_CUH_

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include "exec/cublas_lazy.h"
#include "exec/cuda_check.h"
#include "exec/options.h"

namespace ctrbox {

#define CTRBOX_GEMM_CHECK(call) errors_->Record(CheckCall((call), #call, __FILE__, __LINE__))

// Used by one thread at a time (its executor's); errors go to the executor's FirstError.
class CudaGemms {
 public:
  CudaGemms(GemmPrecision precision, std::shared_ptr<FirstError> errors)
      : precision_(precision), errors_(std::move(errors)) {}
  ~CudaGemms() { Destroy(); }
  CudaGemms(const CudaGemms&) = delete;
  CudaGemms& operator=(const CudaGemms&) = delete;

  // Queues C = op(A) op(B) on `stream`; false if it could not (the error is kept).
  bool Run(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
           float* c, int ldc, cudaStream_t stream) {
    const float one = 1.0f, zero = 0.0f;
    if (const LtPlan* plan = LtPlanFor(ta, tb, m, n, k, lda, ldb, ldc, a, b, c)) {
      CTRBOX_GEMM_CHECK(cublas_lazy::cublasLtMatmul(lt_, plan->desc, &one, b, plan->a, a, plan->b,
                                                    &zero, c, plan->c, c, plan->c, &plan->algo,
                                                    lt_workspace_, kLtWorkspace, stream));
      return true;
    }
    if (!ok()) return false;
    MakeBlas(stream);  // on first use: the feature layers' executors never need one
    if (!ok()) return false;
    CTRBOX_GEMM_CHECK(cublas_lazy::cublasGemmEx(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, b,
                                                CUDA_R_32F, ldb, a, CUDA_R_32F, lda, &zero, c,
                                                CUDA_R_32F, ldc, Compute(), CUBLAS_GEMM_DEFAULT));
    return true;
  }
  // Both libraries' handles and cuBLASLt's workspace now: before a stream capture, which
  // their allocations may not be part of.
  void MakeHandles(cudaStream_t stream) {
    MakeLt();
    MakeBlas(stream);
  }
  // Frees the plans, the workspace and the handles (before the stream they use goes).
  void Destroy() {
    for (auto& [key, plan] : lt_plans_) plan.Destroy();
    lt_plans_.clear();
    if (lt_workspace_ != nullptr) cudaFree(lt_workspace_);
    lt_workspace_ = nullptr;
    if (lt_ != nullptr) cublas_lazy::cublasLtDestroy(lt_);
    lt_ = nullptr;
    if (blas_ != nullptr) cublas_lazy::cublasDestroy(blas_);
    blas_ = nullptr;
  }

 private:
  bool ok() const { return errors_->ok(); }
  cublasComputeType_t Compute() const {
    return precision_ == GemmPrecision::kTf32   ? CUBLAS_COMPUTE_32F_FAST_TF32
           : precision_ == GemmPrecision::kBf16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                                : CUBLAS_COMPUTE_32F;
  }
  void MakeLt() {
    if (lt_ != nullptr) return;
    CTRBOX_GEMM_CHECK(cublas_lazy::cublasLtCreate(&lt_));
    CTRBOX_GEMM_CHECK(cudaMalloc(&lt_workspace_, kLtWorkspace));
  }
  void MakeBlas(cudaStream_t stream) {
    if (blas_ != nullptr) return;
    CTRBOX_GEMM_CHECK(cublas_lazy::cublasCreate(&blas_));
    CTRBOX_GEMM_CHECK(cublas_lazy::cublasSetStream(blas_, stream));
  }

  // A cuBLASLt matmul of one shape: its descriptors and the heuristic's algorithm.
  struct LtPlan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool ok = false;  // false: no algorithm (cublasGemmEx does the shape)
    void Destroy() {
      if (a != nullptr) cublas_lazy::cublasLtMatrixLayoutDestroy(a);
      if (b != nullptr) cublas_lazy::cublasLtMatrixLayoutDestroy(b);
      if (c != nullptr) cublas_lazy::cublasLtMatrixLayoutDestroy(c);
      if (desc != nullptr) cublas_lazy::cublasLtMatmulDescDestroy(desc);
    }
  };
  static constexpr size_t kLtWorkspace = size_t{32} << 20;
  // The alignment in bytes (4, 8 or 16) a pointer offers.
  static uint32_t AlignmentOf(const void* p) {
    const auto v = reinterpret_cast<uintptr_t>(p);
    return v % 16 == 0 ? 16 : v % 8 == 0 ? 8 : 4;
  }
  // The plan of a GEMM (see Run), made the first time its shape and alignment come; null
  // when cuBLASLt has no algorithm for it (or failed: the error is kept).
  const LtPlan* LtPlanFor(bool ta, bool tb, int m, int n, int k, int lda, int ldb, int ldc,
                          const float* a, const float* b, const float* c) {
    const uint32_t al_a = AlignmentOf(b), al_b = AlignmentOf(a), al_c = AlignmentOf(c);
    const auto key = std::make_tuple(ta, tb, m, n, k, lda, ldb, ldc, al_a * 256 + al_b * 16 + al_c);
    auto it = lt_plans_.find(key);
    if (it != lt_plans_.end()) return it->second.ok ? &it->second : nullptr;
    LtPlan& p = lt_plans_[key];
    MakeLt();
    if (!ok()) return nullptr;
    const cublasComputeType_t compute =
        precision_ == GemmPrecision::kTf32   ? CUBLAS_COMPUTE_32F_FAST_TF32
        : precision_ == GemmPrecision::kBf16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                             : CUBLAS_COMPUTE_32F;
    // Column-major: C' [n x m] = op(B') [n x k] op(A') [k x m], B' and A' the row-major
    // operands as stored.
    const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    CTRBOX_GEMM_CHECK(cublas_lazy::cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F));
    CTRBOX_GEMM_CHECK(cublas_lazy::cublasLtMatmulDescSetAttribute(
        p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    CTRBOX_GEMM_CHECK(cublas_lazy::cublasLtMatmulDescSetAttribute(
        p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    CTRBOX_GEMM_CHECK(
        cublas_lazy::cublasLtMatrixLayoutCreate(&p.a, CUDA_R_32F, tb ? k : n, tb ? n : k, ldb));
    CTRBOX_GEMM_CHECK(
        cublas_lazy::cublasLtMatrixLayoutCreate(&p.b, CUDA_R_32F, ta ? m : k, ta ? k : m, lda));
    CTRBOX_GEMM_CHECK(cublas_lazy::cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, n, m, ldc));
    cublasLtMatmulPreference_t pref = nullptr;
    CTRBOX_GEMM_CHECK(cublas_lazy::cublasLtMatmulPreferenceCreate(&pref));
    if (!ok()) return nullptr;
    const uint64_t workspace = kLtWorkspace;
    const uint32_t align[4] = {al_a, al_b, al_c, al_c};
    CTRBOX_GEMM_CHECK(cublas_lazy::cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i) {
      CTRBOX_GEMM_CHECK(cublas_lazy::cublasLtMatmulPreferenceSetAttribute(
          pref, align_attr[i], &align[i], sizeof(align[i])));
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st = cublas_lazy::cublasLtMatmulAlgoGetHeuristic(
        lt_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
    cublas_lazy::cublasLtMatmulPreferenceDestroy(pref);
    p.ok = ok() && st == CUBLAS_STATUS_SUCCESS && found > 0 &&
           result.state == CUBLAS_STATUS_SUCCESS && result.workspaceSize <= kLtWorkspace;
    if (p.ok) p.algo = result.algo;
    return p.ok ? &p : nullptr;
  }

  const GemmPrecision precision_;
  std::shared_ptr<FirstError> errors_;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* lt_workspace_ = nullptr;
  std::map<std::tuple<bool, bool, int, int, int, int, int, int, uint32_t>, LtPlan> lt_plans_;
};

#undef CTRBOX_GEMM_CHECK

}  // namespace ctrbox

#endif  // CTRBOX_EXEC_CUDA_GEMM_CUH_
