#include "model/mlp.h"

#include <gtest/gtest.h>

#include <cmath>

#include "util/blas.h"
#include "util/random.h"

namespace ctrbox {
namespace {

// Loss = sum_r c_r * logit_r, so dlogit = c. *pattern receives the ReLU on/off pattern: a
// finite difference is only valid where the perturbation crosses no kink.
double Loss(const Mlp& mlp, const std::vector<float>& params, const std::vector<float>& x, int rows,
            const std::vector<float>& c, std::vector<bool>* pattern) {
  std::vector<std::vector<float>> acts(mlp.num_layers() - 1);
  std::vector<float*> ptrs;
  for (uint32_t l = 0; l + 1 < mlp.num_layers(); ++l) {
    acts[l].resize(size_t(rows) * mlp.out(l));
    ptrs.push_back(acts[l].data());
  }
  std::vector<float> logits(rows);
  mlp.Forward(params.data(), x.data(), rows, ptrs.data(), logits.data());
  pattern->clear();
  for (const auto& a : acts) {
    for (float v : a) pattern->push_back(v > 0);
  }
  double loss = 0;
  for (int r = 0; r < rows; ++r) loss += double(c[r]) * logits[r];
  return loss;
}

TEST(MlpTest, GradientsMatchFiniteDifferences) {
  blas::UseSingleThreadedBlas();
  for (auto hidden :
       {std::vector<uint32_t>{}, std::vector<uint32_t>{6}, std::vector<uint32_t>{6, 5, 4}}) {
    const uint32_t in = 7;
    const int rows = 9;
    Mlp mlp(in, hidden);
    std::vector<float> params(mlp.num_params());
    mlp.Init(params.data(), 3);
    Random rng(4);
    std::vector<float> x(size_t(rows) * in), c(rows);
    for (float& v : x) v = static_cast<float>(rng.Gaussian());
    for (float& v : c) v = static_cast<float>(rng.Gaussian());

    // Analytic gradients.
    std::vector<std::vector<float>> acts(mlp.num_layers() - 1), grads(mlp.num_layers() - 1);
    std::vector<float*> ap, gp;
    for (uint32_t l = 0; l + 1 < mlp.num_layers(); ++l) {
      acts[l].resize(size_t(rows) * mlp.out(l));
      grads[l].resize(size_t(rows) * mlp.out(l));
      ap.push_back(acts[l].data());
      gp.push_back(grads[l].data());
    }
    std::vector<float> logits(rows), dx(size_t(rows) * (in - 2)), gparams(mlp.num_params());
    mlp.Forward(params.data(), x.data(), rows, ap.data(), logits.data());
    std::vector<const float*> cap(ap.begin(), ap.end());
    mlp.Backward(params.data(), cap.data(), c.data(), rows, gp.data(), dx.data(), 2);
    const uint32_t last = mlp.num_layers() - 1;
    for (uint32_t l = 0; l < mlp.num_layers(); ++l) {
      const float* xin = l == 0 ? x.data() : acts[l - 1].data();
      const float* g = l == last ? c.data() : grads[l].data();
      // Two tiles per layer where possible, to test tiling.
      uint32_t mid = mlp.out(l) / 2;
      if (mid > 0) mlp.TileGrad(l, 0, mid, xin, g, rows, gparams.data());
      mlp.TileGrad(l, mid, mlp.out(l), xin, g, rows, gparams.data());
    }

    const float h = 1e-2f;
    std::vector<bool> base, pu, pd;
    Loss(mlp, params, x, rows, c, &base);
    int checked = 0, total = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      auto p2 = params;
      p2[i] += h;
      double up = Loss(mlp, p2, x, rows, c, &pu);
      p2[i] -= 2 * h;
      double down = Loss(mlp, p2, x, rows, c, &pd);
      ++total;
      if (pu != base || pd != base) continue;
      ++checked;
      double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(gparams[i], numeric, 2e-3 + 2e-3 * std::fabs(numeric))
          << "param " << i << " layers " << mlp.num_layers();
    }
    for (int r = 0; r < rows; ++r) {
      for (uint32_t j = 2; j < in; ++j) {
        auto x2 = x;
        x2[r * in + j] += h;
        double up = Loss(mlp, params, x2, rows, c, &pu);
        x2[r * in + j] -= 2 * h;
        double down = Loss(mlp, params, x2, rows, c, &pd);
        ++total;
        if (pu != base || pd != base) continue;
        ++checked;
        double numeric = (up - down) / (2 * h);
        EXPECT_NEAR(dx[r * (in - 2) + (j - 2)], numeric, 2e-3 + 2e-3 * std::fabs(numeric));
      }
    }
    EXPECT_GT(checked, total * 3 / 4) << "too many kinks crossed to check the gradient";
  }
}

}  // namespace
}  // namespace ctrbox
