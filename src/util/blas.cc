#include "util/blas.h"

#include <cblas.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>

#include "util/rowwise_gemm.h"

namespace ctrbox::blas {
namespace {
std::atomic<bool> counting{false};
std::atomic<uint64_t> counted_calls{0}, counted_flops{0}, counted_nanos{0};
}  // namespace

void Sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  const bool count = counting.load(std::memory_order_relaxed);
  const auto start =
      count ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  if (!trans_a && !trans_b && RowwiseOn()) {
    SgemmRowwise(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  if (count) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    counted_calls.fetch_add(1, std::memory_order_relaxed);
    counted_flops.fetch_add(2ull * m * n * k, std::memory_order_relaxed);
    counted_nanos.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
  }
}

void EnableGemmCounters(bool on) { counting.store(on, std::memory_order_relaxed); }

GemmCounters ReadGemmCounters() {
  return GemmCounters{counted_calls.load(), static_cast<double>(counted_flops.load()),
                      static_cast<double>(counted_nanos.load()) * 1e-9};
}

void ResetGemmCounters() {
  counted_calls = 0;
  counted_flops = 0;
  counted_nanos = 0;
}

void UseSingleThreadedBlas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

std::string CoreName() {
  const char* name = openblas_get_corename();
  return name ? name : "unknown";
}

std::string FittingCoreType() {
#if defined(__x86_64__)
  const std::string core = CoreName();
  // OpenBLAS's x86-64 kernel sets without AVX (its DYNAMIC_ARCH fallbacks).
  static const char* const kPreAvx[] = {"Prescott",  "Core2", "Penryn",  "Dunnington",
                                        "Nehalem",   "Atom",  "Opteron", "Opteron_SSE3",
                                        "Barcelona", "Nano",  "Bobcat"};
  bool old = false;
  for (const char* k : kPreAvx) old |= core == k;
  if (!old) return "";
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return "";
}

namespace {
constexpr const char* kRestartedVar = "CTRBOX_BLAS_RESTARTED";  // the core OpenBLAS had chosen
std::string& RestartedFrom() {
  static std::string from;
  return from;
}
}  // namespace

void TakeCoreChoiceNote() {
  if (const char* from = std::getenv(kRestartedVar)) {
    const char* chosen = std::getenv("OPENBLAS_CORETYPE");
    if (chosen != nullptr && CoreName() == chosen) RestartedFrom() = from;  // it took effect
    ::unsetenv(kRestartedVar);  // not for the processes this one starts
  }
}

void SelectFittingCores(char** argv) {
  if (std::getenv(kRestartedVar) != nullptr) {
    TakeCoreChoiceNote();
    return;
  }
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice
  const std::string better = FittingCoreType();
  if (better.empty()) return;
  ::setenv(kRestartedVar, CoreName().c_str(), 1);
  ::setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  ::unsetenv(kRestartedVar);  // the exec failed: go on with the slow kernels (the log warns)
  ::unsetenv("OPENBLAS_CORETYPE");
}

std::string CoreChosenBy() {
  if (!RestartedFrom().empty()) return "ctrbox";
  return std::getenv("OPENBLAS_CORETYPE") != nullptr ? "OPENBLAS_CORETYPE" : "openblas";
}

std::string CoreChoiceNote() {
  if (RestartedFrom().empty()) return "";
  return "OpenBLAS chose its " + RestartedFrom() +
         " (SSE) kernels on this CPU (it does not recognise its model): ctrbox restarted with "
         "OPENBLAS_CORETYPE=" +
         CoreName() + " (set OPENBLAS_CORETYPE to choose otherwise)";
}

std::string SlowCoreWarning() {
  const std::string better = FittingCoreType();
  if (better.empty()) return "";
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  const std::string advice =
      set != nullptr && better == set
          ? "OPENBLAS_CORETYPE was set after OpenBLAS was loaded (in Python: import ctrbox before "
            "numpy, or export OPENBLAS_CORETYPE=" +
                better + " before starting it)"
          : "set OPENBLAS_CORETYPE=" + better + " in the environment";
  return "OpenBLAS chose its " + CoreName() + " (SSE) kernels on a CPU with " +
         (better == "SkylakeX" ? "AVX-512" : "AVX2") +
         " (it does not recognise the CPU model): the MLP's GEMMs run 2-4x slower than they "
         "could; " +
         advice + " (docs/model.md, BLAS)";
}

}  // namespace ctrbox::blas
