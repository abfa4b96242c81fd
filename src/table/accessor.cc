#include "table/accessor.h"

#include <cstring>

#include "util/coding.h"
#include "util/random.h"

namespace ctrbox {
namespace {
constexpr uint64_t kInitQuantSalt = 0x51A7'1A17'0000'0001ULL;
}  // namespace

bool CtrAccessor::MaybeCreateEmbedding(RowBlock* rows, size_t i) const {
  if (rows->has_emb(i)) return false;
  if (Score(rows->show(i), rows->click(i)) < options_.embedx_threshold) return false;
  float* e = rows->emb(i);
  const uint64_t key = rows->key(i);
  for (uint32_t d = 0; d < layout_.dim; ++d) {
    e[d] = HashUniform(options_.seed, key, d, options_.init_range);
  }
  quant_.Round(e, layout_.dim, QuantRounding::kStochastic, options_.seed ^ kInitQuantSalt, key);
  ZeroBytes(rows->emb_state(i), layout_.emb_state * sizeof(float));
  rows->flags(i) |= kFlagHasEmb;
  return true;
}

void CtrAccessor::InitRow(RowBlock* rows, size_t i, uint64_t key) const {
  rows->ClearRow(i, key);
  MaybeCreateEmbedding(rows, i);
}

bool CtrAccessor::ShrinkRow(float* show, float* click, uint16_t* unseen) const {
  *show *= options_.decay;
  *click *= options_.decay;
  if (*unseen < 0xFFFF) ++*unseen;
  if (Score(*show, *click) < options_.delete_threshold) return false;
  if (options_.delete_after_unseen_passes > 0 && *unseen > options_.delete_after_unseen_passes) {
    return false;
  }
  return true;
}

}  // namespace ctrbox
