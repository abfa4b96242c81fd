#include "util/sys.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <memory>
#include <vector>

namespace ctrbox {
namespace {

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
      testing::KilledBySignal(SIGSEGV),
      "fatal signal 11 \\(SIGSEGV\\) in thread \"crash-test\"; the "
      "stack.*\\[0x[0-9a-f]+\\]");
}

// Pages read through a file's mapping are resident and counted as file pages; memory written
// in the heap is resident and not.
TEST(SysTest, FilePagesOfTheResidentSetAreMeasured) {
  constexpr size_t kBytes = size_t{32} << 20;
  char path[] = "/tmp/ctrbox-sys-test-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::unlink(path);
  ASSERT_EQ(::ftruncate(fd, kBytes), 0);
  std::vector<char> chunk(1 << 20, 7);
  for (size_t off = 0; off < kBytes; off += chunk.size()) {
    ASSERT_EQ(::pwrite(fd, chunk.data(), chunk.size(), static_cast<off_t>(off)),
              static_cast<ssize_t>(chunk.size()));
  }
  const uint64_t files_before = CurrentFileRssBytes(), rss_before = CurrentRssBytes();
  ASSERT_GT(files_before, 0u);  // the program's own code at least
  EXPECT_LE(files_before, rss_before);
  void* map = ::mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  unsigned sum = 0;
  for (size_t off = 0; off < kBytes; off += 4096) sum += static_cast<const char*>(map)[off];
  EXPECT_EQ(sum, 7u * (kBytes / 4096));
  EXPECT_GE(CurrentFileRssBytes(), files_before + kBytes * 9 / 10);
  EXPECT_GE(CurrentRssBytes(), rss_before + kBytes * 9 / 10);
  ::munmap(map, kBytes);
  ::close(fd);
  const uint64_t files_after = CurrentFileRssBytes();
  std::unique_ptr<char[]> block(new char[kBytes]);
  std::memset(block.get(), 1, kBytes);
  EXPECT_LT(CurrentFileRssBytes(), files_after + kBytes / 10);
}

}  // namespace
}  // namespace ctrbox
