// GEMM benchmark: the BLAS's own peak on this machine against what the trainer's MLP GEMMs
// reach inside real training steps of the default model (batch 2048, 429-512-256-128-1), and
// predictions of the default model with OpenBLAS against the row-wise kernel
// (util/rowwise_gemm.h) at each number of rows a call.
//
//   build/bench/gemm_bench [--threads N] [--steps N] [--predict-only]
//
// Prints JSON lines: blas_peak (1 thread; N concurrent single-threaded calls, the scheme the
// trainer uses; OpenBLAS's own N-thread GEMM) and mlp_step (step time, examples/s, the GEMMs'
// GFLOP/s per core measured around every call, and their share of BLAS peak).
#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "bench/bench_util.h"
#include "io/synth.h"
#include "model/ctr_model.h"
#include "table/accessor.h"
#include "util/rowwise_gemm.h"
#include "util/thread_pool.h"
#include "working/working_set.h"

namespace ctrbox::bench {
namespace {

// GFLOP/s of `threads` concurrent single-threaded 2048^3 SGEMMs over about `seconds`.
double ConcurrentPeak(int threads, double seconds) {
  const int n = 2048;
  std::vector<std::thread> workers;
  std::vector<double> gflops(threads);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
      blas::Sgemm(false, false, n, n, n, 1, a.data(), n, b.data(), n, 0, c.data(), n);  // warm
      Stopwatch clock;
      int reps = 0;
      while (clock.Seconds() < seconds) {
        blas::Sgemm(false, false, n, n, n, 1, a.data(), n, b.data(), n, 0, c.data(), n);
        ++reps;
      }
      gflops[t] = 2.0 * n * n * n * reps / clock.Seconds() / 1e9;
    });
  }
  for (auto& w : workers) w.join();
  double total = 0;
  for (double g : gflops) total += g;
  return total;
}

double ThreadedPeak(int threads, double seconds) {
  const int n = 2048;
  openblas_set_num_threads(threads);
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a.data(), n, b.data(), n, 0,
              c.data(), n);
  Stopwatch clock;
  int reps = 0;
  while (clock.Seconds() < seconds) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a.data(), n, b.data(), n, 0,
                c.data(), n);
    ++reps;
  }
  openblas_set_num_threads(1);
  return 2.0 * n * n * n * reps / clock.Seconds() / 1e9;
}

// One thread's predictions of the default model over `rows` generated rows in minibatches of
// `per_call` rows (a served request's rows, or a batch of requests), OpenBLAS against
// row-wise, alternating, medians of `reps`.
void PredictForward(uint32_t per_call, int reps) {
  const uint32_t rows = 4096;
  SynthGenerator gen(SynthOptions{});
  Batch pass;
  gen.GenerateBatch(0, rows, &pass, nullptr);
  OptimizerOptions sparse, dense;
  CtrModel model(pass.schema, ModelOptions{}, sparse, dense, 1);
  CtrAccessor accessor(model.value_layout(), AccessorOptions{});
  WorkingSet ws;
  BuildWorkingSet(pass, per_call, nullptr, &ws);
  RowBlock block(model.value_layout());
  block.Resize(ws.keys.size());
  for (size_t i = 0; i < ws.keys.size(); ++i) accessor.InitRow(&block, i, ws.keys[i]);
  std::vector<float> p(rows);
  std::vector<double> blas_s, rowwise_s;
  for (int rep = 0; rep <= reps; ++rep) {
    for (bool rowwise : {false, true}) {
      model.set_rowwise_predictions(rowwise);
      Stopwatch clock;
      for (const Minibatch& mb : ws.batches) {
        model.Predict(pass, ws, mb, block, nullptr, p.data() + mb.row_begin);
      }
      if (rep > 0) (rowwise ? rowwise_s : blas_s).push_back(clock.Seconds());  // rep 0: warm
    }
  }
  const double b = rows / Median(blas_s), r = rows / Median(rowwise_s);
  Emit({{"bench", "predict_forward"},
        {"rows_per_call", per_call},
        {"threads", 1},
        {"reps", reps},
        {"rowwise_kernel", blas::RowwiseKernel()},
        {"openblas_examples_per_s", b},
        {"rowwise_examples_per_s", r},
        {"rowwise_vs_openblas", r / b}});
}

// The row-wise kernel alone on the default model's layers (429-512-256-128-1) at 256 rows a
// call (a served request of 256 records): the median of `reps` timings of 10 calls each, on
// one thread and on `threads` threads at once (cores that share their vector units, as
// hyperthreads or some VMs' vCPUs do, show it there).
void RowwiseLayers(int threads, int reps) {
  const int m = 256;
  const int shapes[][2] = {{429, 512}, {512, 256}, {256, 128}, {128, 1}};  // (k, n)
  for (const auto& [k, n] : shapes) {
    for (int t : {1, threads}) {
      std::vector<double> seconds(t);
      std::vector<std::thread> workers;
      for (int w = 0; w < t; ++w) {
        workers.emplace_back([&, w] {
          std::vector<float> a(size_t(m) * k, 0.5f), b(size_t(k) * n, 0.25f), c(size_t(m) * n);
          std::vector<double> s;
          for (int rep = 0; rep <= reps; ++rep) {
            Stopwatch clock;
            for (int i = 0; i < 10; ++i) {
              blas::SgemmRowwise(m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
            }
            if (rep > 0) s.push_back(clock.Seconds() / 10);  // rep 0: warm
          }
          seconds[w] = Median(s);
        });
      }
      for (auto& w : workers) w.join();
      const double sec = Median(seconds);
      Emit({{"bench", "rowwise_layer"},
            {"rowwise_kernel", blas::RowwiseKernel()},
            {"rows", m},
            {"k", k},
            {"n", n},
            {"threads_at_once", t},
            {"reps", reps},
            {"us_per_call", sec * 1e6},
            {"gflops_per_thread", 2.0 * m * n * k / sec / 1e9}});
      if (threads == 1) break;
    }
  }
}

int Main(int argc, char** argv) {
  int threads = NumCpus(), steps = 60;
  bool predict_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--predict-only")) predict_only = true;
    if (i + 1 >= argc) break;
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
  }
  blas::UseSingleThreadedBlas();
  RowwiseLayers(threads, 15);
  for (uint32_t per_call : {1u, 4u, 16u, 64u, 256u}) PredictForward(per_call, 5);
  if (predict_only) return 0;
  const double peak1 = ConcurrentPeak(1, 2.0);
  const double peak_n = ConcurrentPeak(threads, 2.0);
  const double threaded = ThreadedPeak(threads, 2.0);
  Emit({{"bench", "blas_peak"}, {"threads", 1}, {"shape", "2048x2048x2048"}, {"gflops", peak1}});
  Emit({{"bench", "blas_peak"},
        {"threads", threads},
        {"mode", "concurrent single-threaded calls"},
        {"shape", "2048x2048x2048"},
        {"gflops", peak_n}});
  Emit({{"bench", "blas_peak"},
        {"threads", threads},
        {"mode", "openblas threaded"},
        {"shape", "2048x2048x2048"},
        {"gflops", threaded}});

  // Real training steps of the default model on generated Criteo-like rows.
  const uint32_t batch = 2048, batches = 16;
  SynthGenerator gen(SynthOptions{});
  Batch pass;
  gen.GenerateBatch(0, uint64_t{batch} * batches, &pass, nullptr);
  OptimizerOptions sparse, dense;
  dense.kind = OptimizerKind::kAdam;
  dense.lr = 1e-3f;
  dense.epsilon = 1e-8f;
  CtrModel model(pass.schema, ModelOptions{}, sparse, dense, 1);
  CtrAccessor accessor(model.value_layout(), AccessorOptions{});
  ThreadPool pool(threads);
  WorkingSet ws;
  BuildWorkingSet(pass, batch, &pool, &ws);
  RowBlock rows(model.value_layout());
  rows.Resize(ws.keys.size());
  for (size_t i = 0; i < ws.keys.size(); ++i) accessor.InitRow(&rows, i, ws.keys[i]);
  std::vector<float> predictions(batch);
  for (const Minibatch& mb : ws.batches) {  // warm-up
    model.TrainMinibatch(pass, ws, mb, &rows, accessor, &pool, predictions.data());
  }
  std::vector<double> step_seconds;
  blas::ResetGemmCounters();
  blas::EnableGemmCounters(true);
  Stopwatch total;
  for (int s = 0; s < steps; ++s) {
    Stopwatch clock;
    model.TrainMinibatch(pass, ws, ws.batches[s % batches], &rows, accessor, &pool,
                         predictions.data());
    step_seconds.push_back(clock.Seconds());
  }
  const double wall = total.Seconds();
  blas::EnableGemmCounters(false);
  const blas::GemmCounters g = blas::ReadGemmCounters();
  const double step = Median(step_seconds);
  const double model_flops = model.mlp().FlopsPerExample() * batch;
  const double gemm_per_core = g.flops / g.seconds / 1e9;
  Emit({{"bench", "mlp_step"},
        {"batch", batch},
        {"threads", threads},
        {"steps", steps},
        {"step_seconds_median", step},
        {"examples_per_s", batch / step},
        {"step_gflops", model_flops / step / 1e9},
        {"step_efficiency_vs_peak", model_flops / step / 1e9 / peak_n},
        {"gemm_gflops_per_core", gemm_per_core},
        {"gemm_efficiency_vs_1t_peak", gemm_per_core / peak1},
        {"gemm_share_of_thread_time", g.seconds / (wall * threads)},
        {"gemm_calls_per_step", static_cast<double>(g.calls) / steps}});
  return 0;
}

}  // namespace
}  // namespace ctrbox::bench

int main(int argc, char** argv) {
  // OpenBLAS's own kernels where it chose ones without AVX (a VM hiding the CPU model), as
  // `ctrbox` runs it: otherwise this bench measured OpenBLAS's SSE3 kernels (blas_core
  // Prescott) against the row-wise AVX-512 ones.
  ctrbox::blas::SelectFittingCores(argv);
  return ctrbox::bench::Main(argc, argv);
}
