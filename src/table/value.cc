#include "table/value.h"

#include <cstring>

#include "util/bf16.h"
#include "util/coding.h"

namespace ctrbox {

void StoreState(const ValueLayout& l, const float* state, uint32_t n, char* out) {
  if (l.state_bits == 16) {
    PackBf16(state, n, out);
  } else {
    CopyBytes(out, state, 4 * size_t{n});
  }
}

void LoadState(const ValueLayout& l, const char* in, uint32_t n, float* state) {
  if (l.state_bits == 16) {
    UnpackBf16(in, n, state);
  } else {
    CopyBytes(state, in, 4 * size_t{n});
  }
}

void RowBlock::Resize(size_t n) {
  keys_.resize(n);
  show_.resize(n);
  click_.resize(n);
  unseen_.resize(n);
  flags_.resize(n);
  wide_.resize(n);
  wide_state_.resize(n * layout_.wide_state);
  emb_.resize(n * layout_.dim);
  emb_state_.resize(n * layout_.emb_state);
}

void RowBlock::ClearRow(size_t i, uint64_t key) {
  keys_[i] = key;
  show_[i] = click_[i] = wide_[i] = 0.0f;
  unseen_[i] = 0;
  flags_[i] = 0;
  ZeroBytes(wide_state(i), layout_.wide_state * sizeof(float));
  ZeroBytes(emb(i), layout_.dim * sizeof(float));
  ZeroBytes(emb_state(i), layout_.emb_state * sizeof(float));
}

void RowBlock::CopyRow(const RowBlock& src, size_t j, size_t i) {
  keys_[i] = src.keys_[j];
  show_[i] = src.show_[j];
  click_[i] = src.click_[j];
  unseen_[i] = src.unseen_[j];
  flags_[i] = src.flags_[j];
  wide_[i] = src.wide_[j];
  CopyBytes(wide_state(i), src.wide_state(j), 4 * layout_.wide_state);
  CopyBytes(emb(i), src.emb(j), 4 * layout_.dim);
  CopyBytes(emb_state(i), src.emb_state(j), 4 * layout_.emb_state);
}

void RowBlock::AppendRow(const RowBlock& src, size_t j) {
  const size_t i = size();
  Resize(i + 1);
  CopyRow(src, j, i);
}

namespace {
template <typename T>
void Append(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
}  // namespace

void RowBlock::EncodeHead(size_t i, std::string* out) const {
  Append(out, keys_[i]);
  Append(out, show_[i]);
  Append(out, click_[i]);
  Append(out, unseen_[i]);
  Append(out, flags_[i]);
  Append(out, wide_[i]);
}

void RowBlock::EncodeEmb(size_t i, uint32_t dim, std::string* out) const {
  if (quant_.enabled()) {  // the values are on the grid: the codes hold them exactly
    const size_t at = out->size();
    out->resize(at + quant_.StoredBytes(dim));
    quant_.Encode(emb(i), dim, out->data() + at);
  } else {
    out->append(reinterpret_cast<const char*>(emb(i)), 4 * dim);
  }
}

void RowBlock::DecodeEmb(const char* p, uint32_t dim, size_t i) {
  if (quant_.enabled()) {
    quant_.Decode(p, dim, emb(i));
  } else {
    CopyBytes(emb(i), p, quant_.StoredBytes(dim));
  }
}

void RowBlock::EncodeRow(size_t i, std::string* out) const {
  EncodeHead(i, out);
  out->append(reinterpret_cast<const char*>(wide_state(i)), 4 * layout_.wide_state);
  if (has_emb(i)) {
    // A row of a multi-table layout at its own table's size.
    const uint32_t dim = layout_.DimOf(keys_[i]), states = layout_.StateOf(keys_[i]);
    EncodeEmb(i, dim, out);
    const size_t at = out->size();
    out->resize(at + size_t{states} * (layout_.state_bits == 16 ? 2 : 4));
    StoreState(layout_, emb_state(i), states, out->data() + at);
  }
}

size_t RowBlock::DecodeRow(const char* p, size_t n, size_t i) {
  const size_t fixed = layout_.EncodedBytes(false);
  if (n < fixed) return 0;
  std::memcpy(&keys_[i], p, 8);
  std::memcpy(&show_[i], p + 8, 4);
  std::memcpy(&click_[i], p + 12, 4);
  std::memcpy(&unseen_[i], p + 16, 2);
  std::memcpy(&flags_[i], p + 18, 2);
  std::memcpy(&wide_[i], p + 20, 4);
  CopyBytes(wide_state(i), p + 24, 4 * layout_.wide_state);
  if (flags_[i] & ~kFlagHasEmb) return 0;     // unknown flags: not a row of this version
  if (!layout_.ValidKey(keys_[i])) return 0;  // a key of no table of this layout
  if (!has_emb(i) || layout_.multi()) {       // a smaller table's row leaves the rest zero
    ZeroBytes(emb(i), 4 * layout_.dim);
    ZeroBytes(emb_state(i), 4 * layout_.emb_state);
  }
  if (!has_emb(i)) return fixed;
  const size_t full = layout_.EncodedBytesOf(keys_[i], true);
  if (n < full) return 0;
  const uint32_t dim = layout_.DimOf(keys_[i]), states = layout_.StateOf(keys_[i]);
  const size_t emb_bytes = quant_.StoredBytes(dim);
  DecodeEmb(p + fixed, dim, i);
  LoadState(layout_, p + fixed + emb_bytes, states, emb_state(i));
  return full;
}

void RowBlock::EncodeValues(size_t i, std::string* out) const {
  EncodeHead(i, out);
  if (has_emb(i)) EncodeEmb(i, layout_.DimOf(keys_[i]), out);
}

size_t RowBlock::DecodeValues(const char* p, size_t n, size_t i) {
  constexpr size_t kFixed = 8 + 4 + 4 + 2 + 2 + 4;
  if (n < kFixed) return 0;
  uint64_t key;
  uint16_t flags;
  std::memcpy(&key, p, 8);
  std::memcpy(&flags, p + 18, 2);
  if (flags & ~kFlagHasEmb) return 0;
  if (!layout_.ValidKey(key)) return 0;
  const uint32_t dim = layout_.DimOf(key);
  const size_t emb_bytes = (flags & kFlagHasEmb) ? quant_.StoredBytes(dim) : 0;
  if (n < kFixed + emb_bytes) return 0;
  keys_[i] = key;
  flags_[i] = flags;
  std::memcpy(&show_[i], p + 8, 4);
  std::memcpy(&click_[i], p + 12, 4);
  std::memcpy(&unseen_[i], p + 16, 2);
  std::memcpy(&wide_[i], p + 20, 4);
  if (!has_emb(i) || layout_.multi()) ZeroBytes(emb(i), 4 * layout_.dim);
  if (has_emb(i)) DecodeEmb(p + kFixed, dim, i);
  return kFixed + emb_bytes;
}

size_t RowBlock::MemoryBytes() const {
  return keys_.capacity() * 8 +
         (show_.capacity() + click_.capacity() + wide_.capacity() + wide_state_.capacity() +
          emb_.capacity() + emb_state_.capacity()) *
             4 +
         (unseen_.capacity() + flags_.capacity()) * 2;
}

}  // namespace ctrbox
