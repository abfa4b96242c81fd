// The disk's own limits under a set of existing files (docs/storage.md, "The disk's share"):
// random 4 KiB reads per second with 1 and with 16 reads in flight, and sequential MB/s, read
// with O_DIRECT so that the page cache answers none of them. Beside a job's own reads of its
// SSD tier, they tell whether the disk or the CPU sets the speed.
//
// Thread safety: ProbeDisk may run beside anything; it only reads the files.
#ifndef CTRBOX_UTIL_DISK_PROBE_H_
#define CTRBOX_UTIL_DISK_PROBE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "util/env.h"
#include "util/status.h"

namespace ctrbox {

struct DiskCeiling {
  // False when the file system refuses O_DIRECT (tmpfs, some overlays): nothing was measured
  // (`why_not` says so), since the page cache would answer.
  bool measured = false;
  std::string why_not;
  double random_reads_qd1_per_s = 0;   // 4 KiB at random 4 KiB-aligned offsets, one at a time
  double random_reads_qd16_per_s = 0;  // ... 16 threads each with one in flight
  double seq_mb_per_s = 0;             // 1 MiB reads in order through the largest file
  uint64_t reads = 0;                  // reads made, all three together
  double seconds = 0;                  // the probe's own time
};

// Measures `files` (regular files, at least one of >= 4 KiB) for about `seconds` in all: 40 %
// at queue depth 1, 40 % at 16, 20 % sequential. An I/O error fails it, naming the file.
StatusOr<DiskCeiling> ProbeDisk(const std::vector<std::string>& files, double seconds);
// ProbeDisk over the files of `dir` (listed through `env`; an SSD tier's or a kept store's).
StatusOr<DiskCeiling> ProbeDiskDir(Env* env, const std::string& dir, double seconds);

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_DISK_PROBE_H_
