#include "metrics/auc.h"

#include <algorithm>
#include <cassert>
#include <numeric>

namespace ctrbox {

double ExactAuc(const std::vector<float>& labels, const std::vector<double>& scores) {
  assert(labels.size() == scores.size());
  const size_t n = labels.size();
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return scores[a] < scores[b]; });
  // Sum of the (tie-averaged) ranks of the positives: Mann-Whitney U.
  double rank_sum = 0, npos = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    double avg_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        rank_sum += avg_rank;
        npos += 1;
      }
    }
    i = j;
  }
  double nneg = static_cast<double>(n) - npos;
  if (npos == 0 || nneg == 0) return 0.5;
  return (rank_sum - npos * (npos + 1) / 2.0) / (npos * nneg);
}

BucketAuc::BucketAuc(size_t num_buckets) : pos_(num_buckets, 0), neg_(num_buckets, 0) {}

void BucketAuc::Add(float label, double prediction) {
  const size_t n = pos_.size();
  double x = prediction * static_cast<double>(n);
  size_t b = x <= 0 ? 0 : (x >= static_cast<double>(n) ? n - 1 : static_cast<size_t>(x));
  if (label > 0.5f)
    ++pos_[b];
  else
    ++neg_[b];
}

void BucketAuc::Merge(const BucketAuc& other) {
  assert(other.pos_.size() == pos_.size());
  for (size_t i = 0; i < pos_.size(); ++i) {
    pos_[i] += other.pos_[i];
    neg_[i] += other.neg_[i];
  }
}

double BucketAuc::Auc() const {
  // Walk from the lowest bucket up: each positive beats every negative below its bucket and
  // ties with the negatives in it.
  double area = 0, neg_below = 0, total_pos = 0;
  for (size_t i = 0; i < pos_.size(); ++i) {
    double p = static_cast<double>(pos_[i]), q = static_cast<double>(neg_[i]);
    area += p * (neg_below + 0.5 * q);
    neg_below += q;
    total_pos += p;
  }
  if (total_pos == 0 || neg_below == 0) return 0.5;
  return area / (total_pos * neg_below);
}

void BucketAuc::Reset() {
  std::fill(pos_.begin(), pos_.end(), 0);
  std::fill(neg_.begin(), neg_.end(), 0);
}

}  // namespace ctrbox
