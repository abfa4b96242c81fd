// What `ctrbox serve` counts of its requests: Prometheus histograms for /metrics, and the
// KServe v2 statistics extension (GET v2/models/{m}/stats, docs/serve.md "Statistics"):
// per version served, the count and nanoseconds of successes, failures and each step of an
// inference (queue, input, infer, output), and the same per batch size.
#ifndef CTRBOX_SERVE_SERVER_STATS_H_
#define CTRBOX_SERVE_SERVER_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "util/mutex.h"

namespace ctrbox {

// A Prometheus histogram with fixed upper bounds. Thread safety: thread-safe (atomics).
template <size_t N>
class Histogram {
 public:
  explicit Histogram(std::array<double, N> bounds) : bounds_(bounds) {}
  void Observe(double v) {
    size_t b = 0;
    while (b < N && v > bounds_[b]) ++b;
    counts_[b].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(v, std::memory_order_relaxed);
  }
  // Appends the histogram in Prometheus' text format.
  void Write(const std::string& name, const std::string& help, std::string* out) const;

 private:
  std::array<double, N> bounds_;
  std::array<std::atomic<uint64_t>, N + 1> counts_{};
  std::atomic<double> sum_{0};
};

// The seconds an inference request spent in each step: waiting for a worker (queue), reading
// its tensors (input), predicting (infer), writing its answer (output).
struct InferTimes {
  double queue = 0, input = 0, infer = 0, output = 0;
  double Total() const { return queue + input + infer + output; }
};

// Thread safety: thread-safe.
class InferStats {
 public:
  // An answered request of `rows` rows with version `version`, at `unix_seconds`.
  void Success(uint64_t version, uint64_t rows, const InferTimes& t, double unix_seconds);
  // A request answered with an error after `seconds` in the server.
  void Failure(uint64_t version, double seconds);
  // The statistics extension's {"model_stats": [...]}: one entry per version that answered,
  // or only `version` when it is not empty.
  nlohmann::json ToJson(const std::string& model, const std::string& version) const;

 private:
  struct Duration {
    uint64_t count = 0, ns = 0;
    void Add(double seconds);
    nlohmann::json ToJson() const;
  };
  struct Steps {
    Duration input, infer, output;
  };
  struct Version {
    uint64_t last_ms = 0, inferences = 0, executions = 0;
    Duration success, fail, queue;
    Steps steps;
    std::map<uint64_t, Steps> batches;  // by batch size (rows), at most kMaxBatchSizes
  };
  static constexpr size_t kMaxBatchSizes = 1024;  // more sizes: a size's power of two below

  mutable Mutex mu_;
  std::map<uint64_t, Version> versions_ GUARDED_BY(mu_);
};

template <size_t N>
void Histogram<N>::Write(const std::string& name, const std::string& help, std::string* out) const {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cum = 0;
  for (size_t b = 0; b <= N; ++b) {
    cum += counts_[b].load(std::memory_order_relaxed);
    const std::string le = b < N ? nlohmann::json(bounds_[b]).dump() : "+Inf";
    *out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cum) + "\n";
  }
  *out += name + "_sum " + nlohmann::json(sum_.load()).dump() + "\n" + name + "_count " +
          std::to_string(cum) + "\n";
}

}  // namespace ctrbox

#endif  // CTRBOX_SERVE_SERVER_STATS_H_
