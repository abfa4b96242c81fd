#include "util/sys.h"

#include <malloc.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

namespace ctrbox {

uint64_t PeakRssBytes() {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

uint64_t CurrentRssBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<uint64_t>(resident) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

uint64_t ReleaseFreeMemory() {
  const uint64_t before = CurrentRssBytes();
  ::malloc_trim(0);
  const uint64_t after = CurrentRssBytes();
  return before > after ? before - after : 0;
}

// glibc's heap counts: mallinfo2 (glibc 2.33), and only while glibc's allocator serves malloc
// (a sanitizer replaces it; glibc's counts then see an unused heap).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CTRBOX_HEAP_STATS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define CTRBOX_HEAP_STATS 0
#endif
#endif
#if !defined(CTRBOX_HEAP_STATS)
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
#define CTRBOX_HEAP_STATS 1
#else
#define CTRBOX_HEAP_STATS 0
#endif
#endif

bool HeapStatsKnown() { return CTRBOX_HEAP_STATS != 0; }

uint64_t HeapFreeBytes() {
#if CTRBOX_HEAP_STATS
  return ::mallinfo2().fordblks;
#else
  return 0;
#endif
}

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

int NumCpus() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : static_cast<int>(n);
}

bool CpuHasAvx512() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

void SetThreadName(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace ctrbox
