#include "model/blas.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "util/sys.h"

namespace ctrbox::blas {

void Sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void UseSingleThreadedBlas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

std::string CoreName() {
  const char* name = openblas_get_corename();
  return name ? name : "unknown";
}

void MaybeReexecWithFasterKernels(char** argv) {
  const char* opt_out = std::getenv("CTRBOX_BLAS_REEXEC");
  if (opt_out && std::strcmp(opt_out, "0") == 0) return;
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user chose, or we did
  if (!CpuHasAvx512()) return;
  const std::string core = CoreName();
  if (core != "Haswell" && core != "Zen" && core != "haswell" && core != "zen") return;
  ::setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  ::execv("/proc/self/exe", argv);
  ::unsetenv("OPENBLAS_CORETYPE");  // exec failed: carry on with what we have
}

}  // namespace ctrbox::blas
