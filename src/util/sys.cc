#include "util/sys.h"

#include <execinfo.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ctrbox {

uint64_t PeakRssBytes() {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

ResidentSet CurrentResidentSet() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return {};
  unsigned long size = 0, resident = 0, shared = 0;
  int n = std::fscanf(f, "%lu %lu %lu", &size, &resident, &shared);
  std::fclose(f);
  if (n != 3) return {};
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return {resident * page, shared * page};
}

uint64_t CurrentRssBytes() { return CurrentResidentSet().rss; }

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
#if defined(CTRBOX_HEAP_STATS)
#define CTRBOX_SANITIZED 1
#else
#define CTRBOX_SANITIZED 0
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

namespace {

const char* SignalName(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    default:
      return "?";
  }
}

// Only write(2), backtrace (its library loaded at install) and snprintf into a stack buffer:
// the process is dying, the heap may be what broke.
void OnFatalSignal(int sig) {
  char thread[17] = {};
  ::prctl(PR_GET_NAME, thread, 0, 0, 0);
  char head[256];
  const int n = std::snprintf(head, sizeof(head),
                              "ctrbox: fatal signal %d (%s) in thread \"%s\"; the stack "
                              "(addr2line -f -C -e ctrbox OFFSET names a frame):\n",
                              sig, SignalName(sig), thread);
  if (n > 0) (void)!::write(STDERR_FILENO, head, std::min<size_t>(n, sizeof(head) - 1));
  void* frames[64];
  const int depth = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

bool InstallCrashBacktrace() {
  if (CTRBOX_SANITIZED) return false;
  void* warm[1];
  (void)::backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
  struct sigaction sa = {};
  sa.sa_handler = OnFatalSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  for (const int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
  return true;
}

void SetThreadName(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

namespace {
// The nice value background threads take: the caller's of SetBackgroundNice plus its
// argument; -1: none set (EnterBackground does nothing).
std::atomic<int> background_nice{-1};
constexpr int kLowestPriorityNice = 19;

pid_t ThreadId() { return static_cast<pid_t>(syscall(SYS_gettid)); }
}  // namespace

int ThreadNice() {
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(ThreadId()));
  return errno == 0 ? nice : 0;
}

void SetBackgroundNice(int nice) {
  background_nice.store(nice <= 0 ? -1 : std::min(kLowestPriorityNice, ThreadNice() + nice),
                        std::memory_order_relaxed);
}

int BackgroundNice() {
  const int nice = background_nice.load(std::memory_order_relaxed);
  return nice < 0 ? 0 : nice;
}

bool EnterBackground() {
  const int nice = background_nice.load(std::memory_order_relaxed);
  if (nice < 0 || ThreadNice() >= nice) return true;  // never raises a thread's priority
  return setpriority(PRIO_PROCESS, static_cast<id_t>(ThreadId()), nice) == 0;
}

}  // namespace ctrbox
