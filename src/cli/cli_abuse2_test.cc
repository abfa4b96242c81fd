// What a new user's second round of abuse found (issue 45): one regression test per class.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <string>
#include <thread>

#include "cli/cli_test_util.h"

namespace ctrbox {
namespace {

using testing::CliTest;
using testing::Result;

bool WaitForFile(const std::string& path, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (Env::Posix()->FileExists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Item 1: two jobs on one model directory both exited 0 (one model lost); two on one SSD
// directory broke the first with a false corruption. Every directory a job writes is held
// for the job's life: a second job is refused at once naming the directory and the holder's
// pid, and touches nothing of the first's; a killed holder's lock never blocks.
TEST_F(CliTest, TwoJobsOnOneDirectoryTheSecondIsRefusedAndAKilledHoldersLockNeverBlocks) {
  ASSERT_EQ(Run(Ctrbox("gen --rows 3000 --out " + Path("g.tsv"))).exit_code, 0);
  const std::string tag = std::to_string(::getpid() % 1000 + 2000);  // an unlikely sleep time
  const std::string dirs = " --model-dir " + Path("m") + " --set storage.ssd_dir=" + Path("ssd") +
                           " --set storage.memory_budget=64MB --set ckpt.dir=" + Path("ck");
  // Job A: its data command stalls after the rows, so it holds its directories until killed.
  Result a = Run(
      "bash -c '" +
      Ctrbox("train --set \"data.command=cat " + Path("g.tsv") + "; sleep " + tag + "\"" + dirs) +
      " >/dev/null 2>" + Path("a.log") + " & echo $!'");
  ASSERT_EQ(a.exit_code, 0);
  const std::string pid(Trim(a.out));
  ASSERT_TRUE(WaitForFile(Path("ssd/LOCK"), 60)) << "job A did not start";
  ASSERT_TRUE(WaitForFile(Path("m/LOCK"), 1) && WaitForFile(Path("ck/LOCK"), 1));

  const std::string data = " --data " + Path("g.tsv");
  Result same_model = Run(Ctrbox("train" + data + " --model-dir " + Path("m")));
  EXPECT_EQ(same_model.exit_code, 1);
  EXPECT_NE(same_model.err.find("the model directory " + Path("m") +
                                " is in use by another ctrbox job (pid " + pid + " holds"),
            std::string::npos)
      << same_model.err;
  Result same_ssd =
      Run(Ctrbox("train" + data + " --model-dir " + Path("m2") +
                 " --set storage.ssd_dir=" + Path("ssd") + " --set storage.memory_budget=64MB"));
  EXPECT_EQ(same_ssd.exit_code, 1);
  EXPECT_NE(same_ssd.err.find("storage.ssd_dir " + Path("ssd") + " is in use"), std::string::npos)
      << same_ssd.err;
  Result same_ckpt =
      Run(Ctrbox("train" + data + " --model-dir " + Path("m3") + " --set ckpt.dir=" + Path("ck")));
  EXPECT_EQ(same_ckpt.exit_code, 1);
  EXPECT_NE(same_ckpt.err.find("ckpt.dir " + Path("ck") + " is in use"), std::string::npos)
      << same_ckpt.err;
  // The refused jobs left the holder's directories alone, and made none of their own.
  EXPECT_EQ(::kill(std::stoi(pid), 0), 0) << "job A stopped";
  EXPECT_TRUE(Env::Posix()->FileExists(Path("ssd/LOCK")));
  EXPECT_FALSE(Env::Posix()->FileExists(Path("m2")));
  EXPECT_FALSE(Env::Posix()->FileExists(Path("m3")));

  // Killed with SIGKILL (no cleanup: its LOCK files stay), A blocks nobody.
  ::kill(std::stoi(pid), SIGKILL);
  (void)std::system(("pkill -f \"^sleep " + tag + "$\"").c_str());
  for (int i = 0; i < 500 && ::kill(std::stoi(pid), 0) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(Env::Posix()->FileExists(Path("m/LOCK")));
  Result after = Run(Ctrbox("train --fresh" + data + dirs));
  EXPECT_EQ(after.exit_code, 0) << after.err;
  EXPECT_FALSE(Env::Posix()->FileExists(Path("m/LOCK")));  // released at the end

  // convert --out likewise: a second conversion into a held directory is refused.
  ASSERT_EQ(::mkdir(Path("s").c_str(), 0700), 0);
  Result c = Run("bash -c '" +
                 Ctrbox("convert --set \"data.command=cat " + Path("g.tsv") + "; sleep " + tag +
                        "\" --out " + Path("s")) +
                 " >/dev/null 2>/dev/null & echo $!'");
  const std::string cpid(Trim(c.out));
  ASSERT_TRUE(WaitForFile(Path("s/LOCK"), 60));
  Result second = Run(Ctrbox("convert" + data + " --out " + Path("s")));
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find("convert --out " + Path("s") + " is in use"), std::string::npos)
      << second.err;
  ::kill(std::stoi(cpid), SIGKILL);
  (void)std::system(("pkill -f \"^sleep " + tag + "$\"").c_str());
}

// Item 3: `train --eval-data typo.tsv` trained, saved, then exited 1 with no report. The
// held-out files are opened and their first records read before the first example is trained.
TEST_F(CliTest, HeldOutDataIsCheckedBeforeTraining) {
  ASSERT_EQ(Run(Ctrbox("gen --rows 3000 --out " + Path("g.tsv"))).exit_code, 0);
  Result typo = Run(Ctrbox("train --data " + Path("g.tsv") + " --eval-data " + Path("typo.tsv") +
                           " --model-dir " + Path("m")));
  EXPECT_EQ(typo.exit_code, 1);
  EXPECT_NE(typo.err.find("typo.tsv"), std::string::npos) << typo.err;
  EXPECT_EQ(typo.err.find("pass 0"), std::string::npos) << "it trained first: " << typo.err;
  EXPECT_FALSE(Env::Posix()->FileExists(Path("m")));
  // Held-out rows of another layout (a libsvm file read as criteo): named before training.
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("other.tsv"), "1 3:1 7:1\n0 2:1\n").ok());
  Result other = Run(Ctrbox("train --data " + Path("g.tsv") + " --eval-data " + Path("other.tsv") +
                            " --model-dir " + Path("m")));
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.err.find("other.tsv"), std::string::npos) << other.err;
  EXPECT_EQ(other.err.find("pass 0"), std::string::npos) << "it trained first: " << other.err;
}

}  // namespace
}  // namespace ctrbox
