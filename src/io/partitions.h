// Partitions of a data root that logs land in (docs/routine.md): a layout such as
// "{day}/{hour}" names each partition (day as YYYYMMDD, hour as HH; or "{day}" alone, or
// "{index}", a number), partitions follow each other in a total order, and one is ready when
// its done file (e.g. _SUCCESS) exists. A stream job takes them in that order.
#ifndef CTRBOX_IO_PARTITIONS_H_
#define CTRBOX_IO_PARTITIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "util/env.h"
#include "util/status.h"

namespace ctrbox {

// A layout: literal text around the placeholders {day} and {hour} ({hour} needs {day}), or
// {index} alone; '/' separates directory levels. A partition is its ordinal: hours since
// 1970-01-01 00:00 for a layout with {hour}, days for {day}, the number for {index}.
class PartitionLayout {
 public:
  // InvalidArgument naming stream.layout when `layout` is none of the above.
  static StatusOr<PartitionLayout> Parse(const std::string& layout);

  const std::string& text() const { return text_; }
  // The partition's relative path, e.g. "20261101/05".
  std::string Name(int64_t ordinal) const;
  // The ordinal of a relative path, or nullopt when it is not one this layout names (a
  // day that does not exist, an hour above 23, other text).
  std::optional<int64_t> Ordinal(const std::string& name) const;
  // When the partition begins, in seconds since 1970-01-01 00:00 UTC (its day and hour read as
  // UTC), or nullopt for {index}: a numbered partition has no time.
  std::optional<int64_t> StartSeconds(int64_t ordinal) const;
  // Whether a directory level `level` entry could belong to a partition.
  bool LevelMatches(size_t level, const std::string& entry) const;
  size_t levels() const { return levels_.size(); }

 private:
  enum class Unit { kHour, kDay, kIndex };
  std::string text_;
  Unit unit_ = Unit::kHour;
  std::vector<std::string> levels_;  // the layout split at '/'
};

// The data files of a ready partition: its regular files, sorted, leaving out the done file
// and names starting with '.' or '_' (markers, temporaries of a writer in progress). The other
// entries it leaves out (subdirectories, FIFOs, sockets) go to *ignored when given.
StatusOr<std::vector<std::string>> PartitionFiles(Env* env, const std::string& dir,
                                                  const std::string& done_file,
                                                  std::vector<std::string>* ignored = nullptr);

// A look at a data root: the partitions whose done file exists, ascending, and the
// directories at a partition's levels that the layout cannot read ("20261101/5", a date that
// does not exist), as paths below the root. Names starting with '.' or '_' are a writer's, not
// unreadable.
struct PartitionScan {
  std::vector<int64_t> ready;
  std::vector<std::string> unreadable;
};
StatusOr<PartitionScan> ScanPartitions(Env* env, const std::string& root,
                                       const PartitionLayout& layout, const std::string& done_file);

// The partitions below `root` whose done file exists, ascending, each above `after`.
StatusOr<std::vector<int64_t>> ReadyPartitions(Env* env, const std::string& root,
                                               const PartitionLayout& layout,
                                               const std::string& done_file, int64_t after);

}  // namespace ctrbox

#endif  // CTRBOX_IO_PARTITIONS_H_
