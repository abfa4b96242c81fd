#include "metrics/auc.h"

#include <algorithm>
#include <cassert>
#include <cstring>
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

BucketAuc::BucketAuc(size_t num_buckets) : num_buckets_(num_buckets) {
  assert(num_buckets >= 1 && num_buckets <= (size_t{1} << 31));
}

void BucketAuc::Add(float label, double prediction) {
  const size_t n = num_buckets_;
  double x = prediction * static_cast<double>(n);
  size_t b = x <= 0 ? 0 : (x >= static_cast<double>(n) ? n - 1 : static_cast<size_t>(x));
  const bool positive = label > 0.5f;
  if (pos_.empty()) {
    ids_.push_back(static_cast<uint32_t>(b * 2 + (positive ? 1 : 0)));
    if (ids_.size() > num_buckets_ / 16) Densify();
    return;
  }
  if (positive)
    ++pos_[b];
  else
    ++neg_[b];
}

void BucketAuc::Densify() {
  if (!pos_.empty()) return;
  pos_.assign(num_buckets_, 0);
  neg_.assign(num_buckets_, 0);
  for (uint32_t id : ids_) ++(id & 1 ? pos_ : neg_)[id >> 1];
  ids_.clear();
  ids_.shrink_to_fit();
}

namespace {
template <typename T>
void Put(std::string* out, const T* v, size_t n) {
  if (n == 0) return;
  out->append(reinterpret_cast<const char*>(v), n * sizeof(T));
}
template <typename T>
bool Take(std::string_view* in, T* v, size_t n) {
  if (n == 0) return true;
  if (in->size() < n * sizeof(T)) return false;
  std::memcpy(v, in->data(), n * sizeof(T));
  in->remove_prefix(n * sizeof(T));
  return true;
}
}  // namespace

void BucketAuc::Encode(std::string* out) const {
  const uint64_t head[3] = {num_buckets_, pos_.empty() ? 0u : 1u, ids_.size()};
  Put(out, head, 3);
  if (pos_.empty()) {
    Put(out, ids_.data(), ids_.size());
  } else {
    Put(out, pos_.data(), num_buckets_);
    Put(out, neg_.data(), num_buckets_);
  }
}

bool BucketAuc::MergeEncoded(std::string_view in) {
  uint64_t head[3];
  std::string_view at = in;
  if (!Take(&at, head, 3) || head[0] != num_buckets_ || head[1] > 1) return false;
  BucketAuc other(num_buckets_);
  if (head[1] == 0) {
    if (head[2] > at.size() / sizeof(uint32_t)) return false;
    other.ids_.resize(head[2]);
    if (!Take(&at, other.ids_.data(), head[2])) return false;
    for (uint32_t id : other.ids_) {
      if ((id >> 1) >= num_buckets_) return false;
    }
  } else {
    other.pos_.resize(num_buckets_);
    other.neg_.resize(num_buckets_);
    if (!Take(&at, other.pos_.data(), num_buckets_) || !Take(&at, other.neg_.data(), num_buckets_))
      return false;
  }
  if (!at.empty()) return false;
  Merge(other);
  return true;
}

void BucketAuc::Merge(const BucketAuc& other) {
  assert(other.num_buckets_ == num_buckets_);
  if (pos_.empty() && other.pos_.empty()) {
    ids_.insert(ids_.end(), other.ids_.begin(), other.ids_.end());
    if (ids_.size() > num_buckets_ / 16) Densify();
    return;
  }
  Densify();
  if (other.pos_.empty()) {
    for (uint32_t id : other.ids_) ++(id & 1 ? pos_ : neg_)[id >> 1];
    return;
  }
  for (size_t i = 0; i < num_buckets_; ++i) {
    pos_[i] += other.pos_[i];
    neg_[i] += other.neg_[i];
  }
}

double BucketAuc::Auc() const {
  // Walk from the lowest bucket up: each positive beats every negative below its bucket and
  // ties with the negatives in it. An empty bucket adds exact zeros, so walking only the
  // buckets that were hit (the kept ids, sorted) gives the same bits.
  double area = 0, neg_below = 0, total_pos = 0;
  auto step = [&](double p, double q) {
    area += p * (neg_below + 0.5 * q);
    neg_below += q;
    total_pos += p;
  };
  if (!pos_.empty()) {
    for (size_t i = 0; i < num_buckets_; ++i) {
      step(static_cast<double>(pos_[i]), static_cast<double>(neg_[i]));
    }
  } else {
    std::vector<uint32_t> ids = ids_;
    std::sort(ids.begin(), ids.end());
    for (size_t i = 0; i < ids.size();) {
      const uint32_t bucket = ids[i] >> 1;
      uint64_t p = 0, q = 0;
      for (; i < ids.size() && ids[i] >> 1 == bucket; ++i) ++(ids[i] & 1 ? p : q);
      step(static_cast<double>(p), static_cast<double>(q));
    }
  }
  if (total_pos == 0 || neg_below == 0) return 0.5;
  return area / (total_pos * neg_below);
}

void BucketAuc::Reset() {
  ids_.clear();
  std::fill(pos_.begin(), pos_.end(), 0);
  std::fill(neg_.begin(), neg_.end(), 0);
}

}  // namespace ctrbox
