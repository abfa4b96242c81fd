// The parts of a stream job (jobs/follower.h, docs/routine.md): which ready partitions
// the follower takes, skips or passes over (the clock, a gap), the runs it skips, and a
// partition's files checked against its done file and against what was read.
#include "jobs/follower.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "jobs/stream_state.h"
#include "util/temp_dir.h"

namespace ctrbox {
namespace {

using namespace stream_parts;  // NOLINT: the parts under test
using testing::TempDir;

class FollowerTest : public ::testing::Test {
 protected:
  FollowerTest() : layout_(*PartitionLayout::Parse("{day}/{hour}")) {
    o_.root = dir_.path();
    o_.max_wait_seconds = 0;  // a late partition is given up at the first look
    o_.on_late = LateRule::kSkip;
  }
  // Partition `name` with one data file, and its done file unless `done` is false.
  void Land(const std::string& name, bool done = true) {
    const std::string d = dir_.File(name);
    ASSERT_TRUE(Env::Posix()->CreateDirs(d).ok());
    std::ofstream(d + "/part-0") << "1\t2\n";
    if (done) std::ofstream(d + "/_SUCCESS");
  }
  int64_t O(const std::string& name) const { return *layout_.Ordinal(name); }

  TempDir dir_;
  StreamOptions o_;
  const PartitionLayout layout_;
};

// A mistyped or clock-skewed partition far in the future makes no partition late: the job
// waits for the real next one instead of skipping to the future one.
TEST_F(FollowerTest, APartitionFromTheFutureMakesNoPartitionLate) {
  Land("20261101/00");
  Land("20261101/01");
  Land("20991231/23");
  Follower f(Env::Posix(), o_, layout_, nullptr);
  auto first = f.FirstReady();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(**first, O("20261101/00"));
  auto t = f.Poll(O("20261101/02"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t, Follower::Take::kWait);
  // Named the next partition itself, it is not taken either.
  t = f.Poll(O("20991231/23"));
  EXPECT_EQ(*t, Follower::Take::kWait);
  // With a wide enough margin and no gap rule, it is an ordinary later partition.
  o_.max_ahead_seconds = 1e10;
  o_.max_gap = 0;
  t = f.Poll(O("20261101/02"));
  EXPECT_EQ(*t, Follower::Take::kSkip);
  EXPECT_EQ(f.skip_to(), O("20991231/23"));
}

TEST_F(FollowerTest, APartitionPastTheGapMakesNoPartitionLate) {
  Land("20201101/00");
  Land("20201201/00");  // 720 partitions later
  o_.max_gap = 100;
  Follower f(Env::Posix(), o_, layout_, nullptr);
  auto t = f.Poll(O("20201101/01"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t, Follower::Take::kWait);
  o_.max_gap = 1000;
  t = f.Poll(O("20201101/01"));
  EXPECT_EQ(*t, Follower::Take::kSkip);
  EXPECT_EQ(f.skip_to(), O("20201201/00"));
}

// A run of missing partitions is skipped at once, up to the first ready one, and the state
// keeps the runs it skipped (merged, at most kSkippedRuns) through its JSON.
TEST_F(FollowerTest, ARunOfMissingPartitionsIsSkippedAtOnce) {
  Land("20201101/00");
  Land("20201101/01", false);  // no done file
  Land("20201101/05");
  Follower f(Env::Posix(), o_, layout_, nullptr);
  auto t = f.Poll(O("20201101/01"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(*t, Follower::Take::kSkip);
  EXPECT_EQ(f.skip_to(), O("20201101/05"));
  EXPECT_EQ(*f.Poll(O("20201101/05")), Follower::Take::kTrain);

  StreamState s;
  s.Skip(10, 13);
  s.Skip(14, 14);  // adjoins: one run
  s.Skip(20, 20);
  EXPECT_EQ(s.skipped, 6u);
  ASSERT_EQ(s.skipped_runs.size(), 2u);
  EXPECT_EQ(s.skipped_runs[0], std::make_pair(int64_t{10}, int64_t{14}));
  for (int64_t i = 0; i < 100; ++i) s.Skip(100 + 2 * i, 100 + 2 * i);
  EXPECT_EQ(s.skipped_runs.size(), StreamState::kSkippedRuns);
  EXPECT_EQ(s.skipped_runs.back(), std::make_pair(int64_t{298}, int64_t{298}));
  auto back = StreamState::FromJson(s.ToJson(), "test");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->skipped_runs, s.skipped_runs);
  EXPECT_EQ(back->skipped, s.skipped);
}

// A skipped partition that lands later is named once (never trained); so is a directory the
// layout cannot read.
TEST_F(FollowerTest, ASkippedPartitionThatLandsAndAnUnreadableNameAreSaidOnce) {
  Land("20201101/00");
  Land("20201101/01");  // skipped before it landed
  ASSERT_TRUE(Env::Posix()->CreateDirs(dir_.File("20201101/5")).ok());
  const std::vector<std::pair<int64_t, int64_t>> skipped = {{O("20201101/01"), O("20201101/01")}};
  Follower f(Env::Posix(), o_, layout_, nullptr, &skipped);
  // (The log goes to standard output or error, as the process's logger is set up.)
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(*f.Poll(O("20201101/02")), Follower::Take::kWait);
  std::string said = ::testing::internal::GetCapturedStderr();
  said += ::testing::internal::GetCapturedStdout();
  const std::string landed =
      "partition 20201101/01 is ready now, after the stream skipped it: it is not trained";
  ASSERT_NE(said.find(landed), std::string::npos) << said;
  EXPECT_EQ(said.find(landed), said.rfind(landed)) << said;
  const std::string odd = dir_.File("20201101/5") + ": not a partition of stream.layout";
  ASSERT_NE(said.find(odd), std::string::npos) << said;
  EXPECT_EQ(said.find(odd), said.rfind(odd)) << said;
}

TEST_F(FollowerTest, AFileChangedAfterTheDoneFileIsRefused) {
  Land("20201101/00");
  const std::string dir = dir_.File("20201101/00");
  auto p = TakePartition(Env::Posix(), layout_, O("20201101/00"), dir, "_SUCCESS");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->files.size(), 1u);
  EXPECT_TRUE(CheckUnchanged(Env::Posix(), *p).ok());
  // Changed while the job reads it: nothing of the partition may be committed.
  std::ofstream(dir + "/part-0", std::ios::app) << "0\t3\n";
  Status s = CheckUnchanged(Env::Posix(), *p);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(
      s.ToString().find(dir + "/part-0 changed while it was read (4 bytes when taken, 8 now)"),
      std::string::npos)
      << s.ToString();
  // Changed after the done file, before the job took it: not the partition marked done.
  namespace fs = std::filesystem;
  fs::last_write_time(dir + "/part-0",
                      fs::last_write_time(dir + "/_SUCCESS") + std::chrono::seconds(2));
  p = TakePartition(Env::Posix(), layout_, O("20201101/00"), dir, "_SUCCESS");
  EXPECT_EQ(p.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(p.status().ToString().find("part-0 changed after its done file"), std::string::npos)
      << p.status().ToString();
  // Written again, its done file last: taken.
  std::ofstream(dir + "/_SUCCESS");
  fs::last_write_time(dir + "/_SUCCESS",
                      fs::last_write_time(dir + "/part-0") + std::chrono::seconds(1));
  EXPECT_TRUE(TakePartition(Env::Posix(), layout_, O("20201101/00"), dir, "_SUCCESS").ok());
}

}  // namespace
}  // namespace ctrbox
