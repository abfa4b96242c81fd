#include "util/env.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "util/temp_dir.h"

namespace ctrbox {
namespace {

class EnvTest : public ::testing::Test {
 protected:
  testing::TempDir tmp_;
  Env* env_ = Env::Posix();
  const std::string dir_ = tmp_.path();
};

TEST_F(EnvTest, WriteReadRenameDelete) {
  std::string path = JoinPath(dir_, "a/b/file.txt");
  ASSERT_TRUE(env_->CreateDirs(DirName(path)).ok());
  ASSERT_TRUE(WriteFileAtomic(env_, path, "hello world").ok());
  std::string data;
  ASSERT_TRUE(ReadFileToString(env_, path, &data).ok());
  EXPECT_EQ(data, "hello world");
  auto size = env_->GetFileSize(path);
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 11u);

  auto raf = env_->NewRandomAccessFile(path);
  ASSERT_TRUE(raf.ok());
  char buf[16];
  size_t n = 0;
  ASSERT_TRUE((*raf)->Read(6, 10, buf, &n).ok());
  EXPECT_EQ(std::string(buf, n), "world");

  std::string moved = JoinPath(dir_, "a/moved.txt");
  ASSERT_TRUE(env_->RenameFile(path, moved).ok());
  EXPECT_FALSE(env_->FileExists(path));
  auto children = env_->GetChildren(JoinPath(dir_, "a"));
  ASSERT_TRUE(children.ok());
  EXPECT_EQ(*children, (std::vector<std::string>{"b", "moved.txt"}));
  ASSERT_TRUE(env_->DeleteFile(moved).ok());
  EXPECT_EQ(env_->DeleteFile(moved).code(), StatusCode::kNotFound);
}

TEST_F(EnvTest, MissingFileIsNotFoundWithPath) {
  auto f = env_->NewSequentialFile(JoinPath(dir_, "nope"));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("nope"), std::string::npos);
}

TEST_F(EnvTest, AppendableFileAppends) {
  std::string path = JoinPath(dir_, "log");
  for (int i = 0; i < 2; ++i) {
    auto f = env_->NewAppendableFile(path);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append("line\n").ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  std::string data;
  ASSERT_TRUE(ReadFileToString(env_, path, &data).ok());
  EXPECT_EQ(data, "line\nline\n");
}

TEST(PathTest, Components) {
  EXPECT_EQ(JoinPath("a", "b"), "a/b");
  EXPECT_EQ(JoinPath("a/", "b"), "a/b");
  EXPECT_EQ(DirName("a/b/c"), "a/b");
  EXPECT_EQ(DirName("c"), ".");
  EXPECT_EQ(DirName("/c"), "/");
  EXPECT_EQ(BaseName("a/b/c/"), "c");
}

// Issue 45, item 5: `ctrbox report --out /tmp` left /tmp.tmp behind. A write that fails
// leaves no temporary file; a directory as the target is named before anything is written.
TEST_F(EnvTest, AFailedAtomicWriteLeavesNoTemporaryFile) {
  const std::string d = JoinPath(dir_, "out");
  ASSERT_TRUE(env_->CreateDirs(d).ok());
  Status s = WriteFileAtomic(env_, d, "x");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is a directory"), std::string::npos) << s.ToString();
  EXPECT_FALSE(env_->FileExists(d + ".tmp"));
}

}  // namespace
}  // namespace ctrbox
