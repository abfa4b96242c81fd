// A side view held in memory (docs/features.md): every row of its files, parsed once per job,
// with a hash index on its key column(s) for the join operator.
//
// Thread safety: immutable after Load; Find from any thread.
#ifndef CTRBOX_FEATURE_SIDE_TABLE_H_
#define CTRBOX_FEATURE_SIDE_TABLE_H_

#include <memory>
#include <string>
#include <vector>

#include "feature/column.h"
#include "feature/graph.h"
#include "io/bad_input.h"
#include "util/env.h"

namespace ctrbox {

struct SideLoadOptions {
  size_t chunk_bytes = 4 << 20;
  size_t max_line_bytes = 1 << 20;
  BadInputOptions bad_input;
};

class SideTable {
 public:
  // Reads every file of `view` (or its command's output). Bad rows and duplicate keys are
  // counted in `counts` and logged; above bad_input.max_error_rate the load fails (DataLoss).
  static StatusOr<std::unique_ptr<SideTable>> Load(Env* env, const SideView& view,
                                                   const SideLoadOptions& options,
                                                   RecordCounts* counts);

  // The row whose key equals the values of `cols` at row r of `t` (one per key column, of the
  // key's types), or -1 when there is none or a value is null.
  int64_t Find(const ColumnTable& t, const std::vector<int>& cols, uint32_t r) const;

  uint32_t rows() const { return rows_; }
  const Column& column(int c) const { return cols_[c]; }
  size_t MemoryBytes() const;

 private:
  SideTable() = default;
  struct Parts;  // the view's chunks as parsed (side_table.cc)
  // Load's steps: the chunks parsed, their columns made one, the key index built (the rows
  // of a key seen before counted in *dup, the first few in *samples).
  Status ReadParts(Env* env, const SideLoadOptions& options, RecordCounts* counts,
                   BadInputTracker* tracker, Parts* parts);
  Status Concatenate(const Parts& parts);
  void IndexKeys(const Parts& parts, RecordCounts* dup, std::vector<BadRecord>* samples,
                 uint64_t* null_keys);
  uint64_t HashRow(const Column* const* cols, uint32_t r) const;
  uint64_t HashKeyOf(const ColumnTable& t, const std::vector<int>& cols, uint32_t r,
                     bool* null) const;

  const SideView* view_ = nullptr;
  uint32_t rows_ = 0;
  std::vector<std::unique_ptr<std::string>> texts_;  // the chunks the string cells point into
  std::unique_ptr<Arena> arena_;
  std::vector<Column> cols_;
  std::vector<uint32_t> buckets_;  // open addressing: row + 1 (0: empty)
  uint64_t mask_ = 0;
};

}  // namespace ctrbox

#endif  // CTRBOX_FEATURE_SIDE_TABLE_H_
