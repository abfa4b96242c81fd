#include "util/memory_box.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "util/sys.h"
#include "util/temp_dir.h"

namespace ctrbox {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kPhysical = 24 * kGiB;
constexpr const char* kV1Unlimited = "9223372036854771712";  // what v1 shows without a limit

// A fake /proc/self/cgroup and /sys/fs/cgroup under a temporary root.
class MemoryBoxTest : public ::testing::Test {
 protected:
  void Write(const std::string& path, const std::string& text) {
    const std::string full = dir_.path() + path;
    std::filesystem::create_directories(std::filesystem::path(full).parent_path());
    std::ofstream(full) << text;
  }
  MemoryBox Find() { return FindMemoryBox(dir_.path(), kPhysical); }

  testing::TempDir dir_;
};

TEST_F(MemoryBoxTest, WithoutACgroupTheBoxIsThePhysicalMemory) {
  const MemoryBox box = Find();
  EXPECT_EQ(box.limit, kPhysical);
  EXPECT_EQ(box.source, "physical memory");
  EXPECT_EQ(MemoryBoxPeakBytes(box), 0u);
}

TEST_F(MemoryBoxTest, V1TheLeastLimitOfTheCgroupAndItsAncestorsBinds) {
  Write("/proc/self/cgroup", "13:cpu,cpuacct:/elsewhere\n12:memory:/a/b\n1:name=systemd:/x\n");
  Write("/sys/fs/cgroup/memory/memory.limit_in_bytes", kV1Unlimited);
  Write("/sys/fs/cgroup/memory/a/memory.limit_in_bytes", std::to_string(3 * kGiB));
  Write("/sys/fs/cgroup/memory/a/memory.max_usage_in_bytes", "123456789\n");
  Write("/sys/fs/cgroup/memory/a/b/memory.limit_in_bytes", std::string(kV1Unlimited) + "\n");
  Write("/sys/fs/cgroup/memory/a/b/memory.max_usage_in_bytes", "5\n");
  const MemoryBox box = Find();
  EXPECT_EQ(box.limit, 3 * kGiB);
  EXPECT_EQ(box.source, "cgroup v1 /sys/fs/cgroup/memory/a");
  EXPECT_EQ(MemoryBoxPeakBytes(box), 123456789u);  // the binding cgroup's, not the leaf's

  // The leaf's own limit, once below its parent's, binds instead.
  Write("/sys/fs/cgroup/memory/a/b/memory.limit_in_bytes", std::to_string(kGiB));
  EXPECT_EQ(Find().limit, kGiB);
  EXPECT_EQ(Find().source, "cgroup v1 /sys/fs/cgroup/memory/a/b");
  EXPECT_EQ(MemoryBoxPeakBytes(Find()), 5u);
}

TEST_F(MemoryBoxTest, V1MemoryInAControllerListAndTheRootCgroup) {
  Write("/proc/self/cgroup", "5:blkio,memory:/\n0::/ignored\n");
  Write("/sys/fs/cgroup/memory/memory.limit_in_bytes", std::to_string(2 * kGiB));
  Write("/sys/fs/cgroup/ignored/memory.max", "1024");  // v2's: the memory controller is v1's
  const MemoryBox box = Find();
  EXPECT_EQ(box.limit, 2 * kGiB);
  EXPECT_EQ(box.source, "cgroup v1 /sys/fs/cgroup/memory");
}

TEST_F(MemoryBoxTest, V2MaxDoesNotBindANumberDoes) {
  Write("/proc/self/cgroup", "0::/user.slice/job.scope\n");
  Write("/sys/fs/cgroup/user.slice/job.scope/memory.max", "max\n");
  Write("/sys/fs/cgroup/user.slice/memory.max", std::to_string(5 * kGiB) + "\n");
  Write("/sys/fs/cgroup/user.slice/memory.peak", "777\n");
  const MemoryBox box = Find();
  EXPECT_EQ(box.limit, 5 * kGiB);
  EXPECT_EQ(box.source, "cgroup v2 /sys/fs/cgroup/user.slice");
  EXPECT_EQ(MemoryBoxPeakBytes(box), 777u);
}

TEST_F(MemoryBoxTest, LimitsAboveThePhysicalMemoryOrUnreadableDoNotBind) {
  Write("/proc/self/cgroup", "0::/big\n");
  Write("/sys/fs/cgroup/big/memory.max", std::to_string(64 * kGiB));
  EXPECT_EQ(Find().source, "physical memory");
  Write("/sys/fs/cgroup/big/memory.max", "12 GiB");
  EXPECT_EQ(Find().source, "physical memory");
  Write("/sys/fs/cgroup/big/memory.max", "");
  EXPECT_EQ(Find().source, "physical memory");
  Write("/sys/fs/cgroup/big/memory.max", "99999999999999999999");  // past 64 bits
  EXPECT_EQ(Find().source, "physical memory");
  Write("/proc/self/cgroup", "0::relative/path\n");
  EXPECT_EQ(Find().source, "physical memory");
  Write("/proc/self/cgroup", "garbage without colons\n");
  EXPECT_EQ(Find().source, "physical memory");
}

// This machine's box: whatever it is, it is found and no larger than the machine.
TEST(MemoryBoxHere, IsFoundAndWithinThePhysicalMemory) {
  const MemoryBox box = FindMemoryBox();
  EXPECT_GT(box.limit, 0u);
  EXPECT_LE(box.limit, PhysicalMemoryBytes());
  EXPECT_FALSE(box.source.empty());
}

}  // namespace
}  // namespace ctrbox
