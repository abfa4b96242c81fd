#include "util/memory_box.h"

#include <fstream>
#include <string_view>

#include "util/parse.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

// The first line of a file, "" if it cannot be read.
std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// A limit file's value: bytes, or 0 for "max", an empty or unreadable file or anything else.
uint64_t LimitOf(const std::string& path) {
  uint64_t v;
  return ParseUint64(FirstLine(path), &v) ? v : 0;
}

// Whether a comma-separated controller list names `memory`.
bool NamesMemory(std::string_view list) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    if (list.substr(0, comma) == "memory") return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

MemoryBox FindMemoryBox(const std::string& root, uint64_t physical) {
  if (physical == 0) physical = PhysicalMemoryBytes();
  MemoryBox box;
  box.limit = physical;
  box.source = "physical memory";
  // The memory controller's cgroup: a v1 hierarchy that has it wins over the v2 one (a
  // hybrid machine mounts both; the memory controller is then v1's).
  std::ifstream in(root + "/proc/self/cgroup");
  std::string line, v1_path, v2_path;
  bool v1 = false, v2 = false;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string_view controllers = std::string_view(line).substr(a + 1, b - a - 1);
    if (NamesMemory(controllers)) {
      v1 = true;
      v1_path = line.substr(b + 1);
    } else if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      v2 = true;
      v2_path = line.substr(b + 1);
    }
  }
  if (!v1 && !v2) return box;
  const std::string mount = root + (v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup");
  const char* limit_file = v1 ? "/memory.limit_in_bytes" : "/memory.max";
  const char* peak_file = v1 ? "/memory.max_usage_in_bytes" : "/memory.peak";
  std::string path = v1 ? v1_path : v2_path;
  if (path.empty() || path[0] != '/') return box;
  // The cgroup and each ancestor up to the mount's root: the least limit binds.
  while (true) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    const std::string dir = mount + (path == "/" ? "" : path);
    const uint64_t limit = LimitOf(dir + limit_file);
    if (limit > 0 && (box.limit == 0 || limit < box.limit)) {
      box.limit = limit;
      box.source = std::string(v1 ? "cgroup v1 " : "cgroup v2 ") + dir.substr(root.size());
      box.peak_file = dir + peak_file;
    }
    if (path == "/") break;
    path.resize(path.rfind('/') + 1);
  }
  return box;
}

uint64_t MemoryBoxPeakBytes(const MemoryBox& box) {
  return box.peak_file.empty() ? 0 : LimitOf(box.peak_file);
}

}  // namespace ctrbox
