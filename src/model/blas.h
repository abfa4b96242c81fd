// BLAS access for the CPU kernels: single-precision GEMM on OpenBLAS.
//
// ctrbox parallelises across GEMM calls on fixed tiles (so results do not depend on the
// thread count) and runs each call single-threaded.
#ifndef CTRBOX_MODEL_BLAS_H_
#define CTRBOX_MODEL_BLAS_H_

#include <string>

namespace ctrbox::blas {

// C[m x n] = alpha * op(A) * op(B) + beta * C, all row-major.
// Thread safety: safe to call concurrently (after UseSingleThreadedBlas()).
void Sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

// Makes every BLAS call run on its calling thread. Idempotent; called by CtrModel.
void UseSingleThreadedBlas();

// The kernel set OpenBLAS chose ("SkylakeX", "Haswell", ...).
std::string CoreName();

// OpenBLAS 0.3.21 (Debian 12) does not know AMD Zen 4/5 and picks its AVX2 "Haswell"
// kernels there, at half the speed of its AVX-512 "SkylakeX" kernels on the same CPU. When
// the CPU has AVX-512 (F, CD, BW, DQ, VL), OpenBLAS chose an AVX2 kernel set and the user has
// not set OPENBLAS_CORETYPE, this re-executes the program with OPENBLAS_CORETYPE=SkylakeX
// (OpenBLAS reads it only at load time). Set CTRBOX_BLAS_REEXEC=0 to disable. Call first thing
// in main(); returns if no re-execution happened (or it failed).
void MaybeReexecWithFasterKernels(char** argv);

}  // namespace ctrbox::blas

#endif  // CTRBOX_MODEL_BLAS_H_
