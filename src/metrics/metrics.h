// Binary-classification metrics of a stream of (label, prediction): AUC, logloss, COPC.
#ifndef CTRBOX_METRICS_METRICS_H_
#define CTRBOX_METRICS_METRICS_H_

#include <cmath>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "metrics/auc.h"
#include "util/env.h"

namespace ctrbox {

struct MetricSummary {
  uint64_t examples = 0;
  double auc = 0.5;  // meaningful only when auc_undefined is null
  // Why the AUC is undefined — "no examples", "every label is 0", "every label is 1" (the AUC
  // needs both classes) — or null. Reports show such an AUC as null with this reason.
  const char* auc_undefined = nullptr;
  double logloss = 0;  // mean binary cross-entropy, predictions clipped to [1e-7, 1 - 1e-7]
  double copc = 0;     // clicks / sum of predictions (1 = calibrated)
  double ctr = 0;      // clicks / examples
  double mean_prediction = 0;
  nlohmann::json ToJson() const;
  // The AUC as reports show it: a number, or null when undefined.
  nlohmann::json AucJson() const { return auc_undefined ? nlohmann::json() : nlohmann::json(auc); }
  // "0.7123", or "undefined (every label is 1)": for logs.
  std::string AucText() const;
};

// A sum of doubles that does not depend on the order of its terms or how they were split up
// (accumulators merged in any order): each term in fixed point (a multiple of 2^-64, rounded
// toward zero, |term| < 2^62) added exactly in 128 bits, rounded once when read. A term that
// is not finite or too large makes the sum NaN. Thread safety: not thread-safe.
class ExactSum {
 public:
  void Add(double x) {
    if (!(std::fabs(x) < 0x1p62)) {
      nan_ = true;
      return;
    }
    v_ += static_cast<__int128>(x * 0x1p64);  // (exact: a power of two, no overflow)
  }
  void Merge(const ExactSum& o) {
    v_ += o.v_;
    nan_ = nan_ || o.nan_;
  }
  double value() const;
  void Encode(std::string* out) const;
  // Reads what Encode wrote at the front of *bytes (and drops it); false if malformed.
  bool Decode(std::string_view* bytes);

 private:
  __int128 v_ = 0;
  bool nan_ = false;
};

// Accumulates one stream; the sums are ExactSums, so that the same (label, prediction) pairs
// give the same metrics however they were split (ranks, threads) and merged. Thread safety:
// not thread-safe; merge per-thread instances.
class MetricAccumulator {
 public:
  explicit MetricAccumulator(size_t auc_buckets = size_t{1} << 20) : auc_(auc_buckets) {}

  void Add(float label, double prediction);
  void Merge(const MetricAccumulator& other);
  // Another process's accumulator: Encode there, MergeEncoded here (same build). Returns
  // false, merging nothing, if `bytes` is not such an encoding.
  std::string Encode() const;
  bool MergeEncoded(std::string_view bytes);
  MetricSummary Summary() const;
  void Reset();

 private:
  BucketAuc auc_;
  uint64_t examples_ = 0;
  ExactSum clicks_, sum_pred_, sum_loss_;
};

// A JSON-lines log of metrics (one object per line, flushed per line).
// Thread safety: not thread-safe.
class MetricsLog {
 public:
  // Appends to `path`; an empty path makes a log that writes nothing. The file (and its
  // directory) is created at the first Write, so a job that fails before it logs anything
  // leaves no empty log behind.
  static StatusOr<std::unique_ptr<MetricsLog>> Open(Env* env, const std::string& path);
  Status Write(const nlohmann::json& record);
  Status Close();

 private:
  MetricsLog(Env* env, std::string path) : env_(env), path_(std::move(path)) {}
  Env* env_;
  std::string path_;
  std::unique_ptr<WritableFile> file_;
};

}  // namespace ctrbox

#endif  // CTRBOX_METRICS_METRICS_H_
