// The value stored per key (docs/sparse_table.md) and RowBlock, the structure-of-arrays
// form in which rows move between the table and the trainer.
#ifndef CTRBOX_TABLE_VALUE_H_
#define CTRBOX_TABLE_VALUE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "table/quant.h"
#include "util/hash.h"
#include "util/hd.h"

namespace ctrbox {

// Embedding tables of several dimensions in one sparse table (model.slot_dims): the rows of
// table t are the keys whose top kTableKeyBits bits are t (util/hash.h: TableKey).
constexpr uint32_t kMaxTables = 1u << kTableKeyBits;

struct ValueLayout {
  uint32_t dim = 16;         // embedding dimension
  uint32_t emb_state = 16;   // optimizer-state floats per embedding
  uint32_t wide_state = 1;   // optimizer-state floats of the wide weight
  uint32_t quant_bits = 0;   // stored embedding codes (table/quant.h); 0: float32
  float quant_range = 1.0f;  // w of the quantization range [-w, w] (when quant_bits > 0)
  uint32_t state_bits = 0;   // stored bits of an embedding's state element: 0 (float32) or 16
                             // (bfloat16; optimizer.sparse.state_bits)
  // Tables of several dimensions (tables > 1): table t's rows hold table_dim[t] embedding
  // values and table_state[t] state floats, and dim / emb_state are the largest of them: the
  // width of a row in a RowBlock, whose row of table t uses the first table_dim[t] values
  // (the rest stay zero) and the first table_state[t] state floats. Stored encodings (the
  // cache, the SSD tier, model files) hold each row at its own table's size. tables 1: every
  // key is its own, every row dim wide (the arrays are unused).
  uint32_t tables = 1;
  uint32_t table_dim[kMaxTables] = {};
  uint32_t table_state[kMaxTables] = {};

  bool multi() const { return tables > 1; }
  CTRBOX_HD uint32_t TableOf(uint64_t key) const {
    return tables > 1 ? static_cast<uint32_t>(key >> kTableShift) : 0;
  }
  // The embedding values and state floats of key's rows.
  CTRBOX_HD uint32_t DimOf(uint64_t key) const {
    return tables > 1 ? table_dim[key >> kTableShift] : dim;
  }
  CTRBOX_HD uint32_t StateOf(uint64_t key) const {
    return tables > 1 ? table_state[key >> kTableShift] : emb_state;
  }
  // Whether key names a table of this layout (a key of a multi-table layout may not).
  bool ValidKey(uint64_t key) const { return tables <= 1 || (key >> kTableShift) < tables; }
  // The fields a file header records (dim, state, codes), without the tables.
  ValueLayout RowFormat() const {
    ValueLayout l = *this;
    l.tables = 1;
    for (uint32_t i = 0; i < kMaxTables; ++i) l.table_dim[i] = l.table_state[i] = 0;
    return l;
  }
  // Table t's own layout: a one-table layout of its dimension and state.
  ValueLayout Table(uint32_t t) const {
    if (tables <= 1) return *this;
    ValueLayout l = RowFormat();
    l.dim = table_dim[t];
    l.emb_state = table_state[t];
    return l;
  }

  Quantizer quantizer() const { return Quantizer(quant_bits, quant_range); }
  // Bytes of the stored embedding (codes or floats).
  size_t EmbBytes() const { return size_t{dim} * StoredElementBytes(quant_bits); }
  // Bytes of the stored embedding state.
  size_t StateBytes() const { return size_t{emb_state} * (state_bits == 16 ? 2 : 4); }
  // Bytes of the canonical encoding of one row, key included: the largest (tables > 1).
  size_t EncodedBytes(bool has_emb) const {
    return 8 + 4 * 4 + 4 * wide_state + (has_emb ? EmbBytes() + StateBytes() : 0);
  }
  // ... of a row of table t, and of key's row.
  size_t TableEncodedBytes(uint32_t t, bool has_emb) const {
    if (tables <= 1) return EncodedBytes(has_emb);
    return 8 + 4 * 4 + 4 * wide_state +
           (has_emb ? size_t{table_dim[t]} * StoredElementBytes(quant_bits) +
                          size_t{table_state[t]} * (state_bits == 16 ? 2 : 4)
                    : 0);
  }
  size_t EncodedBytesOf(uint64_t key, bool has_emb) const {
    return TableEncodedBytes(TableOf(key), has_emb);
  }
  bool operator==(const ValueLayout&) const = default;
};

// The "row codes" word of the files' headers (docs/formats): quant_bits in bits 0-15,
// state_bits in bits 16-31 (0 in files written before state_bits existed).
inline uint32_t RowCodesWord(const ValueLayout& l) { return l.quant_bits | (l.state_bits << 16); }
inline void SetRowCodes(uint32_t word, ValueLayout* l) {
  l->quant_bits = word & 0xFFFFu;
  l->state_bits = word >> 16;
}

// Writes the embedding state state[0..n) in its stored form (n x 4 bytes at out, or n x 2 as
// bfloat16 with state_bits 16), and reads it back. n: l.emb_state, or StateOf(key).
void StoreState(const ValueLayout& l, const float* state, uint32_t n, char* out);
void LoadState(const ValueLayout& l, const char* in, uint32_t n, float* state);

constexpr uint16_t kFlagHasEmb = 1;

// n rows in structure-of-arrays form; embeddings are floats here whatever the stored form
// (a quantized layout's values are expected on its grid: EncodeRow rounds to nearest). Thread
// safety: a value type; distinct rows may be written by distinct threads.
class RowBlock {
 public:
  explicit RowBlock(ValueLayout layout = {}) : layout_(layout), quant_(layout.quantizer()) {}

  const ValueLayout& layout() const { return layout_; }
  size_t size() const { return keys_.size(); }
  // Makes room for n rows; the contents of the rows are unspecified.
  void Resize(size_t n);

  uint64_t& key(size_t i) { return keys_[i]; }
  uint64_t key(size_t i) const { return keys_[i]; }
  float& show(size_t i) { return show_[i]; }
  float show(size_t i) const { return show_[i]; }
  float& click(size_t i) { return click_[i]; }
  float click(size_t i) const { return click_[i]; }
  uint16_t& unseen(size_t i) { return unseen_[i]; }
  uint16_t unseen(size_t i) const { return unseen_[i]; }
  bool has_emb(size_t i) const { return flags_[i] & kFlagHasEmb; }
  uint16_t& flags(size_t i) { return flags_[i]; }
  uint16_t flags(size_t i) const { return flags_[i]; }
  float& wide(size_t i) { return wide_[i]; }
  float wide(size_t i) const { return wide_[i]; }
  float* wide_state(size_t i) { return wide_state_.data() + i * layout_.wide_state; }
  const float* wide_state(size_t i) const { return wide_state_.data() + i * layout_.wide_state; }
  float* emb(size_t i) { return emb_.data() + i * layout_.dim; }
  const float* emb(size_t i) const { return emb_.data() + i * layout_.dim; }
  float* emb_state(size_t i) { return emb_state_.data() + i * layout_.emb_state; }
  const float* emb_state(size_t i) const { return emb_state_.data() + i * layout_.emb_state; }

  // Row i as a row with no history: counters, wide part and state zero, no embedding.
  void ClearRow(size_t i, uint64_t key);
  // Copies row j of src (same layout) into row i.
  void CopyRow(const RowBlock& src, size_t j, size_t i);
  // Appends a copy of row j of src (same layout).
  void AppendRow(const RowBlock& src, size_t j);

  // Appends the canonical encoding of row i to *out.
  void EncodeRow(size_t i, std::string* out) const;
  // Decodes one row from [p, p + n) into row i; returns the bytes consumed, or 0 if the
  // bytes do not hold a complete row.
  size_t DecodeRow(const char* p, size_t n, size_t i);
  // The row without its optimizer state (wide and embedding state): what a row's holder
  // trains with when only the owner updates it (docs/distributed.md, "Owner updates").
  // DecodeValues leaves row i's state as it was; it returns the bytes consumed, or 0 as
  // DecodeRow does.
  void EncodeValues(size_t i, std::string* out) const;
  size_t DecodeValues(const char* p, size_t n, size_t i);

  size_t MemoryBytes() const;
  // Bytes one row of `layout` takes: MemoryBytes() of n rows just resized is n times this.
  static size_t BytesPerRow(const ValueLayout& layout) {
    return 8 + (3 + layout.wide_state + layout.dim + layout.emb_state) * 4 + 2 * 2;
  }

 private:
  // Key, show, click, unseen, flags and wide weight: the start of both encodings.
  void EncodeHead(size_t i, std::string* out) const;
  // Row i's first `dim` embedding values in their stored form (codes or floats), and back.
  void EncodeEmb(size_t i, uint32_t dim, std::string* out) const;
  void DecodeEmb(const char* p, uint32_t dim, size_t i);

  ValueLayout layout_;
  Quantizer quant_;
  std::vector<uint64_t> keys_;
  std::vector<float> show_, click_, wide_, wide_state_, emb_, emb_state_;
  std::vector<uint16_t> unseen_, flags_;
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_VALUE_H_
