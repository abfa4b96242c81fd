// Helpers of the SsdStore tests (ssd_store_test.cc, ssd_store_recycle_test.cc).
#ifndef CTRBOX_TABLE_SSD_STORE_TEST_UTIL_H_
#define CTRBOX_TABLE_SSD_STORE_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "table/param_file.h"
#include "table/ssd_store.h"
#include "table/value.h"
#include "util/random.h"

namespace ctrbox {

// Fills *b with a record of group g holding `keys`, their rows random, an embedding in each
// row if `emb` (60 bytes a row in kLayout; 28 without), else in about half of them.
inline void BuildRecord(const ValueLayout& layout, uint32_t g, const std::vector<uint64_t>& keys,
                        bool emb, Random* rng, RecordBuilder* b) {
  RowBlock rows(layout);
  rows.Resize(keys.size());
  b->Reset(g);
  for (size_t i = 0; i < keys.size(); ++i) {
    rows.ClearRow(i, keys[i]);
    rows.show(i) = static_cast<float>(rng->Below(1000));
    rows.wide(i) = static_cast<float>(rng->Below(64)) / 8.0f;
    if (emb || rng->Below(2)) {
      rows.flags(i) |= kFlagHasEmb;
      for (uint32_t d = 0; d < layout.dim; ++d) {
        rows.emb(i)[d] = static_cast<float>(rng->Below(200)) / 200.0f - 0.5f;
      }
    }
    b->AddRow(rows, i);
  }
}

// A group entry of a base alone.
inline GroupEntry BaseOnly(const RecordLoc& base) {
  GroupEntry e;
  e.base = base;
  e.base_rows = e.unique_rows = 1;
  return e;
}

// Options of a store on the file system in `dir` whose files take two records of ~3000 bytes
// (four groups), with a pool of `recycle` dead files.
inline SsdOptions TwoRecordsPerFile(const std::string& dir, uint32_t recycle) {
  SsdOptions o;
  o.dir = dir;
  o.group_bits = 2;
  o.file_bytes = 8192;
  o.recycle_files = recycle;
  return o;
}

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_SSD_STORE_TEST_UTIL_H_
