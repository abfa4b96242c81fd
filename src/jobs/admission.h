// Admission by count (docs/routine.md, "Admission"): a key gets a row only once it has been
// seen table.admit.min_count times, counted by a counting Bloom filter, so that the one-off
// keys of a long tail cost no row (DeepRec's CBF filter). Until then its occurrences are left
// out of the examples: it contributes nothing and learns nothing, as a key the table does not
// hold at evaluation.
#ifndef CTRBOX_JOBS_ADMISSION_H_
#define CTRBOX_JOBS_ADMISSION_H_

#include <cstdint>

#include "io/batch.h"
#include "table/counting_bloom.h"

namespace ctrbox {

struct AdmissionCounts {
  uint64_t occurrences = 0;  // key occurrences counted
  uint64_t dropped = 0;      // ... left out of the examples (their key not admitted yet)
};

class Admission {
 public:
  Admission(uint32_t min_count, uint32_t log2_counters)
      : min_count_(min_count), bloom_(log2_counters) {}
  Admission(uint32_t min_count, CountingBloom bloom)
      : min_count_(min_count), bloom_(std::move(bloom)) {}

  // Counts every key occurrence of `batch` in row order and removes the occurrences of keys
  // whose count is below min_count (the occurrence counted): with min_count 2 a key's first
  // occurrence is left out, the later ones kept.
  void Filter(Batch* batch);

  const CountingBloom& bloom() const { return bloom_; }
  const AdmissionCounts& counts() const { return counts_; }

 private:
  uint32_t min_count_;
  CountingBloom bloom_;
  AdmissionCounts counts_;
};

}  // namespace ctrbox

#endif  // CTRBOX_JOBS_ADMISSION_H_
