#include "util/disk_probe.h"

#include <gtest/gtest.h>

#include <string>

#include "util/env.h"
#include "util/temp_dir.h"

namespace ctrbox {
namespace {

using testing::TempDir;

TEST(DiskProbeTest, MeasuresTheFilesOrSaysWhyNot) {
  TempDir dir;
  const std::string a = dir.File("a"), b = dir.File("b"), tiny = dir.File("tiny");
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), a, std::string(3 << 20, 'x')).ok());
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), b, std::string(40000, 'y')).ok());
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), tiny, "z").ok());
  auto c = ProbeDisk({a, b, tiny}, 0.2);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  if (!c->measured) {  // (a file system without O_DIRECT: tmpfs)
    EXPECT_NE(c->why_not.find("O_DIRECT"), std::string::npos) << c->why_not;
    GTEST_SKIP() << "not measured here: " << c->why_not;
  }
  EXPECT_TRUE(c->why_not.empty());
  EXPECT_GT(c->random_reads_qd1_per_s, 0);
  EXPECT_GT(c->random_reads_qd16_per_s, 0);
  EXPECT_GT(c->seq_mb_per_s, 0);
  EXPECT_GT(c->reads, 2u);
  EXPECT_GT(c->seconds, 0.1);
  EXPECT_LT(c->seconds, 5.0);
}

TEST(DiskProbeTest, NoFileToReadIsSaidAndAMissingFileNamed) {
  TempDir dir;
  const std::string tiny = dir.File("tiny");
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), tiny, "z").ok());
  auto none = ProbeDisk({tiny}, 0.1);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->measured);
  EXPECT_FALSE(none->why_not.empty());
  auto missing = ProbeDisk({dir.File("nope")}, 0.1);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
}

}  // namespace
}  // namespace ctrbox
