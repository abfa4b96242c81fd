#include "util/rowwise_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

namespace ctrbox::blas {
namespace {

thread_local bool rowwise_on = false;

// The reference: each element's chain in order, on one row at a time.
void Scalar(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) {
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(n));
  for (int i = 0; i < m; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    const float* ai = a + static_cast<size_t>(i) * lda;
    for (int p = 0; p < k; ++p) {
      const float x = ai[p];
      const float* bp = b + static_cast<size_t>(p) * ldb;
      for (int j = 0; j < n; ++j) acc[j] = std::fma(x, bp[j], acc[j]);
    }
    float* ci = c + static_cast<size_t>(i) * ldc;
    for (int j = 0; j < n; ++j) {
      float t = acc[j];
      if (alpha != 1.0f) t *= alpha;
      if (beta != 0.0f) t = std::fma(beta, ci[j], t);
      ci[j] = t;
    }
  }
}

#if defined(__x86_64__)

// R rows x V vectors of 16 columns; `cols` of them valid (the last panel may be narrower).
template <int R, int V, bool kFull>
__attribute__((target("avx512f"))) void Tile512(int k, float alpha, const float* a, int lda,
                                                const float* b, int ldb, float beta, float* c,
                                                int ldc, int cols) {
  __mmask16 mask[V];
  for (int v = 0; v < V; ++v) {
    const int left = cols - 16 * v;
    mask[v] = left >= 16  ? __mmask16(0xFFFF)
              : left <= 0 ? __mmask16(0)
                          : __mmask16((1u << left) - 1u);
  }
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int p = 0; p < k; ++p) {
    const float* bp = b + static_cast<size_t>(p) * ldb;
    __m512 bv[V];
    for (int v = 0; v < V; ++v) {
      bv[v] = kFull ? _mm512_loadu_ps(bp + 16 * v) : _mm512_maskz_loadu_ps(mask[v], bp + 16 * v);
    }
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[static_cast<size_t>(r) * lda + p]);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(x, bv[v], acc[r][v]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int r = 0; r < R; ++r) {
    float* cr = c + static_cast<size_t>(r) * ldc;
    for (int v = 0; v < V; ++v) {
      __m512 t = acc[r][v];
      if (alpha != 1.0f) t = _mm512_mul_ps(t, va);
      if (beta != 0.0f) t = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask[v], cr + 16 * v), t);
      _mm512_mask_storeu_ps(cr + 16 * v, mask[v], t);
    }
  }
}

// R rows x V vectors of 8 columns.
template <int R, int V, bool kFull>
__attribute__((target("avx2,fma"))) void Tile256(int k, float alpha, const float* a, int lda,
                                                 const float* b, int ldb, float beta, float* c,
                                                 int ldc, int cols) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i mask[V];
  for (int v = 0; v < V; ++v) mask[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols - 8 * v), lane);
  __m256 acc[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  for (int p = 0; p < k; ++p) {
    const float* bp = b + static_cast<size_t>(p) * ldb;
    __m256 bv[V];
    for (int v = 0; v < V; ++v) {
      bv[v] = kFull ? _mm256_loadu_ps(bp + 8 * v) : _mm256_maskload_ps(bp + 8 * v, mask[v]);
    }
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + static_cast<size_t>(r) * lda + p);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(x, bv[v], acc[r][v]);
    }
  }
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  for (int r = 0; r < R; ++r) {
    float* cr = c + static_cast<size_t>(r) * ldc;
    for (int v = 0; v < V; ++v) {
      __m256 t = acc[r][v];
      if (alpha != 1.0f) t = _mm256_mul_ps(t, va);
      if (beta != 0.0f) t = _mm256_fmadd_ps(vb, _mm256_maskload_ps(cr + 8 * v, mask[v]), t);
      _mm256_maskstore_ps(cr + 8 * v, mask[v], t);
    }
  }
}

// Column panels of W = lanes * V columns (B's panel stays in cache while every row group
// passes over it), rows in groups of kRows and then the 1 .. kRows - 1 left. Each element's
// arithmetic is the same in every tile: the tiles only choose which elements run side by side.
template <int kLanes, int V, int kRows, template <int, int, bool> class Tile>
void Panels(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) {
  constexpr int W = kLanes * V;
  for (int j0 = 0; j0 < n; j0 += W) {
    const int cols = std::min(W, n - j0);
    const float* bj = b + j0;
    auto tile = [&]<int R>(int i) {
      const float* ai = a + static_cast<size_t>(i) * lda;
      float* ci = c + static_cast<size_t>(i) * ldc + j0;
      if (cols == W) {
        Tile<R, V, true>::Run(k, alpha, ai, lda, bj, ldb, beta, ci, ldc, cols);
      } else {
        Tile<R, V, false>::Run(k, alpha, ai, lda, bj, ldb, beta, ci, ldc, cols);
      }
    };
    int i = 0;
    for (; i + kRows <= m; i += kRows) tile.template operator()<kRows>(i);
    [&]<int... R>(std::integer_sequence<int, R...>) {  // the rows left: one tile of R + 1
      ((m - i == R + 1 ? tile.template operator()<R + 1>(i) : void()), ...);
    }
    (std::make_integer_sequence<int, kRows - 1>());
  }
}

// The kernels: 6 rows x 64 columns with AVX-512 (24 of the 32 registers accumulate; tiles of 4
// rows loaded B's panel once per 16 FMAs instead of 24 and took 1.3-1.4x the time on the
// default model's layers at 256 rows), 4 x 24 with AVX2 (12 of 16 registers); an output of one
// vector's width or less (the last layer's single column) takes tiles of one vector and more
// rows, so that no masked-off vector is multiplied (2x faster there). Cutting the depth into
// L1-sized blocks (partial sums stored between blocks) measured no faster than this.
template <int kLanes, int V, int kRows, int kNarrowRows, template <int, int, bool> class Tile>
void Widths(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) {
  if (n <= kLanes) {
    Panels<kLanes, 1, kNarrowRows, Tile>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    Panels<kLanes, V, kRows, Tile>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

template <int R, int V, bool kFull>
struct Avx512 {
  static void Run(int k, float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                  float* c, int ldc, int cols) {
    Tile512<R, V, kFull>(k, alpha, a, lda, b, ldb, beta, c, ldc, cols);
  }
};
template <int R, int V, bool kFull>
struct Avx2 {
  static void Run(int k, float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                  float* c, int ldc, int cols) {
    Tile256<R, V, kFull>(k, alpha, a, lda, b, ldb, beta, c, ldc, cols);
  }
};

#endif  // __x86_64__

using Kernel = void (*)(int, int, int, float, const float*, int, const float*, int, float, float*,
                        int);

bool Has(const std::string& name) {
#if defined(__x86_64__)
  if (name == "avx512") return __builtin_cpu_supports("avx512f");
  if (name == "avx2") return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return name == "scalar";
}

Kernel Named(const std::string& name) {
#if defined(__x86_64__)
  if (name == "avx512") return &Widths<16, 4, 6, 12, Avx512>;
  if (name == "avx2") return &Widths<8, 3, 4, 8, Avx2>;
#endif
  return &Scalar;
}

const std::string& Chosen() {
  static const std::string chosen = [] {
    std::string want;
    if (const char* e = std::getenv("CTRBOX_ROWWISE_KERNEL")) want = e;
    for (const char* k : {"avx512", "avx2"}) {
      if (!want.empty() && want != k) continue;
      if (Has(k)) return std::string(k);
      want.clear();  // the CPU lacks it: the next narrower one
    }
    return std::string("scalar");
  }();
  return chosen;
}

}  // namespace

void SgemmRowwise(int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                  int ldb, float beta, float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  static const Kernel kernel = Named(Chosen());
  kernel(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

std::string RowwiseKernel() { return Chosen(); }

bool SgemmRowwiseWith(const std::string& kernel, int m, int n, int k, float alpha, const float* a,
                      int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (!Has(kernel)) return false;
  if (m > 0 && n > 0) Named(kernel)(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  return true;
}

RowwiseScope::RowwiseScope(bool on) : was_(rowwise_on) { rowwise_on = on; }
RowwiseScope::~RowwiseScope() { rowwise_on = was_; }
bool RowwiseOn() { return rowwise_on; }

}  // namespace ctrbox::blas
