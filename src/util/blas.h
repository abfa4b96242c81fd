// BLAS access for the CPU kernels: single-precision GEMM on OpenBLAS.
//
// ctrbox parallelises across GEMM calls on fixed tiles (so results do not depend on the
// thread count) and runs each call single-threaded.
#ifndef CTRBOX_UTIL_BLAS_H_
#define CTRBOX_UTIL_BLAS_H_

#include <string>

namespace ctrbox::blas {

// C[m x n] = alpha * op(A) * op(B) + beta * C, all row-major. Under a RowwiseScope
// (util/rowwise_gemm.h) a call without transposes is SgemmRowwise.
// Thread safety: safe to call concurrently (after UseSingleThreadedBlas()).
void Sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

// Makes every BLAS call run on its calling thread. Idempotent; called by CtrModel.
void UseSingleThreadedBlas();

// Optional counters of every Sgemm call (for benchmarks): floating-point operations and the
// time spent inside the calls, summed over threads. Off by default (one relaxed load per call).
struct GemmCounters {
  uint64_t calls = 0;
  double flops = 0;
  double seconds = 0;  // summed over the calling threads
};
void EnableGemmCounters(bool on);
GemmCounters ReadGemmCounters();
void ResetGemmCounters();

// The kernel set OpenBLAS chose ("Cooperlake", "Haswell", ...): it detects the CPU, unless
// the environment variable OPENBLAS_CORETYPE forces one.
std::string CoreName();
// "" or, when OpenBLAS chose kernels without AVX on a CPU with AVX2 or AVX-512, the
// OPENBLAS_CORETYPE that fits the CPU: SkylakeX (AVX-512 F/BW/DQ/VL) or Haswell (AVX2, FMA).
std::string FittingCoreType();
// Who chose the kernels: "ctrbox" (SelectFittingCores), "OPENBLAS_CORETYPE" (the user's
// environment) or "openblas" (its own detection).
std::string CoreChosenBy();
// The process's kernel choice when ctrbox made it (SelectFittingCores): "" if OpenBLAS's own
// choice stands, else a sentence for the log naming both.
std::string CoreChoiceNote();
// OpenBLAS picks its kernels when it is loaded, before main: where it would run kernels
// without AVX on a CPU with AVX2 / AVX-512 and the user has not set OPENBLAS_CORETYPE, sets it
// to FittingCoreType() and re-executes the program (execv of /proc/self/exe with argv); returns
// only when nothing is to be done (or the exec failed). Call first thing in main, before any
// thread starts or input is read.
void SelectFittingCores(char** argv);
// The part of SelectFittingCores for a process that cannot re-execute (the Python module,
// whose package sets OPENBLAS_CORETYPE before loading it): takes the note of the kernels
// OpenBLAS had chosen from the environment (CTRBOX_BLAS_RESTARTED), for CoreChoiceNote.
void TakeCoreChoiceNote();

// "" or, when OpenBLAS chose kernels older than the CPU (its detection falls back to SSE3
// "Prescott" on CPUs it does not recognise, such as VMs that hide the CPU model), a warning
// naming the OPENBLAS_CORETYPE that would use the CPU's AVX2 or AVX-512.
std::string SlowCoreWarning();

}  // namespace ctrbox::blas

#endif  // CTRBOX_UTIL_BLAS_H_
