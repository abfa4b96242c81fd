// CtrAccessor: the rules of the CTR value layout (docs/sparse_table.md): the show/click
// score, when an embedding is created and how it starts, and when shrink deletes a key.
#ifndef CTRBOX_TABLE_ACCESSOR_H_
#define CTRBOX_TABLE_ACCESSOR_H_

#include <cstdint>

#include "table/value.h"
#include "util/hd.h"
#include "util/random.h"

namespace ctrbox {

struct AccessorOptions {
  float nonclk_coeff = 0.1f;
  float click_coeff = 1.0f;
  float embedx_threshold = 0.0f;  // 0: every key gets its embedding on first sight
  float init_range = 0.01f;       // embeddings start uniform in [-init_range, init_range]
  uint64_t seed = 1;
  float decay = 0.98f;                      // show/click multiplier at each shrink
  float delete_threshold = 0.0f;            // shrink deletes keys whose score falls below this
  uint32_t delete_after_unseen_passes = 0;  // ... or unseen for more passes (0: never)
};

// Thread safety: immutable after construction. A value type the GPU backend copies to the
// device, where the CTRBOX_HD members run the same code.
class CtrAccessor {
 public:
  CtrAccessor(ValueLayout layout, AccessorOptions options)
      : layout_(layout), options_(options), quant_(layout.quantizer()) {}

  const ValueLayout& layout() const { return layout_; }
  const AccessorOptions& options() const { return options_; }

  CTRBOX_HD float Score(float show, float click) const {
    return (show - click) * options_.nonclk_coeff + click * options_.click_coeff;
  }
  // Gives row i of `rows` its embedding if it has none and its score passes the threshold.
  // Returns true if it created one. In a quantized layout the initial draw is put on the
  // grid by stochastic rounding (from the key and seed), whatever the update rounding.
  bool MaybeCreateEmbedding(RowBlock* rows, size_t i) const;
  // The same on raw row fields: if the row has no embedding (flags) and its score passes
  // the threshold, writes the embedding of `key` at emb, zeroes state and sets the flag.
  CTRBOX_HD bool MaybeCreateEmbedding(uint64_t key, float show, float click, uint16_t* flags,
                                      float* emb, float* state) const {
    if (*flags & kFlagHasEmb) return false;
    if (Score(show, click) < options_.embedx_threshold) return false;
    // A multi-table layout's row takes its own table's dimension (the rest stays zero).
    const uint32_t dim = layout_.DimOf(key), states = layout_.StateOf(key);
    for (uint32_t d = 0; d < dim; ++d) {
      emb[d] = HashUniform(options_.seed, key, d, options_.init_range);
    }
    quant_.Round(emb, dim, QuantRounding::kStochastic, options_.seed ^ kInitQuantSalt, key);
    for (uint32_t j = 0; j < states; ++j) state[j] = 0.0f;
    *flags |= kFlagHasEmb;
    return true;
  }
  // Row i as a key seen for the first time: cleared, embedding created if the threshold
  // allows.
  void InitRow(RowBlock* rows, size_t i, uint64_t key) const;
  // One shrink step on a row: decays show/click and ages it. Returns false if the key
  // should be deleted.
  bool ShrinkRow(float* show, float* click, uint16_t* unseen) const;

 private:
  // Salts the stochastic rounding of a quantized layout's initial embedding.
  static constexpr uint64_t kInitQuantSalt = 0x51A7'1A17'0000'0001ULL;

  ValueLayout layout_;
  AccessorOptions options_;
  Quantizer quant_;
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_ACCESSOR_H_
