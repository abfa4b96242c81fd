// Helpers for io tests: temporary directories and random batches.
#ifndef CTRBOX_IO_TEST_UTIL_H_
#define CTRBOX_IO_TEST_UTIL_H_

#include <cstdlib>
#include <string>

#include "io/batch.h"
#include "io/reader.h"
#include "util/random.h"
#include "util/temp_dir.h"  // TempDir

namespace ctrbox::testing {

// A batch of `rows` random rows; multi_hot gives 0..3 keys per slot, else exactly one.
inline Batch RandomBatch(Schema schema, size_t rows, uint64_t seed, bool multi_hot, bool weights) {
  Random rng(seed);
  Batch b;
  b.Reset(schema);
  BatchBuilder builder(&b);
  for (size_t r = 0; r < rows; ++r) {
    builder.BeginRow(static_cast<float>(rng.Below(2)));
    for (uint32_t j = 0; j < schema.num_dense; ++j)
      builder.SetDense(j, static_cast<float>(rng.Below(1000)) - 3);
    for (uint32_t s = 0; s < schema.num_slots; ++s) {
      uint64_t n = multi_hot ? rng.Below(4) : 1;
      for (uint64_t k = 0; k < n; ++k) {
        uint64_t key = rng.Below(5) == 0 ? rng.Next() : rng.Below(50);  // some repeats
        builder.AddKey(s, key, weights ? rng.UniformFloat() : 1.0f);
      }
    }
    builder.EndRow();
  }
  return b;
}

// Reads everything `o` names into one batch.
inline StatusOr<Batch> ReadAll(const DataOptions& o) {
  ASSIGN_OR_RETURN(auto reader, OpenReader(Env::Posix(), o));
  Batch all;
  all.Reset(reader->schema());
  while (true) {
    Batch b;
    bool eof = false;
    RETURN_IF_ERROR(reader->Next(&b, &eof));
    if (eof) return all;
    all.AppendRows(b, 0, b.rows());
  }
}

inline bool SameBatch(const Batch& a, const Batch& b) {
  return a.schema == b.schema && a.labels == b.labels && a.dense == b.dense &&
         a.offsets == b.offsets && a.keys == b.keys &&
         (a.weights == b.weights || (a.weights.empty() && b.weights.empty()));
}

}  // namespace ctrbox::testing

#endif  // CTRBOX_IO_TEST_UTIL_H_
