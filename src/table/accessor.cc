#include "table/accessor.h"

namespace ctrbox {

bool CtrAccessor::MaybeCreateEmbedding(RowBlock* rows, size_t i) const {
  return MaybeCreateEmbedding(rows->key(i), rows->show(i), rows->click(i), &rows->flags(i),
                              rows->emb(i), rows->emb_state(i));
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
