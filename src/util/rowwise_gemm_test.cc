#include "util/rowwise_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "util/blas.h"

namespace ctrbox::blas {
namespace {

struct Case {
  int m, n, k;
  float alpha, beta;
};

std::vector<float> Random(size_t n, std::mt19937* rng) {
  // Magnitudes spread over a few decades, so that another summation order changes the bits.
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(-6, 6);
  std::vector<float> v(n);
  for (float& x : v) x = std::ldexp(u(*rng), e(*rng));
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every kernel the CPU has gives the scalar reference's bits, for shapes that take each
// tile's full and partial panels and every row remainder, with padded leading dimensions.
TEST(RowwiseGemmTest, EveryKernelGivesTheScalarReferencesBits) {
  std::mt19937 rng(7);
  int ran = 0;
  for (int m : {1, 2, 3, 4, 5, 6, 7, 9, 11, 33}) {
    for (int n : {1, 5, 8, 16, 17, 24, 47, 64, 65, 129}) {
      for (int k : {0, 1, 3, 64, 96, 97, 129, 193, 429}) {
        for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {0.5f, 0.0f}, {1.0f, 0.75f}}) {
          const int lda = k + 3, ldb = n + 5, ldc = n + 2;
          const auto a = Random(size_t(m) * lda, &rng), b = Random(size_t(k) * ldb + 1, &rng);
          const auto c0 = Random(size_t(m) * ldc, &rng);
          std::vector<float> want = c0;
          ASSERT_TRUE(SgemmRowwiseWith("scalar", m, n, k, alpha, a.data(), lda, b.data(), ldb, beta,
                                       want.data(), ldc));
          for (const char* kernel : {"avx512", "avx2"}) {
            std::vector<float> got = c0;
            if (!SgemmRowwiseWith(kernel, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta,
                                  got.data(), ldc)) {
              continue;
            }
            ++ran;
            ASSERT_TRUE(SameBits(got, want)) << kernel << " m=" << m << " n=" << n << " k=" << k
                                             << " alpha=" << alpha << " beta=" << beta;
          }
        }
      }
    }
  }
  std::printf("kernel in use: %s; %d kernel runs compared\n", RowwiseKernel().c_str(), ran);
}

// A row's output is the same alone, in any call, at any place in it: rows predicted one by
// one equal the rows of calls of every size that hold them.
TEST(RowwiseGemmTest, ARowsOutputDoesNotDependOnTheOtherRowsOfTheCall) {
  std::mt19937 rng(11);
  const int m = 37, n = 200, k = 429;
  const auto a = Random(size_t(m) * k, &rng), b = Random(size_t(k) * n, &rng);
  std::vector<float> whole(size_t(m) * n);
  SgemmRowwise(m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, whole.data(), n);
  for (int rows : {1, 2, 3, 5, 8, 13}) {
    for (int i0 = 0; i0 < m; i0 += rows) {
      const int r = std::min(rows, m - i0);
      std::vector<float> part(size_t(r) * n);
      SgemmRowwise(r, n, k, 1.0f, a.data() + size_t(i0) * k, k, b.data(), n, 0.0f, part.data(), n);
      ASSERT_EQ(std::memcmp(part.data(), whole.data() + size_t(i0) * n, part.size() * 4), 0)
          << "rows " << i0 << ".." << i0 + r;
    }
  }
}

// Close to a double-precision product (it is a GEMM), and equal to OpenBLAS within rounding.
TEST(RowwiseGemmTest, MatchesADoubleReferenceAndOpenBlas) {
  std::mt19937 rng(3);
  const int m = 19, n = 70, k = 300;
  const auto a = Random(size_t(m) * k, &rng), b = Random(size_t(k) * n, &rng);
  std::vector<float> got(size_t(m) * n), blas(size_t(m) * n);
  SgemmRowwise(m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, got.data(), n);
  Sgemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, blas.data(), n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int p = 0; p < k; ++p) {
        ref += double(a[size_t(i) * k + p]) * b[size_t(p) * n + j];
        mag += std::fabs(double(a[size_t(i) * k + p]) * b[size_t(p) * n + j]);
      }
      const double tol = 1e-6 * mag + 1e-30;
      ASSERT_NEAR(got[size_t(i) * n + j], ref, tol) << i << "," << j;
      ASSERT_NEAR(blas[size_t(i) * n + j], ref, tol) << i << "," << j;
    }
  }
}

// Under a RowwiseScope, Sgemm without transposes is SgemmRowwise (bit for bit), and the scope
// ends with its block; transposed calls stay OpenBLAS's.
TEST(RowwiseGemmTest, TheScopeRoutesSgemmOnItsThreadOnly) {
  std::mt19937 rng(5);
  const int m = 6, n = 33, k = 50;
  const auto a = Random(size_t(m) * k, &rng), b = Random(size_t(k) * n, &rng);
  std::vector<float> want(size_t(m) * n), got(size_t(m) * n);
  SgemmRowwise(m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, want.data(), n);
  EXPECT_FALSE(RowwiseOn());
  {
    RowwiseScope on(true);
    EXPECT_TRUE(RowwiseOn());
    {
      RowwiseScope off(false);
      EXPECT_FALSE(RowwiseOn());
    }
    EXPECT_TRUE(RowwiseOn());
    Sgemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, got.data(), n);
  }
  EXPECT_FALSE(RowwiseOn());
  EXPECT_TRUE(SameBits(got, want));
}

}  // namespace
}  // namespace ctrbox::blas
