#include "serve/served_rows.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>

#include "util/hash.h"

namespace ctrbox {

ServedRows::ServedRows(const ValueLayout& layout, bool wide)
    : layout_(layout), quant_(layout.quantizer()), wide_(wide) {
  emb_bytes_ = static_cast<uint32_t>(quant_.StoredBytes(layout_.dim));
  stride_ = emb_bytes_ + (wide_ ? sizeof(float) : 0);
}

ServedRows::Builder::Builder(const ValueLayout& layout, bool wide)
    : out_(new ServedRows(layout, wide)) {}

void ServedRows::Builder::Add(const RowBlock& rows, size_t i) {
  keys_.push_back(rows.key(i));
  has_emb_.push_back(rows.has_emb(i));
  rows_.resize(rows_.size() + out_->stride_);
  out_->EncodeRow(rows, i, rows_.data() + rows_.size() - out_->stride_);
}

void ServedRows::Builder::Add(const RowBlock& rows) {
  for (size_t i = 0; i < rows.size(); ++i) Add(rows, i);
}

std::shared_ptr<const ServedRows> ServedRows::Builder::Finish() {
  ServedRows& r = *out_;
  const size_t n = keys_.size();
  // About four keys a bucket: a power of two of buckets, the hash's top bits choose.
  const size_t buckets = std::bit_ceil(std::max<size_t>(n / 4, 1));
  r.bucket_shift_ = 64 - std::countr_zero(buckets);
  // Counting sort of the keys by bucket (stable: the order within a bucket is the input's).
  std::vector<uint32_t> count(buckets + 1, 0);
  for (uint64_t k : keys_) ++count[r.Bucket(k) + 1];
  std::partial_sum(count.begin(), count.end(), count.begin());
  r.offsets_ = count;
  r.keys_.resize(n);
  r.rows_.resize(n * r.stride_);
  r.has_emb_.assign((n + 63) / 64, 0);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t at = count[r.Bucket(keys_[i])]++;
    r.keys_[at] = keys_[i];
    std::memcpy(r.rows_.data() + size_t{at} * r.stride_, rows_.data() + i * r.stride_, r.stride_);
    if (has_emb_[i]) r.has_emb_[at / 64] |= uint64_t{1} << (at % 64);
  }
  keys_ = {};
  rows_ = {};
  has_emb_ = {};
  return std::shared_ptr<const ServedRows>(out_.release());
}

size_t ServedRows::Bucket(uint64_t key) const {
  return bucket_shift_ >= 64 ? 0 : static_cast<size_t>(Mix64(key) >> bucket_shift_);
}

uint32_t ServedRows::Find(uint64_t key) const {
  if (keys_.empty()) return kNone;
  const size_t b = Bucket(key);
  for (uint32_t at = offsets_[b], end = offsets_[b + 1]; at < end; ++at) {
    if (keys_[at] == key) return at;
  }
  return kNone;
}

void ServedRows::EncodeRow(const RowBlock& rows, size_t i, char* out) const {
  if (quant_.enabled()) {
    quant_.Encode(rows.emb(i), layout_.dim, out);
  } else {
    std::memcpy(out, rows.emb(i), emb_bytes_);
  }
  if (wide_) {
    const float w = rows.wide(i);
    std::memcpy(out + emb_bytes_, &w, sizeof(w));
  }
}

void ServedRows::DecodeRow(uint32_t at, RowBlock* out, size_t i) const {
  out->ClearRow(i, keys_[at]);
  const char* p = rows_.data() + size_t{at} * stride_;
  if (has_emb_[at / 64] >> (at % 64) & 1) {
    out->flags(i) |= kFlagHasEmb;
    if (quant_.enabled()) {
      quant_.Decode(p, layout_.dim, out->emb(i));
    } else {
      std::memcpy(out->emb(i), p, emb_bytes_);
    }
  }
  if (wide_) std::memcpy(&out->wide(i), p + emb_bytes_, sizeof(float));
}

bool ServedRows::Lookup(uint64_t key, RowBlock* out, size_t i) const {
  const uint32_t at = Find(key);
  if (at == kNone) return false;
  DecodeRow(at, out, i);
  return true;
}

Status ServedRows::ForEach(const std::function<Status(const RowBlock&)>& fn) const {
  constexpr size_t kBlock = 65536;
  RowBlock rows(layout_);
  for (size_t b = 0; b < keys_.size(); b += kBlock) {
    const size_t e = std::min(keys_.size(), b + kBlock);
    rows.Resize(e - b);
    for (size_t at = b; at < e; ++at) DecodeRow(static_cast<uint32_t>(at), &rows, at - b);
    RETURN_IF_ERROR(fn(rows));
  }
  return Status::OK();
}

size_t ServedRows::MemoryBytes() const {
  return keys_.capacity() * sizeof(uint64_t) + rows_.capacity() +
         has_emb_.capacity() * sizeof(uint64_t) + offsets_.capacity() * sizeof(uint32_t);
}

}  // namespace ctrbox
