// AUC: exact (sort-based) and streaming (bucketed) estimators.
#ifndef CTRBOX_METRICS_AUC_H_
#define CTRBOX_METRICS_AUC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ctrbox {

// The exact area under the ROC curve: the probability that a random positive scores above a
// random negative, ties counting one half. Returns 0.5 when either class is absent.
// O(n log n).
double ExactAuc(const std::vector<float>& labels, const std::vector<double>& scores);

// Streaming AUC over predictions in [0, 1]: positives and negatives are counted in
// `num_buckets` equal-width buckets, so memory is fixed however long the stream. Pairs that
// fall in one bucket count as ties; with 2^20 buckets the error against ExactAuc is far
// below 1e-4 on CTR data (tested).
// Until it has seen num_buckets / 16 examples it keeps their bucket ids instead of the
// counts (a pass's accumulator then costs memory and time in its examples, not in its
// buckets); Auc() is bitwise the same either way.
// Thread safety: not thread-safe; merge per-thread instances with Merge().
class BucketAuc {
 public:
  explicit BucketAuc(size_t num_buckets = size_t{1} << 20);

  void Add(float label, double prediction);
  // REQUIRES: other has the same number of buckets.
  void Merge(const BucketAuc& other);
  double Auc() const;
  void Reset();
  // Appends the counts to *out, for another process to merge (MergeEncoded). The encoding is
  // of this build only: not for files.
  void Encode(std::string* out) const;
  // Merges counts that Encode wrote (all of `in`). Returns false, merging nothing, if `in` is
  // not exactly an encoding of an estimator of this many buckets.
  bool MergeEncoded(std::string_view in);

 private:
  // Moves the kept bucket ids into the counts.
  void Densify();

  size_t num_buckets_;
  std::vector<uint32_t> ids_;        // bucket * 2 + (positive), while the counts are empty
  std::vector<uint64_t> pos_, neg_;  // per bucket, once dense
};

}  // namespace ctrbox

#endif  // CTRBOX_METRICS_AUC_H_
