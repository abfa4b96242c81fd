#include "io/batch.h"

#include <algorithm>
#include <cassert>

namespace ctrbox {

void Batch::Reset(Schema s) {
  schema = s;
  labels.clear();
  dense.clear();
  offsets.assign(1, 0);
  keys.clear();
  weights.clear();
}

void Batch::AppendRows(const Batch& other, size_t begin, size_t end) {
  assert(other.schema == schema);
  assert(begin <= end && end <= other.rows());
  if (begin == end) return;
  const size_t S = schema.num_slots, D = schema.num_dense;
  const size_t old_keys = keys.size();
  labels.insert(labels.end(), other.labels.begin() + begin, other.labels.begin() + end);
  dense.insert(dense.end(), other.dense.begin() + begin * D, other.dense.begin() + end * D);
  const uint32_t k0 = other.offsets[begin * S], k1 = other.offsets[end * S];
  keys.insert(keys.end(), other.keys.begin() + k0, other.keys.begin() + k1);
  if (other.has_weights() || has_weights()) {
    if (!has_weights()) weights.assign(old_keys, 1.0f);
    if (other.has_weights()) {
      weights.insert(weights.end(), other.weights.begin() + k0, other.weights.begin() + k1);
    } else {
      weights.resize(weights.size() + (k1 - k0), 1.0f);
    }
  }
  const uint32_t shift = static_cast<uint32_t>(old_keys) - k0;
  const size_t at = offsets.size();
  offsets.resize(at + (end - begin) * S);
  const uint32_t* from = other.offsets.data() + begin * S + 1;
  uint32_t* to = offsets.data() + at;
  for (size_t i = 0; i < (end - begin) * S; ++i) to[i] = from[i] + shift;
}

size_t Batch::MemoryBytes() const {
  return labels.capacity() * sizeof(float) + dense.capacity() * sizeof(float) +
         offsets.capacity() * sizeof(uint32_t) + keys.capacity() * sizeof(uint64_t) +
         weights.capacity() * sizeof(float);
}

size_t Batch::ContentBytes() const {
  return (labels.size() + dense.size() + weights.size()) * sizeof(float) +
         offsets.size() * sizeof(uint32_t) + keys.size() * sizeof(uint64_t);
}

void Batch::ShrinkToFit() {
  labels.shrink_to_fit();
  dense.shrink_to_fit();
  offsets.shrink_to_fit();
  keys.shrink_to_fit();
  weights.shrink_to_fit();
}

void BatchBuilder::BeginRow(float label) {
  in_row_ = true;
  sorted_ = true;
  label_ = label;
  row_dense_.assign(out_->schema.num_dense, 0.0f);
  row_keys_.clear();
}

void BatchBuilder::AddKey(uint32_t slot, uint64_t key, float weight) {
  assert(slot < out_->schema.num_slots);
  if (!row_keys_.empty() && slot < row_keys_.back().slot) sorted_ = false;
  row_keys_.push_back(Entry{slot, weight, key});
}

void BatchBuilder::EndRow() {
  assert(in_row_);
  in_row_ = false;
  Batch& b = *out_;
  if (!sorted_) {
    std::stable_sort(row_keys_.begin(), row_keys_.end(),
                     [](const Entry& x, const Entry& y) { return x.slot < y.slot; });
  }
  b.labels.push_back(label_);
  b.dense.insert(b.dense.end(), row_dense_.begin(), row_dense_.end());
  bool weighted = b.has_weights();
  for (const Entry& e : row_keys_) {
    if (e.weight != 1.0f && !weighted) {
      b.weights.assign(b.keys.size(), 1.0f);
      weighted = true;
    }
  }
  size_t i = 0;
  uint32_t base = static_cast<uint32_t>(b.keys.size());
  for (uint32_t s = 0; s < b.schema.num_slots; ++s) {
    while (i < row_keys_.size() && row_keys_[i].slot == s) {
      b.keys.push_back(row_keys_[i].key);
      if (weighted) b.weights.push_back(row_keys_[i].weight);
      ++i;
      ++base;
    }
    b.offsets.push_back(base);
  }
}

}  // namespace ctrbox
