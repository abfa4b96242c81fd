#include "util/blas.h"

#include <cblas.h>

#include <atomic>
#include <chrono>
#include <mutex>

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
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
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

std::string SlowCoreWarning() {
#if defined(__x86_64__)
  const std::string core = CoreName();
  // OpenBLAS's x86-64 kernel sets without AVX (its DYNAMIC_ARCH fallbacks).
  static const char* const kPreAvx[] = {"Prescott",  "Core2", "Penryn",  "Dunnington",
                                        "Nehalem",   "Atom",  "Opteron", "Opteron_SSE3",
                                        "Barcelona", "Nano",  "Bobcat"};
  bool old = false;
  for (const char* k : kPreAvx) old |= core == k;
  if (!old || !__builtin_cpu_supports("avx2")) return "";
  const char* better = __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell";
  return "OpenBLAS chose its " + core + " (SSE) kernels on a CPU with " +
         (__builtin_cpu_supports("avx512f") ? "AVX-512" : "AVX2") +
         " (it does not recognise the CPU model): the MLP's GEMMs run 2-4x slower than they "
         "could; set OPENBLAS_CORETYPE=" +
         better + " in the environment (docs/model.md, BLAS)";
#else
  return "";
#endif
}

}  // namespace ctrbox::blas
