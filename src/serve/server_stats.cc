#include "serve/server_stats.h"

#include <bit>
#include <cmath>

namespace ctrbox {

void InferStats::Duration::Add(double seconds) {
  ++count;
  ns += static_cast<uint64_t>(std::llround(std::max(0.0, seconds) * 1e9));
}

nlohmann::json InferStats::Duration::ToJson() const { return {{"count", count}, {"ns", ns}}; }

void InferStats::Success(uint64_t version, uint64_t rows, const InferTimes& t,
                         double unix_seconds) {
  MutexLock l(&mu_);
  Version& v = versions_[version];
  v.last_ms = static_cast<uint64_t>(unix_seconds * 1000);
  v.inferences += rows;
  ++v.executions;
  v.success.Add(t.Total());
  v.queue.Add(t.queue);
  v.steps.input.Add(t.input);
  v.steps.infer.Add(t.infer);
  v.steps.output.Add(t.output);
  uint64_t size = rows;
  if (v.batches.size() >= kMaxBatchSizes && !v.batches.contains(size)) {
    size = std::bit_floor(std::max<uint64_t>(rows, 1));
  }
  Steps& b = v.batches[size];
  b.input.Add(t.input);
  b.infer.Add(t.infer);
  b.output.Add(t.output);
}

void InferStats::Failure(uint64_t version, double seconds) {
  MutexLock l(&mu_);
  versions_[version].fail.Add(seconds);
}

nlohmann::json InferStats::ToJson(const std::string& model, const std::string& version) const {
  nlohmann::json out = nlohmann::json::array();
  MutexLock l(&mu_);
  for (const auto& [number, v] : versions_) {
    if (!version.empty() && version != std::to_string(number)) continue;
    nlohmann::json batches = nlohmann::json::array();
    for (const auto& [size, s] : v.batches) {
      batches.push_back({{"batch_size", size},
                         {"compute_input", s.input.ToJson()},
                         {"compute_infer", s.infer.ToJson()},
                         {"compute_output", s.output.ToJson()}});
    }
    const Duration none;
    out.push_back({{"name", model},
                   {"version", std::to_string(number)},
                   {"last_inference", v.last_ms},
                   {"inference_count", v.inferences},
                   {"execution_count", v.executions},
                   {"inference_stats",
                    {{"success", v.success.ToJson()},
                     {"fail", v.fail.ToJson()},
                     {"queue", v.queue.ToJson()},
                     {"compute_input", v.steps.input.ToJson()},
                     {"compute_infer", v.steps.infer.ToJson()},
                     {"compute_output", v.steps.output.ToJson()},
                     {"cache_hit", none.ToJson()},
                     {"cache_miss", none.ToJson()}}},
                   {"batch_stats", batches}});
  }
  return {{"model_stats", out}};
}

}  // namespace ctrbox
