// `ctrbox train` under mpirun (docs/distributed.md): the MPI transport against the threads'
// one, one model directory that eval reads, and the faults that must stop every rank: a
// rank's bad input, and a rank killed with SIGKILL. Skipped, saying why, without mpirun or an
// MPI build.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "ckpt/ranks_checkpoint.h"
#include "ckpt/serving_files.h"
#include "cli/cli_test_util.h"

namespace ctrbox {
namespace {

using testing::CliTest;
using testing::Result;

class MpiTrainTest : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
#ifndef CTRBOX_HAVE_MPI
    GTEST_SKIP() << "ctrbox was built without MPI (Debian libopenmpi-dev; scripts/setup)";
#endif
    if (std::system("command -v mpirun >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "no mpirun on PATH (Debian openmpi-bin; scripts/setup)";
    }
    // As root (CI), OpenMPI refuses to start without these.
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }

  // Four input files of `rows` rows each.
  std::string Files(uint64_t rows) {
    std::string data;
    for (int f = 0; f < 4; ++f) {
      const std::string path = Path("part" + std::to_string(f) + ".tsv");
      Result g = Run(Ctrbox("gen --rows " + std::to_string(rows) + " --seed " +
                            std::to_string(f + 1) + " --out " + path));
      EXPECT_EQ(g.exit_code, 0) << g.err;
      data += " --data " + path;
    }
    return data;
  }
  // Waits up to 60 s for the job `pid` to end (then kills the processes matching `ranks`);
  // returns the seconds it took and sets *status.
  static double WaitForExit(pid_t pid, const std::string& ranks, int* status) {
    const auto start = std::chrono::steady_clock::now();
    pid_t done = 0;
    while ((done = waitpid(pid, status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (done == 0) {
      (void)std::system(("pkill -9 -f " + ranks).c_str());
      waitpid(pid, status, 0);
    }
    return seconds;
  }
  // Runs `cmd` through sh in the background; its pid.
  pid_t Background(const std::string& cmd) {
    pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    return pid;
  }
  // The checkpoint id the ranks committed together in `ckpt` (its RANKS file; 0: none yet).
  uint64_t RanksCommitted(const std::string& ckpt) {
    std::string text;
    if (!ReadFileToString(Env::Posix(), ckpt + "/RANKS", &text).ok()) return 0;
    auto j = nlohmann::json::parse(text.substr(0, text.rfind("#checksum")), nullptr, false);
    return j.is_object() ? j.value("id", uint64_t{0}) : 0;
  }
  std::string Mpirun(int n) {
    return "mpirun -np " + std::to_string(n) + " --oversubscribe " + ctrbox_;
  }
};

constexpr const char* kJob =
    " --set train.batch_size=512 --set pipeline.pass_examples=4096 --set model.mlp=64,32";

TEST_F(MpiTrainTest, MpiRanksTrainTheModelTheThreadRanksTrainAndEvalReadsIt) {
  const std::string data = Files(3000);
  Result mpi = Run(Mpirun(2) + " train" + data + kJob + " --model-dir " + Path("mpi"));
  ASSERT_EQ(mpi.exit_code, 0) << mpi.err;
  // Only rank 0 prints the report.
  ASSERT_TRUE(mpi.last_json.is_object()) << mpi.out;
  EXPECT_EQ(mpi.out.find("\"command\":\"train\""), mpi.out.rfind("\"command\":\"train\""));
  EXPECT_EQ(mpi.last_json["ranks"], 2);
  EXPECT_EQ(mpi.last_json["examples"], 12000u);
  EXPECT_EQ(mpi.last_json["batch_size"], 512u);
  EXPECT_EQ(mpi.last_json["per_rank"].size(), 2u);
  EXPECT_GT(mpi.last_json["exchange"]["bytes_sent"].get<uint64_t>(), 0u);

  Result local =
      Run(Ctrbox("train" + data + kJob + " --local-ranks 2 --model-dir " + Path("local")));
  ASSERT_EQ(local.exit_code, 0) << local.err;
  EXPECT_EQ(local.last_json["digest"], mpi.last_json["digest"]);

  // Shards over SSD files with a small budget: passes sized by memory, the cuts agreed over
  // MPI, train the same model (docs/distributed.md, "Pass sizing").
  Result tiered = Run(Mpirun(2) + " train" + data + kJob + " --model-dir " + Path("tiered") +
                      " --set storage.ssd_dir=" + Path("ssd") + " --set storage.memory_budget=1MB");
  ASSERT_EQ(tiered.exit_code, 0) << tiered.err;
  EXPECT_EQ(tiered.last_json["digest"], mpi.last_json["digest"]);
  EXPECT_GT(tiered.last_json["pass_sizing"]["closed_by_keys"].get<uint64_t>(), 0u)
      << tiered.last_json["pass_sizing"].dump();

  // The GPU step on every rank (its host emulation) with the exchange over MPI: one GPU per
  // rank sums as the CPU does, so the CPU ranks' model bit for bit (docs/distributed.md,
  // "GPUs across ranks").
  Result gpu = Run(Mpirun(2) + " train" + data + kJob + " --model-dir " + Path("gpu") +
                   " --set device=gpu --set gpu.emulate=true");
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  EXPECT_EQ(gpu.last_json["digest"], mpi.last_json["digest"]);
  EXPECT_NE(gpu.last_json["device"].get<std::string>().find("emulation"), std::string::npos)
      << gpu.last_json["device"];

  Result test = Run(Ctrbox("gen --rows 2000 --seed 9 --out " + Path("test.tsv")));
  ASSERT_EQ(test.exit_code, 0) << test.err;
  Result eval = Run(Ctrbox("eval --model-dir " + Path("mpi") + " --data " + Path("test.tsv")));
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  EXPECT_EQ(eval.last_json["examples"], 2000u);
  Result inspect = Run(Ctrbox("inspect --model-dir " + Path("mpi")));
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_EQ(inspect.last_json["digest"], mpi.last_json["digest"]);
}

// A bad file read by rank 1 only: every rank stops, the error names the rank and the file,
// and nothing is saved.
// train.deterministic on generated data (docs/distributed.md, "The same model on any number of
// ranks"): 2 and 4 processes under mpirun train the one-process digest with Adagrad and Adam,
// on the CPU, with one (emulated) GPU per rank and with three.
TEST_F(MpiTrainTest, DeterministicRanksTrainTheOneProcessModel) {
  const std::string job =
      " train --set data.gen.rows=8500 --set data.gen.test_rows=1000 --set train.batch_size=1536"
      " --set pipeline.pass_examples=3072 --set model.mlp=64,32 --set train.deterministic=true"
      " --fresh --model-dir ";  // (12 sum blocks: 2, 3 or 4 ranks)
  Result one = Run(Ctrbox(job + Path("one")));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  for (int n : {2, 3, 4}) {
    Result mpi = Run(Mpirun(n) + job + Path("mpi" + std::to_string(n)));
    ASSERT_EQ(mpi.exit_code, 0) << mpi.err;
    EXPECT_EQ(mpi.last_json["digest"], one.last_json["digest"]) << n << " ranks";
  }
  Result gpu = Run(Mpirun(3) + job + Path("gpu3") + " --set device=gpu --set gpu.emulate=true");
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  EXPECT_EQ(gpu.last_json["digest"], one.last_json["digest"]) << "3 GPU ranks";
  Result gpus = Run(Mpirun(2) + job + Path("gpu2x3") +
                    " --set device=gpu --set gpu.emulate=true --set gpu.count=3");
  ASSERT_EQ(gpus.exit_code, 0) << gpus.err;
  EXPECT_EQ(gpus.last_json["digest"], one.last_json["digest"]) << "2 ranks of 3 GPUs";
  // Files too: every rank reads them all and keeps its share of each global minibatch.
  const std::string files = " train" + Files(1500) +
                            " --set train.batch_size=1536 --set pipeline.pass_examples=3072"
                            " --set model.mlp=64,32 --set train.deterministic=true --model-dir ";
  Result one_files = Run(Ctrbox(files + Path("files1")));
  ASSERT_EQ(one_files.exit_code, 0) << one_files.err;
  for (int n : {2, 3}) {
    Result mpi = Run(Mpirun(n) + files + Path("files" + std::to_string(n)));
    ASSERT_EQ(mpi.exit_code, 0) << mpi.err;
    EXPECT_EQ(mpi.last_json["digest"], one_files.last_json["digest"]) << n << " ranks";
    EXPECT_EQ(mpi.last_json["examples"], 6000u) << n << " ranks";
    EXPECT_NE(mpi.err.find("every rank reads all 4 files"), std::string::npos) << mpi.err;
  }
}

TEST_F(MpiTrainTest, ARanksBadInputStopsEveryRank) {
  std::string data = Files(1000);
  std::string bad;
  for (int i = 0; i < 200; ++i) bad += "not a criteo line\n";
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("part1.tsv"), bad).ok());
  const auto start = std::chrono::steady_clock::now();
  Result r = Run(Mpirun(2) + " train" + data + kJob + " --model-dir " + Path("m"));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("rank 1 of 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("part1.tsv"), std::string::npos) << r.err;
  EXPECT_LT(seconds, 60);
  EXPECT_FALSE(Env::Posix()->FileExists(Path("m/MANIFEST")));
}

// Issue 45, item 2: a rank started with another --set trained with rc 0 (the MANIFEST said
// one thing, rank 1 trained another). The ranks compare their jobs before reading anything:
// every difference is named with each rank's value, and nothing is written.
TEST_F(MpiTrainTest, RanksStartedWithDifferentJobsStopBeforeReadingAnything) {
  std::string data = Files(1000);
  const std::string one =
      "-np 1 --oversubscribe " + ctrbox_ + " train" + data + kJob + " --model-dir " + Path("m");
  Result r = Run("mpirun " + one + " : " + one + " --set model.wide=true --set train.epochs=2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("the ranks were started with different jobs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("model.wide (rank 0: not set, rank 1: true)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("train.epochs (rank 0: not set, rank 1: 2)"), std::string::npos) << r.err;
  EXPECT_FALSE(Env::Posix()->FileExists(Path("m/MANIFEST")));
  // Another embedding_dim on rank 1 failed only in an exchange, as an internal error.
  Result dim = Run("mpirun " + one + " --set model.embedding_dim=8 : " + one);
  EXPECT_NE(dim.exit_code, 0);
  EXPECT_NE(dim.err.find("model.embedding_dim (rank 0: 8, rank 1: not set)"), std::string::npos)
      << dim.err;
  EXPECT_EQ(dim.err.find("internal"), std::string::npos) << dim.err;
}

// Issue 45, item 2: `train --resume` of one process on a 2-rank checkpoint said "no checkpoint
// yet" and retrained from scratch beside RANKS. It is refused, saying how to resume it.
TEST_F(MpiTrainTest, OneProcessDoesNotIgnoreACheckpointOfRanks) {
  std::string data = Files(1000);
  const std::string job = " train" + data + kJob + " --set ckpt.dir=" + Path("ck");
  Result two = Run(Mpirun(2) + job + " --model-dir " + Path("two"));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  for (const char* how : {" --resume", "", " --resume --local-ranks 1"}) {
    SCOPED_TRACE(how);
    Result one = Run(Ctrbox(job + how + " --model-dir " + Path("one")));
    EXPECT_EQ(one.exit_code, 1);
    EXPECT_NE(one.err.find("holds ckpt-"), std::string::npos) << one.err;
    EXPECT_NE(one.err.find("of a job of 2 ranks (its RANKS file)"), std::string::npos) << one.err;
    EXPECT_NE(one.err.find("--local-ranks 2"), std::string::npos) << one.err;
    EXPECT_FALSE(Env::Posix()->FileExists(Path("one/MANIFEST")));
  }
  Result again = Run(Ctrbox(job + " --resume --local-ranks 2 --model-dir " + Path("one")));
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

// kill -9 of one rank mid-run: mpirun ends the others and exits non-zero within the stated
// 30 s (measured: about a second) instead of leaving them waiting in an exchange; --resume
// then continues from the checkpoint the ranks committed together and ends with the
// uninterrupted run's model, bit for bit.
TEST_F(MpiTrainTest, ARankKilledMidRunEndsTheJobAndResumeEndsWithTheUninterruptedModel) {
  const std::string data = Files(30000);
  const std::string ckpt = " --set ckpt.dir=" + Path("ckpt") + " --set ckpt.every_passes=2";
  const std::string marker = Path("killme");
  const std::string job = Mpirun(2) + " train" + data + kJob + ckpt + " --model-dir " + marker;
  const pid_t pid = Background(job + " >" + Path("out.txt") + " 2>" + Path("err.txt"));
  ASSERT_GE(pid, 0);
  // Wait until the ranks committed their second checkpoint together (a delta on the first,
  // a base), then kill one rank.
  auto committed = [&] { return RanksCommitted(Path("ckpt")); };
  for (int i = 0; i < 2400 && committed() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(committed(), 2u) << "no second checkpoint of the ranks";
  // The newest process whose command line starts with the binary: a rank (not mpirun, not
  // the shells, whose command lines start otherwise).
  const std::string ranks = "'^" + ctrbox_ + " train.*" + marker + "'";
  ASSERT_EQ(std::system(("pkill -9 -f -n " + ranks).c_str()), 0);
  int status = 0;
  const double seconds = WaitForExit(pid, ranks, &status);
  RecordProperty("seconds_to_stop", std::to_string(seconds));
  EXPECT_LT(seconds, 30) << "the other rank kept waiting";
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  ASSERT_FALSE(Env::Posix()->FileExists(marker + "/MANIFEST")) << "the killed job finished";

  Result resumed = Run(job + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resuming from ckpt-"), std::string::npos) << resumed.err;
  Result whole = Run(Mpirun(2) + " train" + data + kJob + " --model-dir " + Path("whole"));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_EQ(resumed.last_json["digest"], whole.last_json["digest"]);
  EXPECT_EQ(resumed.last_json["job_examples"], 120000u);
}

// A stream job under mpirun (docs/routine.md, "Ranks"): a rank killed mid-stream ends the job;
// the same command continues at the first partition the ranks had not committed, and the
// model and every published version equal an uninterrupted run's, which equals the thread
// ranks' run bit for bit.
TEST_F(MpiTrainTest, AStreamOfRanksKilledMidStreamContinuesAsOneRun) {
  Result g = Run(Ctrbox("gen --partitions 6 --rows 6000 --out " + Path("root")));
  ASSERT_EQ(g.exit_code, 0) << g.err;
  auto job = [&](const std::string& name) {
    return " train --set stream.root=" + Path("root") +
           " --set stream.until=20261101/05 --set stream.poll_seconds=0.05 --set ckpt.dir=" +
           Path("ckpt_" + name) + " --set serving.dir=" + Path("serving_" + name) +
           " --set table.ttl_partitions=2" + kJob + " --model-dir " + Path(name);
  };
  const pid_t pid =
      Background(Mpirun(2) + job("killme") + " >" + Path("out.txt") + " 2>" + Path("err.txt"));
  ASSERT_GE(pid, 0);
  auto committed = [&] { return RanksCommitted(Path("ckpt_killme")); };
  for (int i = 0; i < 3000 && committed() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GE(committed(), 2u) << "no second partition committed by the ranks";
  const std::string ranks = "'^" + ctrbox_ + " train.*" + Path("killme") + "'";
  const bool killed = std::system(("pkill -9 -f -n " + ranks).c_str()) == 0;
  int status = 0;
  WaitForExit(pid, ranks, &status);
  RecordProperty("killed_after_commits", std::to_string(committed()));

  Result again = Run(Mpirun(2) + job("killme"));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  if (killed && committed() < 6) {
    EXPECT_LT(again.last_json["stream"]["partitions_trained_now"].get<int>(), 6);
  }
  Result whole = Run(Mpirun(2) + job("whole"));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_EQ(again.last_json["digest"], whole.last_json["digest"]);
  EXPECT_EQ(whole.last_json["examples"], 36000);
  Result threads = Run(Ctrbox(job("threads") + " --local-ranks 2"));
  ASSERT_EQ(threads.exit_code, 0) << threads.err;
  EXPECT_EQ(threads.last_json["digest"], whole.last_json["digest"]);
  auto a = ReadServingVersions(Env::Posix(), Path("serving_killme"));
  auto b = ReadServingVersions(Env::Posix(), Path("serving_whole"));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), 6u);
  ASSERT_EQ(b->size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ((*a)[i].checksum, (*b)[i].checksum) << "version " << i + 1;
    EXPECT_TRUE(VerifyServingVersion(Env::Posix(), Path("serving_killme"), (*a)[i]).ok());
  }
}

// --resume on another number of ranks under mpirun (docs/distributed.md, "Resuming files on
// another number of ranks"): 3 ranks take up what the 2 ranks had left of their files, the
// planning exchanged over MPI, and every example is trained once (the exact check, on every
// key's counts, is DistributedTrainTest's).
TEST_F(MpiTrainTest, ResumeOnAnotherNumberOfRanksTakesUpTheFilesLeft) {
  const std::string data = Files(3000);
  const std::string job = " train" + data + kJob +
                          " --set train.batch_size=768 --set pipeline.pass_examples=3072"
                          " --set ckpt.keep=10 --set ckpt.dir=" +
                          Path("ckpt");
  Result two = Run(Mpirun(2) + job + " --model-dir " + Path("two"));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  // As if the 2 ranks had stopped after pass 2 of 4: rank 0 72 rows into its second file.
  ASSERT_TRUE(CommitRanksCheckpoint(Env::Posix(), Path("ckpt"), {2, 2}).ok());
  // Issue 45, item 2: settings changed on a re-shard resume exited 0 (another dimension failed
  // as "corruption"); on the same ranks they were named by each rank's share. Each is refused
  // before a row is read, named as the job sets it, and the checkpoint stays resumable.
  struct Changed {
    int ranks;
    std::string set, said;
  };
  for (const Changed& c : std::vector<Changed>{
           {3, " --set train.batch_size=1536",
            "ckpt-000002 was written with train.batch_size = 768, this job sets 1536"},
           {3, " --set pipeline.pass_examples=6144",
            "ckpt-000002 was written with pipeline.pass_examples = 3072, this job sets 6144"},
           {3, " --set model.embedding_dim=8", "model.embedding_dim = 16 there, 8 now"},
           {2, " --set train.batch_size=1536",
            "ckpt-000002 was written with train.batch_size = 768, this job sets 1536"}}) {
    SCOPED_TRACE(c.set);
    Result changed = Run(Mpirun(c.ranks) + job + c.set + " --resume --model-dir " + Path("bad"));
    EXPECT_NE(changed.exit_code, 0);
    EXPECT_NE(changed.err.find(c.said), std::string::npos) << changed.err;
    EXPECT_EQ(changed.err.find("corruption"), std::string::npos) << changed.err;
    EXPECT_EQ(changed.err.find("internal"), std::string::npos) << changed.err;
    EXPECT_FALSE(Env::Posix()->FileExists(Path("bad/MANIFEST")));
  }
  Result three = Run(Mpirun(3) + job + " --resume --model-dir " + Path("three"));
  ASSERT_EQ(three.exit_code, 0) << three.err;
  EXPECT_NE(three.err.find("resuming ckpt-000002 of 2 ranks of files with 3"), std::string::npos)
      << three.err;
  EXPECT_EQ(three.last_json["ranks"], 3);
  EXPECT_EQ(three.last_json["job_examples"], 12000u);
  EXPECT_EQ(three.last_json["keys"], two.last_json["keys"]);
  // Two files' tails were left for three ranks: split by byte ranges, each rank took some.
  for (int r = 0; r < 3; ++r) {
    EXPECT_GT(three.last_json["per_rank"][r]["examples"].get<uint64_t>(), 0u) << "rank " << r;
  }
}

// A rank that stops answering (SIGSTOP: alive, silent): the other rank's exchange gives up
// after dist.timeout_seconds, it aborts the job with the reason, and mpirun ends them all.
TEST_F(MpiTrainTest, ARankThatStopsAnsweringEndsTheJobAfterTheTimeout) {
  const std::string data = Files(30000);
  const std::string marker = Path("hangs");
  const std::string cmd = Mpirun(2) + " train" + data + kJob +
                          " --set dist.timeout_seconds=3 --model-dir " + marker + " >" +
                          Path("out.txt") + " 2>" + Path("err.txt");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const std::string rank1_log = marker + "/metrics.jsonl.rank1";
  for (int i = 0; i < 1200 && !Env::Posix()->FileExists(rank1_log); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_TRUE(Env::Posix()->FileExists(rank1_log)) << "the job did not start";
  const std::string ranks = "'^" + ctrbox_ + " train.*" + marker + "'";
  ASSERT_EQ(std::system(("pkill -STOP -f -n " + ranks).c_str()), 0);
  int status = 0;
  const double seconds = WaitForExit(pid, ranks, &status);
  RecordProperty("seconds_to_stop", std::to_string(seconds));
  EXPECT_LT(seconds, 20) << "the job waited on the silent rank";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  std::string err;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("err.txt"), &err).ok());
  EXPECT_NE(err.find("no answer from some of the other ranks"), std::string::npos) << err;
}

}  // namespace
}  // namespace ctrbox
