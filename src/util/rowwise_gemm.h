// A single-precision GEMM whose every output row depends on its own input row alone, bit for
// bit: C[i, :] is the same whatever the number of rows in the call and row i's place among
// them. Prediction uses it where a row's probability must not depend on its neighbours
// (`ctrbox predict`, `ctrbox serve` batching requests together: docs/serve.md, "Batching").
//
// Every element is the chain acc = fma(A[i, p], B[p, j], acc) for p = 0 .. k-1 from acc = 0,
// then acc *= alpha (when alpha != 1), then acc = fma(beta, C[i, j], acc) (when beta != 0).
// FMA rounds once, so the AVX-512, AVX2 and scalar kernels give the same bits, on any CPU
// (the scalar one is the reference the tests hold the others to).
#ifndef CTRBOX_UTIL_ROWWISE_GEMM_H_
#define CTRBOX_UTIL_ROWWISE_GEMM_H_

#include <string>

namespace ctrbox::blas {

// C[m x n] = alpha * A[m x k] * B[k x n] + beta * C, row-major, neither transposed.
void SgemmRowwise(int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                  int ldb, float beta, float* c, int ldc);

// The kernel SgemmRowwise uses: "avx512", "avx2" or "scalar" (the widest the CPU has, unless
// the environment variable CTRBOX_ROWWISE_KERNEL names a narrower one).
std::string RowwiseKernel();
// Runs one named kernel ("avx512", "avx2", "scalar"); false when the CPU lacks it (tests).
bool SgemmRowwiseWith(const std::string& kernel, int m, int n, int k, float alpha, const float* a,
                      int lda, const float* b, int ldb, float beta, float* c, int ldc);

// While one is alive on a thread, Sgemm calls on that thread without transposes go to
// SgemmRowwise (CtrModel's predictions: model/ctr_model.h, set_rowwise_predictions).
class RowwiseScope {
 public:
  explicit RowwiseScope(bool on);
  ~RowwiseScope();
  RowwiseScope(const RowwiseScope&) = delete;
  RowwiseScope& operator=(const RowwiseScope&) = delete;

 private:
  bool was_;
};
bool RowwiseOn();

}  // namespace ctrbox::blas

#endif  // CTRBOX_UTIL_ROWWISE_GEMM_H_
