#include "jobs/admission.h"

namespace ctrbox {

void Admission::Filter(Batch* b) {
  const size_t lists = b->offsets.size() - 1;  // a key list per (row, slot)
  const bool weighted = b->has_weights();
  size_t out = 0;
  uint32_t begin = b->offsets[0];
  for (size_t l = 0; l < lists; ++l) {
    const uint32_t end = b->offsets[l + 1];
    for (uint32_t i = begin; i < end; ++i) {
      ++counts_.occurrences;
      if (bloom_.Add(b->keys[i]) < min_count_) {
        ++counts_.dropped;
        continue;
      }
      b->keys[out] = b->keys[i];
      if (weighted) b->weights[out] = b->weights[i];
      ++out;
    }
    begin = end;
    b->offsets[l + 1] = static_cast<uint32_t>(out);
  }
  b->keys.resize(out);
  if (weighted) b->weights.resize(out);
}

}  // namespace ctrbox
