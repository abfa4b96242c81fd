#include "io/bad_input.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/logging.h"

namespace ctrbox {

std::string_view BadKindName(BadKind kind) {
  switch (kind) {
    case BadKind::kFieldCount:
      return "field_count";
    case BadKind::kBadNumber:
      return "bad_number";
    case BadKind::kBadLabel:
      return "bad_label";
    case BadKind::kOverlongLine:
      return "overlong_line";
    case BadKind::kBadUtf8:
      return "bad_utf8";
    case BadKind::kBadSlot:
      return "bad_slot";
    case BadKind::kBadJson:
      return "bad_json";
    case BadKind::kDuplicateKey:
      return "duplicate_key";
    case BadKind::kTooManyKeys:
      return "too_many_keys";
    case BadKind::kNumKinds:
      break;
  }
  return "unknown";
}

std::string BadRecord::ToString() const {
  return fmt::format("{}:{}: {}: {}", file, line, BadKindName(kind), detail);
}

uint64_t RecordCounts::bad_total() const {
  uint64_t t = 0;
  for (uint64_t b : bad) t += b;
  return t;
}

void RecordCounts::Add(const RecordCounts& o) {
  good += o.good;
  for (int k = 0; k < kNumBadKinds; ++k) bad[k] += o.bad[k];
}

Status BadInputTracker::Add(const RecordCounts& counts, const std::vector<BadRecord>& samples) {
  counts_.Add(counts);
  for (const BadRecord& r : samples) {
    if (first_bad_.empty()) first_bad_ = r.ToString();
    int k = static_cast<int>(r.kind);
    if (logged_[k] < options_.log_per_kind) {
      ++logged_[k];
      LOG_WARNING("skipping malformed record {}", r.ToString());
      if (logged_[k] == options_.log_per_kind) {
        LOG_WARNING("further {} records are counted but not logged", BadKindName(r.kind));
      }
    }
  }
  return CheckRate(/*at_end=*/false);
}

Status BadInputTracker::Reclassify(const RecordCounts& found_bad,
                                   const std::vector<BadRecord>& samples) {
  counts_.good -= std::min(counts_.good, found_bad.bad_total());
  return Add(found_bad, samples);
}

Status BadInputTracker::Finish() {
  uint64_t bad = counts_.bad_total();
  if (bad > 0) {
    std::string kinds;
    for (int k = 0; k < kNumBadKinds; ++k) {
      if (counts_.bad[k] == 0) continue;
      if (!kinds.empty()) kinds += ", ";
      kinds += fmt::format("{} {}", BadKindName(static_cast<BadKind>(k)), counts_.bad[k]);
    }
    LOG_WARNING("skipped {} malformed records of {} ({})", bad, bad + counts_.good, kinds);
  }
  return CheckRate(/*at_end=*/true);
}

Status BadInputTracker::CheckRate(bool at_end) const {
  uint64_t bad = counts_.bad_total();
  uint64_t total = bad + counts_.good;
  if (bad == 0 || total == 0) return Status::OK();
  if (!at_end && total < options_.min_records_for_rate) return Status::OK();
  double rate = static_cast<double>(bad) / static_cast<double>(total);
  if (rate <= options_.max_error_rate) return Status::OK();
  return DataLossError(fmt::format(
      "too many malformed records: {} of {} ({:.2f}%) exceed data.max_error_rate={:g}%; "
      "first: {}",
      bad, total, 100.0 * rate, 100.0 * options_.max_error_rate, first_bad_));
}

}  // namespace ctrbox
