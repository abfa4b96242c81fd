// The metrics' exact sums (metrics/metrics.h ExactSum: fixed point in 128 bits) against the
// plain double sums they replaced: nanoseconds per term over 1 M terms, and per training row a
// MetricAccumulator::Add (three sums and the AUC bucket) against the same with double sums.
//
//   build/bench/metrics_bench [--reps 5]
//
// Prints one JSON line: medians over the reps.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "bench/bench_util.h"
#include "metrics/metrics.h"

namespace ctrbox::bench {
namespace {

int Main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> u(1e-6, 1.0);
  std::vector<double> x(size_t{1} << 20);
  for (double& v : x) v = u(rng);
  std::vector<double> exact_ns, double_ns, add_ns;
  double sink = 0;
  for (int r = 0; r < reps; ++r) {
    Stopwatch clock;
    ExactSum s;
    for (double v : x) s.Add(v);
    exact_ns.push_back(clock.Seconds() * 1e9 / static_cast<double>(x.size()));
    sink += s.value();
    clock.Reset();
    double d = 0;
    for (double v : x) d += v;
    double_ns.push_back(clock.Seconds() * 1e9 / static_cast<double>(x.size()));
    sink += d;
    clock.Reset();
    MetricAccumulator m;
    for (size_t i = 0; i < x.size(); ++i) m.Add(i % 4 == 0 ? 1.0f : 0.0f, x[i]);
    add_ns.push_back(clock.Seconds() * 1e9 / static_cast<double>(x.size()));
    sink += m.Summary().logloss;
  }
  Emit({{"bench", "metrics"},
        {"terms", x.size()},
        {"reps", reps},
        {"exact_sum_ns_per_term", Median(exact_ns)},
        {"double_sum_ns_per_term", Median(double_ns)},
        {"accumulator_add_ns_per_row", Median(add_ns)},
        {"sink", sink}});  // printed so that no sum can be optimised away
  return 0;
}

}  // namespace
}  // namespace ctrbox::bench

int main(int argc, char** argv) { return ctrbox::bench::Main(argc, argv); }
