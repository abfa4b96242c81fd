// A rank's share of a row stream (docs/distributed.md, "The same model on any number of
// ranks"): the stream's rows in blocks of `unit`, block q going to rank q mod count. Generated
// rows are made by share (NewSynthReader); the rows of files are read whole by every rank and
// kept by share (KeepRowShare), so that global minibatch m is rows [m B, (m + 1) B) of the one
// stream whatever the number of ranks.
//
// Thread safety: value types and pure functions.
#ifndef CTRBOX_IO_ROW_SHARE_H_
#define CTRBOX_IO_ROW_SHARE_H_

#include <cstddef>
#include <cstdint>

#include "io/batch.h"

namespace ctrbox {

// The blocks of `unit` rows (block q: rows [q unit, (q + 1) unit)) with q mod count = index, in
// order. count 1: every row.
struct RowShare {
  uint32_t index = 0, count = 1;
  uint64_t unit = 1;
  bool whole() const { return count <= 1; }
  bool operator==(const RowShare&) const = default;
};

// Keeps, in place and in order, the rows of *batch that are `share`'s, its row r being row
// `first` + r of the stream; returns how many it kept. REQUIRES: share.unit >= 1.
size_t KeepRowShare(const RowShare& share, uint64_t first, Batch* batch);

}  // namespace ctrbox

#endif  // CTRBOX_IO_ROW_SHARE_H_
