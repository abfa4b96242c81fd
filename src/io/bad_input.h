// Accounting of malformed input records: bad input is never silent (docs/architecture.md).
//
// Every reader classifies a malformed record by kind, skips it, and reports where it was.
// BadInputTracker sums the counts over a whole job, logs the first few records of each kind
// with file:line, and fails the job once the error rate passes data.max_error_rate.
#ifndef CTRBOX_IO_BAD_INPUT_H_
#define CTRBOX_IO_BAD_INPUT_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace ctrbox {

enum class BadKind : int {
  kFieldCount = 0,  // wrong number of fields / tokens
  kBadNumber,       // a dense value or id that is not a well-formed number
  kBadLabel,        // a label that is not 0/1 (or -1/+1 where the format allows)
  kOverlongLine,    // a line longer than data.max_line_bytes
  kBadUtf8,         // a categorical field that is not valid UTF-8
  kBadSlot,         // a slot or field id outside [0, num_slots), or a malformed token
  kBadJson,         // a JSON line or field that does not parse (feature views)
  kDuplicateKey,    // a side view's key seen before (feature views; the first row is kept)
  kTooManyKeys,     // a row making more keys than features.max_row_keys (a cross's max_keys)
  kNumKinds,
};
constexpr int kNumBadKinds = static_cast<int>(BadKind::kNumKinds);

// "field_count", "bad_number", ...
std::string_view BadKindName(BadKind kind);

struct BadRecord {
  BadKind kind;
  std::string file;
  uint64_t line = 0;   // 1-based line number (or record number in binary files)
  std::string detail;  // what was wrong, with the offending text (truncated)
  std::string ToString() const;
};

// Counts of one stretch of input (a chunk, a file or a whole job).
struct RecordCounts {
  uint64_t good = 0;
  std::array<uint64_t, kNumBadKinds> bad{};
  uint64_t bad_total() const;
  void Add(const RecordCounts& o);
};

struct BadInputOptions {
  // The job stops once bad / (good + bad) exceeds this, checked after at least
  // min_records_for_rate records and again at the end of input.
  double max_error_rate = 0.01;
  uint64_t min_records_for_rate = 1000;
  // How many bad records of each kind are logged with file:line.
  int log_per_kind = 5;
};

// Thread safety: not thread-safe; owned by the thread that merges reader output.
class BadInputTracker {
 public:
  explicit BadInputTracker(BadInputOptions options) : options_(options) {}

  // Adds a chunk's counts and its sample records (logged, up to the per-kind limit).
  // Returns DataLoss when the error rate is exceeded.
  Status Add(const RecordCounts& counts, const std::vector<BadRecord>& samples);
  // Like Add, for records already counted good (by an earlier Add) that a later check found
  // bad, such as a side view's duplicate keys: each is counted once, as bad.
  Status Reclassify(const RecordCounts& found_bad, const std::vector<BadRecord>& samples);
  // The end-of-input check; also logs a summary line if anything was bad.
  Status Finish();

  const RecordCounts& counts() const { return counts_; }

 private:
  Status CheckRate(bool at_end) const;

  BadInputOptions options_;
  RecordCounts counts_;
  std::array<int, kNumBadKinds> logged_{};
  std::string first_bad_;  // the first bad record seen, for the error message
};

}  // namespace ctrbox

#endif  // CTRBOX_IO_BAD_INPUT_H_
