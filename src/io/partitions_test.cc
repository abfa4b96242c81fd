#include "io/partitions.h"

#include <gtest/gtest.h>

#include "util/temp_dir.h"

namespace ctrbox {
namespace {

TEST(PartitionLayoutTest, NamesAndOrdinalsRoundTripAcrossDaysMonthsAndYears) {
  auto l = PartitionLayout::Parse("{day}/{hour}");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  const std::optional<int64_t> first = l->Ordinal("20261231/22");
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(l->Name(*first), "20261231/22");
  EXPECT_EQ(l->Name(*first + 1), "20261231/23");
  EXPECT_EQ(l->Name(*first + 2), "20270101/00");            // a new year
  EXPECT_EQ(l->Name(*first + 2 + 24 * 59), "20270301/00");  // 2027 is no leap year
  EXPECT_EQ(*l->Ordinal("19700101/00"), 0);
  // Not partitions: a day that does not exist, hour 24, other text.
  EXPECT_FALSE(l->Ordinal("20270229/00").has_value());
  EXPECT_FALSE(l->Ordinal("20261101/24").has_value());
  EXPECT_FALSE(l->Ordinal("20261101/5").has_value());
  EXPECT_FALSE(l->Ordinal("20261101/05x").has_value());

  auto days = PartitionLayout::Parse("dt={day}");
  ASSERT_TRUE(days.ok());
  EXPECT_EQ(days->Name(*days->Ordinal("dt=20240228") + 1), "dt=20240229");  // a leap year
  auto index = PartitionLayout::Parse("part-{index}");
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(*index->Ordinal("part-17"), 17);
  EXPECT_EQ(index->Name(18), "part-18");
}

TEST(PartitionLayoutTest, BadLayoutsNameTheKey) {
  for (const char* bad : {"{hour}", "{day}/{day}", "{index}/{hour}", "plain", "{day}/{hours}",
                          "/{day}", "{day}//{hour}", "{day}/../{hour}", "", "{index}5"}) {
    auto l = PartitionLayout::Parse(bad);
    ASSERT_FALSE(l.ok()) << bad;
    EXPECT_NE(l.status().message().find("stream.layout"), std::string::npos) << bad;
  }
}

TEST(PartitionsTest, ReadyPartitionsHaveTheirDoneFileAndComeInOrder) {
  testing::TempDir dir;
  Env* env = Env::Posix();
  auto l = PartitionLayout::Parse("{day}/{hour}");
  ASSERT_TRUE(l.ok());
  auto make = [&](const std::string& name, bool done) {
    const std::string d = dir.path() + "/" + name;
    ASSERT_TRUE(env->CreateDirs(d).ok());
    ASSERT_TRUE(WriteFileAtomic(env, d + "/part-0", "x").ok());
    ASSERT_TRUE(WriteFileAtomic(env, d + "/.part-1.tmp", "x").ok());
    if (done) {
      ASSERT_TRUE(WriteFileAtomic(env, d + "/_SUCCESS", "").ok());
    }
  };
  make("20261102/00", true);
  make("20261101/23", true);
  make("20261101/22", false);  // still being written
  make("20261101/05", true);
  ASSERT_TRUE(env->CreateDirs(dir.path() + "/20261101/notes").ok());
  ASSERT_TRUE(env->CreateDirs(dir.path() + "/tmp").ok());
  auto ready = ReadyPartitions(env, dir.path(), *l, "_SUCCESS", *l->Ordinal("20261101/05"));
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  ASSERT_EQ(ready->size(), 2u);
  EXPECT_EQ(l->Name((*ready)[0]), "20261101/23");
  EXPECT_EQ(l->Name((*ready)[1]), "20261102/00");
  auto files = PartitionFiles(env, dir.path() + "/20261101/23", "_SUCCESS");
  ASSERT_TRUE(files.ok());
  ASSERT_EQ(files->size(), 1u);  // no done file, no hidden temporary
  EXPECT_EQ((*files)[0], dir.path() + "/20261101/23/part-0");
}

}  // namespace
}  // namespace ctrbox
