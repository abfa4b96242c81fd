#include "io/row_gather.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace ctrbox {
namespace {

// Rows a copy task takes at most: tasks of about equal size whatever the ranges.
constexpr size_t kTaskRows = 8192;

// A column grown to at least n elements (only what it never held is initialised).
template <class T>
void AtLeast(std::vector<T>* v, size_t n) {
  if (v->size() < n) v->resize(n);
}

}  // namespace

size_t RowRange::num_keys() const {
  return block->offsets[end * block->schema.num_slots] - key_begin();
}

uint64_t RowRange::ContentBytes() const {
  const Schema& s = block->schema;
  const uint64_t k = num_keys();
  return (rows() * (1 + s.num_dense) + (block->has_weights() ? k : 0)) * sizeof(float) +
         (rows() * s.num_slots + 1) * sizeof(uint32_t) + k * sizeof(uint64_t);
}

void RowGather::Begin(Schema s, Batch* out) {
  out_ = out;
  out->schema = s;
  AtLeast(&out->offsets, 1);
  out->offsets[0] = 0;
  rows_ = keys_ = 0;
  weights_ = false;
  pending_.clear();
  pending_rows_ = pending_keys_ = pending_blocks_ = 0;
}

void RowGather::Add(RowRange r, ThreadPool* pool) {
  assert(out_ != nullptr && r.block->schema == out_->schema);
  if (r.rows() == 0) return;
  if (pending_.empty() || pending_.back().block != r.block) ++pending_blocks_;
  pending_rows_ += r.rows();
  pending_keys_ += r.num_keys();
  pending_.push_back(std::move(r));
  if (pending_blocks_ > kFlushBlocks) Flush(pool);
}

void RowGather::Flush(ThreadPool* pool) {
  if (pending_.empty()) return;
  Batch& out = *out_;
  const size_t S = out.schema.num_slots, D = out.schema.num_dense;
  // Where each range goes, and the tasks: pieces of ranges of at most kTaskRows rows.
  struct Task {
    const RowRange* range;
    size_t begin, end;      // rows of the range's block
    size_t to_row, to_key;  // where they go in *out_
  };
  std::vector<Task> tasks;
  size_t rows = rows_, keys = keys_;
  bool weights = weights_;
  for (const RowRange& r : pending_) {
    const size_t k0 = r.key_begin();
    for (size_t b = r.begin; b < r.end; b += kTaskRows) {
      const size_t e = std::min(r.end, b + kTaskRows);
      tasks.push_back({&r, b, e, rows + (b - r.begin), keys + (r.block->offsets[b * S] - k0)});
    }
    rows += r.rows();
    keys += r.num_keys();
    weights |= r.block->has_weights();
  }
  AtLeast(&out.labels, rows);
  AtLeast(&out.dense, rows * D);
  AtLeast(&out.offsets, rows * S + 1);
  AtLeast(&out.keys, keys);
  if (weights) {
    if (!weights_) {  // the keys before the first weighted range weigh 1
      AtLeast(&out.weights, keys_);
      std::fill(out.weights.begin(), out.weights.begin() + keys_, 1.0f);
    }
    AtLeast(&out.weights, keys);
  }
  RunParallel(pool, tasks.size(), [&](size_t t, int) {
    const Task& task = tasks[t];
    const Batch& in = *task.range->block;
    const size_t n = task.end - task.begin;
    const uint32_t k0 = in.offsets[task.begin * S], k1 = in.offsets[task.end * S];
    std::memcpy(out.labels.data() + task.to_row, in.labels.data() + task.begin, n * sizeof(float));
    std::memcpy(out.dense.data() + task.to_row * D, in.dense.data() + task.begin * D,
                n * D * sizeof(float));
    std::memcpy(out.keys.data() + task.to_key, in.keys.data() + k0, (k1 - k0) * sizeof(uint64_t));
    if (weights) {
      float* w = out.weights.data() + task.to_key;
      if (in.has_weights()) {
        std::memcpy(w, in.weights.data() + k0, (k1 - k0) * sizeof(float));
      } else {
        std::fill(w, w + (k1 - k0), 1.0f);
      }
    }
    const uint32_t shift = static_cast<uint32_t>(task.to_key) - k0;
    const uint32_t* from = in.offsets.data() + task.begin * S + 1;
    uint32_t* to = out.offsets.data() + task.to_row * S + 1;
    for (size_t i = 0; i < n * S; ++i) to[i] = from[i] + shift;
  });
  rows_ = rows;
  keys_ = keys;
  weights_ = weights;
  pending_.clear();
  pending_rows_ = pending_keys_ = pending_blocks_ = 0;
}

void RowGather::Finish(ThreadPool* pool) {
  Flush(pool);
  Batch& out = *out_;
  const size_t S = out.schema.num_slots, D = out.schema.num_dense;
  out.labels.resize(rows_);
  out.dense.resize(rows_ * D);
  out.offsets.resize(rows_ * S + 1);
  out.keys.resize(keys_);
  out.weights.resize(weights_ ? keys_ : 0);
  out_ = nullptr;
}

}  // namespace ctrbox
