#include "util/dir_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "util/mem_env.h"
#include "util/temp_dir.h"

namespace ctrbox {
namespace {

class DirLockTest : public ::testing::Test {
 protected:
  testing::TempDir tmp_;
  Env* env_ = Env::Posix();
  const std::string dir_ = tmp_.path();
};

// A second holder in this process is refused at once, naming the role, the directory and the
// pid; the first one's release removes LOCK and the directory it created.
TEST_F(DirLockTest, ASecondHolderIsRefusedAndTheReleaseLeavesNothing) {
  const std::string m = JoinPath(dir_, "models/m");
  auto first = DirLock::Acquire(env_, m, "the model directory");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  std::string pid;
  ASSERT_TRUE(ReadFileToString(env_, JoinPath(m, "LOCK"), &pid).ok());
  EXPECT_EQ(pid, std::to_string(::getpid()) + "\n");
  auto second = DirLock::Acquire(env_, m, "the model directory");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  const std::string& why = second.status().message();
  EXPECT_NE(why.find("the model directory " + m + " is in use by another ctrbox job"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("pid " + std::to_string(::getpid())), std::string::npos) << why;
  first->reset();
  EXPECT_FALSE(env_->FileExists(m)) << "the created directory is left";
  EXPECT_TRUE(env_->IsDirectory(JoinPath(dir_, "models")));  // only the lock's own directory goes

  // A directory that held files before keeps them, and itself; only LOCK goes.
  ASSERT_TRUE(env_->CreateDirs(m).ok());
  ASSERT_TRUE(WriteFileAtomic(env_, JoinPath(m, "MANIFEST"), "x").ok());
  auto again = DirLock::Acquire(env_, m, "the model directory");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  again->reset();
  EXPECT_TRUE(env_->FileExists(JoinPath(m, "MANIFEST")));
  EXPECT_FALSE(env_->FileExists(JoinPath(m, "LOCK")));

  // A file where the directory should be.
  ASSERT_TRUE(WriteFileAtomic(env_, JoinPath(dir_, "f"), "x").ok());
  auto file = DirLock::Acquire(env_, JoinPath(dir_, "f"), "storage.ssd_dir");
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("exists and is not a directory"), std::string::npos);
}

// Another process's lock refuses this one; once that process is killed (SIGKILL: no cleanup,
// its LOCK file left behind) the directory is free at once.
TEST_F(DirLockTest, ALockOfAKilledProcessNeverBlocks) {
  const std::string d = JoinPath(dir_, "ssd");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto held = DirLock::Acquire(Env::Posix(), d, "storage.ssd_dir");
    const char c = held.ok() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    ::pause();  // until killed
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  auto refused = DirLock::Acquire(env_, d, "storage.ssd_dir");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("pid " + std::to_string(child) + " holds"),
            std::string::npos)
      << refused.status().message();
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(env_->FileExists(JoinPath(d, "LOCK")));  // left by the killed holder
  auto taken = DirLock::Acquire(env_, d, "storage.ssd_dir");
  EXPECT_TRUE(taken.ok()) << taken.status().ToString();
  ::close(ready[0]);
  ::close(ready[1]);
}

// DirLocks holds each directory once however it is spelled; MemEnv locks alike.
TEST_F(DirLockTest, AJobHoldsEachDirectoryOnceAndMemEnvLocksAlike) {
  DirLocks held;
  const std::string m = JoinPath(dir_, "m");
  ASSERT_TRUE(held.Add(env_, m, "the model directory").ok());
  EXPECT_TRUE(held.Add(env_, m + "/", "ckpt.dir").ok());
  EXPECT_TRUE(held.Add(env_, dir_ + "/./m", "storage.ssd_dir").ok());
  EXPECT_TRUE(held.Add(env_, "", "ckpt.dir").ok());
  EXPECT_FALSE(DirLock::Acquire(env_, m, "the model directory").ok());

  MemEnv mem;
  auto a = DirLock::Acquire(&mem, "/m", "the model directory");
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(DirLock::Acquire(&mem, "/m", "the model directory").ok());
  a->reset();
  EXPECT_TRUE(DirLock::Acquire(&mem, "/m", "the model directory").ok());
}

}  // namespace
}  // namespace ctrbox
