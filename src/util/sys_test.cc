#include "util/sys.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "util/env.h"
#include "util/temp_dir.h"

namespace ctrbox {
namespace {

// EnterBackground lowers the calling thread's priority to the background nice value (the
// caller's of SetBackgroundNice plus its argument, at most 19), never raises it, does nothing
// while none is set, and the threads a background thread starts inherit it.
TEST(SysTest, BackgroundThreadsTakeTheBackgroundNiceValue) {
  std::thread([] {  // the test's own thread: its nice value may only go up
    const int own = ThreadNice();
    if (own + 5 > 19) GTEST_SKIP() << "this test already runs at nice " << own;
    SetBackgroundNice(0);
    EXPECT_EQ(BackgroundNice(), 0);
    std::thread([&] {
      EXPECT_TRUE(EnterBackground());
      EXPECT_EQ(ThreadNice(), own) << "none set: nothing changes";
    }).join();
    SetBackgroundNice(5);
    EXPECT_EQ(BackgroundNice(), own + 5);
    std::thread([&] {
      EXPECT_TRUE(EnterBackground());
      EXPECT_EQ(ThreadNice(), own + 5);
      int child = -1;
      std::thread([&] { child = ThreadNice(); }).join();
      EXPECT_EQ(child, own + 5) << "a thread started by a background thread inherits its nice";
      SetBackgroundNice(2);  // from this thread: 2 more than its own
      EXPECT_EQ(BackgroundNice(), std::min(19, own + 7));
    }).join();
    SetBackgroundNice(1);  // lower than a thread already has: it stays where it is
    std::thread([&] {
      setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), own + 4);
      EXPECT_TRUE(EnterBackground());
      EXPECT_EQ(ThreadNice(), own + 4);
    }).join();
    SetBackgroundNice(40);  // past the lowest priority: at most 19
    EXPECT_EQ(BackgroundNice(), 19);
    SetBackgroundNice(0);
  })
      .join();
}

// Blocks freed inside the heap (every other one kept, so that no free block reaches the top
// of an arena, which glibc would trim on its own) stay the allocator's: HeapFreeBytes counts
// them and ReleaseFreeMemory gives their resident pages back.
TEST(SysTest, FreedHeapBlocksAreCountedAndGivenBack) {
  if (!HeapStatsKnown()) {
    EXPECT_EQ(HeapFreeBytes(), 0u);
    GTEST_SKIP() << "malloc is not glibc's here (a sanitizer's allocator): no heap counts";
  }
  constexpr size_t kBlock = 64 << 10, kBlocks = 1024;  // 64 MiB, under the mmap threshold
  std::vector<std::unique_ptr<char[]>> blocks(kBlocks);
  for (auto& b : blocks) {
    b.reset(new char[kBlock]);
    std::memset(b.get(), 1, kBlock);  // resident
  }
  const uint64_t free_before = HeapFreeBytes();
  for (size_t i = 0; i < kBlocks; i += 2) blocks[i].reset();
  const uint64_t free_after = HeapFreeBytes();
  EXPECT_GE(free_after, free_before + kBlocks / 2 * kBlock * 9 / 10);
  const uint64_t released = ReleaseFreeMemory();
  EXPECT_GE(released, kBlocks / 2 * kBlock / 2) << "free " << free_after;
  // Still the allocator's, no longer resident.
  EXPECT_GE(HeapFreeBytes(), free_before + kBlocks / 2 * kBlock * 9 / 10);
}

// 64 MiB written in place of nothing shows in the resident set, and in its peak.
TEST(SysTest, ResidentSetIsMeasured) {
  constexpr size_t kBytes = size_t{64} << 20;
  const uint64_t before = CurrentRssBytes();
  ASSERT_GT(before, 0u);
  std::unique_ptr<char[]> block(new char[kBytes]);
  std::memset(block.get(), 1, kBytes);
  const uint64_t after = CurrentRssBytes();
  EXPECT_GE(after, before + kBytes * 9 / 10);
  // (the kernel updates the high-water mark lazily: a few pages may be missing)
  EXPECT_GE(PeakRssBytes(), before + kBytes * 9 / 10);
  EXPECT_GE(PhysicalMemoryBytes(), after);
  EXPECT_GE(NumCpus(), 1);
}

// A crash says which signal, in which thread, and where (the frames' module+offset), then
// dies of the signal still.
TEST(SysTest, AFatalSignalPrintsTheStackAndStillKills) {
  if (!HeapStatsKnown()) GTEST_SKIP() << "a sanitizer build: its own handlers report crashes";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        InstallCrashBacktrace();
        SetThreadName("crash-test");
        std::raise(SIGSEGV);
      },
      ::testing::KilledBySignal(SIGSEGV),
      "fatal signal 11 \\(SIGSEGV\\) in thread \"crash-test\"; the "
      "stack.*\\[0x[0-9a-f]+\\]");
}

// Pages read through a file's mapping are resident and counted as file pages; memory written
// in the heap is resident and not.
TEST(SysTest, FilePagesOfTheResidentSetAreMeasured) {
  constexpr size_t kBytes = size_t{32} << 20;
  testing::TempDir dir;
  const std::string path = JoinPath(dir.path(), "mapped.dat");
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), path, std::string(kBytes, 7)).ok());
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const ResidentSet before = CurrentResidentSet();
  ASSERT_GT(before.files, 0u);  // the program's own code at least
  EXPECT_LE(before.files, before.rss);
  void* map = ::mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  unsigned sum = 0;
  for (size_t off = 0; off < kBytes; off += 4096) sum += static_cast<const char*>(map)[off];
  EXPECT_EQ(sum, 7u * (kBytes / 4096));
  const ResidentSet mapped = CurrentResidentSet();
  EXPECT_GE(mapped.files, before.files + kBytes * 9 / 10);
  EXPECT_GE(mapped.rss, before.rss + kBytes * 9 / 10);
  ::munmap(map, kBytes);
  ::close(fd);
  const uint64_t files_after = CurrentResidentSet().files;
  std::unique_ptr<char[]> block(new char[kBytes]);
  std::memset(block.get(), 1, kBytes);
  EXPECT_LT(CurrentResidentSet().files, files_after + kBytes / 10);  // heap pages are not files
}

}  // namespace
}  // namespace ctrbox
