// The memory a job may use: its memory cgroup's limit, which counts the page cache as well as
// the process (a container, a `systemd-run -p MemoryMax=`, a batch scheduler's job), or the
// machine's physical memory where no cgroup limits it below that (docs/storage.md, "The box's
// memory for the cache").
#ifndef CTRBOX_UTIL_MEMORY_BOX_H_
#define CTRBOX_UTIL_MEMORY_BOX_H_

#include <cstdint>
#include <string>

namespace ctrbox {

struct MemoryBox {
  // Bytes; 0 when not even the physical memory is known.
  uint64_t limit = 0;
  // Where the limit comes from: "cgroup v1 /sys/fs/cgroup/memory/a/b", "cgroup v2
  // /sys/fs/cgroup/a/b" (the cgroup that sets it: the process's own or an ancestor's) or
  // "physical memory".
  std::string source;
  // The file with that cgroup's peak usage (v1 memory.max_usage_in_bytes, v2 memory.peak:
  // RSS and page cache of everything in it), "" for physical memory.
  std::string peak_file;
};

// Finds the box of the calling process: the memory controller's line of /proc/self/cgroup
// (v1 "N:...memory...:/path", else v2 "0::/path"), then the least limit of that cgroup and
// its ancestors under /sys/fs/cgroup/memory (v1 memory.limit_in_bytes) or /sys/fs/cgroup (v2
// memory.max); a limit of "max", unreadable, or at least the physical memory does not bind.
// `root` prefixes both paths (tests); `physical` is the machine's memory (0: sysconf's).
MemoryBox FindMemoryBox(const std::string& root = "", uint64_t physical = 0);

// The box's peak usage so far, bytes; 0 where unknown (physical memory, an unreadable file).
uint64_t MemoryBoxPeakBytes(const MemoryBox& box);

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_MEMORY_BOX_H_
