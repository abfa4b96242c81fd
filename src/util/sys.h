// Process and machine facts: memory use, CPU features, wall clock.
#ifndef CTRBOX_UTIL_SYS_H_
#define CTRBOX_UTIL_SYS_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace ctrbox {

// Peak resident set size of this process (getrusage), in bytes.
uint64_t PeakRssBytes();
// The current resident set (/proc/self/statm), in bytes; zeros if unavailable. `files`: of
// it, the pages mapped from files and shared memory (statm's `shared`: the program's code and
// libraries, and files read through mappings, as the SSD tier's with storage.mapped_reads).
struct ResidentSet {
  uint64_t rss = 0, files = 0;
};
ResidentSet CurrentResidentSet();
// CurrentResidentSet().rss.
uint64_t CurrentRssBytes();
// Returns the allocator's free pages to the system (glibc's malloc_trim over every arena:
// the free chunks inside a heap too, not only its top), so that a phase that freed its
// buffers (a job's passes) does not leave them resident under the next one (its evaluation).
// Returns the resident bytes it released (CurrentRssBytes before less after; 0 if none).
uint64_t ReleaseFreeMemory();
// The bytes the allocator holds free (glibc's mallinfo2 `fordblks`, over every arena: what
// ReleaseFreeMemory could give back, resident or not); 0 where that is not known.
uint64_t HeapFreeBytes();
// Whether HeapFreeBytes is known: glibc's allocator serves malloc (not a sanitizer's, whose
// heap glibc's counts do not see).
bool HeapStatsKnown();
// The machine's physical memory (sysconf), in bytes; 0 if unavailable.
uint64_t PhysicalMemoryBytes();
// Number of online CPUs (at least 1).
int NumCpus();
// Names the calling thread (at most 15 characters are kept) so that `top -H`, `perf report
// --sort comm` and gdb tell the pipeline's stages and pools apart (docs/pipeline.md).
void SetThreadName(const std::string& name);
// Background threads (docs/pipeline.md, "Threads"): a train job runs the train stage at the
// process's own priority and every other thread of its (the read, pull and push stages, the
// reader's decoders, the SSD tier's write-back and readers) at a lower one, so that where the
// job fills the cores the slowest stage takes them first and the others fill in behind it.
// SetBackgroundNice(n) makes n (0-19) the nice value those threads add to the calling
// thread's (the process's: `nice -n 5 ctrbox` runs them at 5 + n, at most 19); 0, the
// default, changes nothing. EnterBackground() gives the calling thread that nice value (a
// Linux thread's nice is its own, and the threads it starts inherit it); it only ever lowers
// a thread's priority, and returns false where the system refused (the thread runs on as it
// was).
void SetBackgroundNice(int nice);
// The nice value background threads take now (0: none set).
int BackgroundNice();
bool EnterBackground();
// The calling thread's nice value (getpriority of its thread id).
int ThreadNice();
// On a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) writes the signal, the thread's
// name and the stack (module+offset per frame: `addr2line -f -C -e ctrbox OFFSET` names them)
// to stderr, then dies of the signal as before. A crash on a machine with no debugger (the
// GPU machines) then says where. Returns false (and installs nothing) in sanitizer builds,
// whose own handlers report crashes.
bool InstallCrashBacktrace();
// True when the CPU runs the AVX-512 F/CD/BW/DQ/VL instruction sets.
bool CpuHasAvx512();

// A monotonic stopwatch.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  void Reset() { start_ = std::chrono::steady_clock::now(); }
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_SYS_H_
