// Per-epoch validation's held-back slice (docs/model.md, "Validation and early stopping"): a
// row of the training data is held back when a hash of its contents (label, dense values,
// keys as read, and train.seed) falls below train.validation_fraction. The decision is the
// row's own: the same row is held back in every epoch, after a resume, whatever the passes,
// the threads or the ranks, and identical rows fall on the same side (no copy of a validation
// row is trained on).
#ifndef CTRBOX_JOBS_HOLDOUT_H_
#define CTRBOX_JOBS_HOLDOUT_H_

#include <cstdint>
#include <memory>

#include "io/batch.h"
#include "io/reader.h"

namespace ctrbox {

class HoldOut {
 public:
  // REQUIRES: 0 < fraction < 1.
  HoldOut(double fraction, uint64_t seed);

  // Whether row `r` of `batch` is held back.
  bool Held(const Batch& batch, size_t r) const;
  // Keeps the rows held back (held) or the others (!held), in order.
  void Keep(Batch* batch, bool held) const;

 private:
  uint64_t threshold_;  // a row is held back when its hash is below this
  uint64_t seed_;
};

// `reader`'s rows that `hold_out` holds back (the validation slice), in order; its counts are
// the whole input's.
std::unique_ptr<BatchReader> HeldBackRows(std::unique_ptr<BatchReader> reader, HoldOut hold_out);

}  // namespace ctrbox

#endif  // CTRBOX_JOBS_HOLDOUT_H_
