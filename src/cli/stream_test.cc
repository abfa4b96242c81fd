// Stream jobs (docs/routine.md): partitions in order and once across restarts, late and
// missing partitions by the rule, serving deltas against bases, publication after a crash.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "ckpt/checkpoint.h"
#include "ckpt/serving_files.h"
#include "cli/cli_test_util.h"

namespace ctrbox {
namespace {

class StreamTest : public testing::CliTest {
 protected:
  // n partitions of `rows` rows from 20261101/00 under root/.
  void Gen(int n, int rows) {
    testing::Result g =
        Run(Ctrbox(fmt::format("gen --partitions {} --rows {} --out {}", n, rows, Path("root"))));
    ASSERT_EQ(g.exit_code, 0) << g.err;
  }
  // The stream job over root/ writing ckpt.dir `ckpt` and serving.dir `serving`.
  std::string Job(const std::string& ckpt, const std::string& serving, const std::string& until,
                  const std::string& more = "") {
    return Ctrbox(fmt::format(
        "train --set stream.root={} --set stream.until={} --set stream.poll_seconds=0.05 "
        "--set ckpt.dir={} --set serving.dir={} --set table.ttl_partitions=2 "
        "--set train.batch_size=256 --set model.mlp=32,16 --set train.threads=2 {}",
        Path("root"), until, Path(ckpt), Path(serving), more));
  }
  StatusOr<std::vector<ServingVersion>> Versions(const std::string& serving) {
    return ReadServingVersions(Env::Posix(), Path(serving));
  }
  // The examples the job's newest checkpoint says were trained.
  uint64_t CommittedExamples(const std::string& ckpt) {
    auto ids = ListCheckpoints(Env::Posix(), Path(ckpt));
    if (!ids.ok() || ids->empty()) return 0;
    auto m = ReadCheckpointManifest(Env::Posix(), Path(ckpt), ids->back());
    return m.ok() ? m->position.examples : 0;
  }
};

TEST_F(StreamTest, PartitionsAreTrainedInOrderOnceWhateverTheRestarts) {
  Gen(5, 3000);
  testing::Result whole = Run(Job("ckpt_a", "serving_a", "20261101/04",
                                  "--set train.metrics_path=" + Path("metrics.jsonl")));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  // One metrics line per partition, which the report draws (online AUC over partitions).
  testing::Result page =
      Run(Ctrbox("report --metrics " + Path("metrics.jsonl") + " --out " + Path("report.html")));
  ASSERT_EQ(page.exit_code, 0) << page.err;
  std::string html;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("report.html"), &html).ok());
  const size_t chart = html.find("Online AUC per partition");
  ASSERT_NE(chart, std::string::npos);
  EXPECT_NE(html.find("<path d=\"M", chart), std::string::npos);  // a line of the 5 partitions
  EXPECT_EQ(whole.last_json["stream"]["partitions_committed"], 5);
  ASSERT_TRUE(whole.last_json["digest"].is_string());
  EXPECT_EQ(CommittedExamples("ckpt_a"), 15000u);

  // The same stream in three starts: until 01, until 04, and once more (nothing left).
  for (const char* until : {"20261101/01", "20261101/04", "20261101/04"}) {
    testing::Result r = Run(Job("ckpt_b", "serving_b", until));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    if (std::string(until) == "20261101/01") {
      EXPECT_EQ(r.last_json["stream"]["partitions_trained_now"], 2);
    }
    EXPECT_EQ(r.last_json["stream"]["partitions_committed"],
              std::string(until) == "20261101/01" ? 2 : 5);
  }
  testing::Result again = Run(Job("ckpt_b", "serving_b", "20261101/04"));
  EXPECT_EQ(again.last_json["stream"]["partitions_trained_now"], 0);
  EXPECT_EQ(again.last_json["digest"], whole.last_json["digest"]) << again.err;
  EXPECT_EQ(CommittedExamples("ckpt_b"), 15000u);  // no partition twice

  // The same versions, byte for byte, each once, each verifying.
  auto a = Versions("serving_a"), b = Versions("serving_b");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), 5u);
  ASSERT_EQ(b->size(), 5u);
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].version, i + 1);
    EXPECT_EQ((*a)[i].partition, (*b)[i].partition);
    EXPECT_EQ((*a)[i].checksum, (*b)[i].checksum) << "version " << i + 1;
    EXPECT_TRUE(VerifyServingVersion(Env::Posix(), Path("serving_b"), (*b)[i]).ok());
  }
  // The newest checkpoint damaged: the resume falls back to the one before, trains the last
  // partition again, and finds the version it published then, byte for byte.
  auto ids = ListCheckpoints(Env::Posix(), Path("ckpt_b"));
  ASSERT_TRUE(ids.ok() && ids->size() >= 2);
  const std::string manifest = Path("ckpt_b/" + CheckpointName(ids->back()) + "/MANIFEST");
  std::string text;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), manifest, &text).ok());
  text[text.size() / 3] ^= 1;
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), manifest, text).ok());
  testing::Result fallback = Run(Job("ckpt_b", "serving_b", "20261101/04"));
  ASSERT_EQ(fallback.exit_code, 0) << fallback.err;
  EXPECT_EQ(fallback.last_json["stream"]["partitions_trained_now"], 1);
  EXPECT_EQ(fallback.last_json["digest"], whole.last_json["digest"]);
  auto c = Versions("serving_b");
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->size(), 5u);
  EXPECT_EQ(c->back().time, b->back().time);  // the published line, untouched

  // inspect --serving-dir verifies every version and loads the newest; a damaged one is named.
  testing::Result inspect = Run(Ctrbox("inspect --serving-dir " + Path("serving_b")));
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_EQ(inspect.last_json["newest_keys"], whole.last_json["keys"]);
  std::string bytes;
  const std::string sparse = Path("serving_b/v-000003/sparse.bin");
  ASSERT_TRUE(ReadFileToString(Env::Posix(), sparse, &bytes).ok());
  bytes[bytes.size() / 2] ^= 1;
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), sparse, bytes).ok());
  testing::Result damaged = Run(Ctrbox("inspect --serving-dir " + Path("serving_b")));
  EXPECT_NE(damaged.exit_code, 0);
  EXPECT_EQ(damaged.last_json["versions"][2]["verified"], false);
  EXPECT_EQ(damaged.last_json["versions"][1]["verified"], true);
  EXPECT_NE(damaged.err.find("1 of 5 versions do not verify"), std::string::npos) << damaged.err;
}

// Differential: a stream publishing deltas and one publishing a base every partition hold the
// same model after every version: base + deltas = the next base, key sets and values, with
// TTL deletions among them.
TEST_F(StreamTest, DeltasAppliedToTheirBaseGiveTheNextBaseBitForBit) {
  Gen(5, 3000);
  for (uint32_t bits : {0u, 8u}) {
    const std::string q =
        fmt::format("--set serving.quant.bits={} --set serving.quant.range=0.5", bits);
    const std::string sa = fmt::format("deltas{}", bits), sb = fmt::format("bases{}", bits);
    testing::Result a =
        Run(Job("ckpt_" + sa, sa, "20261101/04", q + " --set serving.base_every=100"));
    ASSERT_EQ(a.exit_code, 0) << a.err;
    testing::Result b = Run(Job("ckpt_" + sb, sb, "20261101/04",
                                q + " --set serving.base_every=1 --set serving.keep_bases=10"));
    ASSERT_EQ(b.exit_code, 0) << b.err;
    auto va = Versions(sa), vb = Versions(sb);
    ASSERT_TRUE(va.ok() && vb.ok());
    ASSERT_EQ(va->size(), 5u);
    ASSERT_EQ(vb->size(), 5u);
    uint64_t deleted = 0;
    for (uint64_t v = 1; v <= 5; ++v) {
      EXPECT_EQ((*va)[v - 1].base, v == 1);
      EXPECT_TRUE((*vb)[v - 1].base);
      deleted += (*va)[v - 1].deleted;
      auto x = LoadServingState(Env::Posix(), Path(sa), v);
      auto y = LoadServingState(Env::Posix(), Path(sb), v);
      ASSERT_TRUE(x.ok()) << x.status().ToString();
      ASSERT_TRUE(y.ok()) << y.status().ToString();
      EXPECT_EQ(x->rows.size(), y->rows.size()) << "version " << v;
      EXPECT_TRUE(x->rows == y->rows) << "version " << v;
      EXPECT_EQ(x->dense_payload, y->dense_payload);
      EXPECT_EQ(x->layout.quant_bits, bits);
      EXPECT_EQ(x->layout.emb_state, 0u);  // no optimizer state
    }
    EXPECT_GT(deleted, 0u);  // TTL eviction deleted keys, and the deltas said so
  }
}

// Admission by count: fewer keys get rows, one-off keys none; the counts survive a restart
// (two starts end with one start's digest).
TEST_F(StreamTest, AdmissionByCountKeepsOneOffKeysOutAndItsCountsSurviveARestart) {
  Gen(4, 3000);
  const std::string admit = "--set table.admit.min_count=3 --set table.admit.bloom_bits=18";
  testing::Result all = Run(Job("ckpt_all", "serving_all", "20261101/03"));
  ASSERT_EQ(all.exit_code, 0) << all.err;
  testing::Result once = Run(Job("ckpt_once", "serving_once", "20261101/03", admit));
  ASSERT_EQ(once.exit_code, 0) << once.err;
  const uint64_t keys_all = all.last_json["keys"], keys_admitted = once.last_json["keys"];
  EXPECT_LT(keys_admitted * 2, keys_all) << "one-off keys got rows";
  EXPECT_GT(once.last_json["last_partition"]["admission"]["dropped"].get<uint64_t>(), 0u);
  for (const char* until : {"20261101/01", "20261101/03"}) {
    testing::Result r = Run(Job("ckpt_two", "serving_two", until, admit));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    if (std::string(until) == "20261101/03") {
      EXPECT_EQ(r.last_json["digest"], once.last_json["digest"]);
      EXPECT_EQ(r.last_json["keys"], once.last_json["keys"]);
    }
  }
  // Only the admission files the kept checkpoints name are left (each names one).
  auto names = Env::Posix()->GetChildren(Path("ckpt_two"));
  auto kept = ListCheckpoints(Env::Posix(), Path("ckpt_two"));
  ASSERT_TRUE(names.ok() && kept.ok());
  size_t files = 0;
  for (const std::string& n : *names) files += n.rfind("admit-", 0) == 0;
  EXPECT_GE(files, 1u);
  EXPECT_LE(files, kept->size());
  // A job of files refuses the key.
  testing::Result refused = Run(Ctrbox("train --set table.admit.min_count=2"));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("table.admit.min_count"), std::string::npos) << refused.err;
}

// Lossless tiers in a stream: a memory budget that sends most rows through SSD files gives the
// in-memory run's model and the same versions, byte for byte.
TEST_F(StreamTest, AStreamOverTheSsdTierPublishesTheInMemoryVersions) {
  Gen(3, 4000);
  testing::Result mem = Run(Job("ckpt_m", "serving_m", "20261101/02"));
  ASSERT_EQ(mem.exit_code, 0) << mem.err;
  testing::Result ssd =
      Run(Job("ckpt_d", "serving_d", "20261101/02",
              "--set storage.memory_budget=4MB --set storage.ssd_dir=" + Path("ssd") +
                  " --set storage.keep_store=true"));
  ASSERT_EQ(ssd.exit_code, 0) << ssd.err;
  EXPECT_EQ(ssd.last_json["digest"], mem.last_json["digest"]);
  auto names = Env::Posix()->GetChildren(Path("ssd"));
  ASSERT_TRUE(names.ok());
  uint64_t bytes = 0;
  for (const std::string& n : *names) {
    auto size = Env::Posix()->GetFileSize(Path("ssd/" + n));
    if (size.ok()) bytes += *size;
  }
  EXPECT_GT(bytes, uint64_t{4} << 20);  // more than the budget went to the SSD tier
  auto a = Versions("serving_m"), b = Versions("serving_d");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) EXPECT_EQ((*a)[i].checksum, (*b)[i].checksum);
}

// A stream of raw views through a feature graph (docs/features.md): the main view's rows split
// into hourly partitions, the side views fixed; two starts give one start's model.
TEST_F(StreamTest, AStreamOfRawViewsThroughAFeatureGraphResumesAsOneRun) {
  ASSERT_EQ(Run(Ctrbox("gen --format views --rows 6000 --out " + Path("views"))).exit_code, 0);
  std::string main_view, job;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("views/impressions.csv"), &main_view).ok());
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("views/job.yaml"), &job).ok());
  const size_t header_end = main_view.find('\n') + 1;
  const std::string header = main_view.substr(0, header_end);
  std::vector<std::string> rows(3);
  size_t line = 0;
  for (size_t at = header_end; at < main_view.size(); ++line) {
    const size_t end = main_view.find('\n', at) + 1;
    rows[line % 3] += main_view.substr(at, end - at);
    at = end;
  }
  for (int h = 0; h < 3; ++h) {
    const std::string dir = Path(fmt::format("root/20261101/{:02d}", h));
    ASSERT_TRUE(Env::Posix()->CreateDirs(dir).ok());
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), dir + "/impressions.csv", header + rows[h]).ok());
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), dir + "/_SUCCESS", "").ok());
  }
  // The job file without its data section: the stream is the data.
  const size_t data = job.find("data:"), features = job.find("features:");
  ASSERT_TRUE(data != std::string::npos && features != std::string::npos && data < features);
  ASSERT_TRUE(
      WriteFileAtomic(Env::Posix(), Path("stream.yaml"), job.erase(data, features - data)).ok());
  const std::string config = "-c " + Path("stream.yaml");
  testing::Result one = Run(Job("ckpt_1", "serving_1", "20261101/02", config));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(one.last_json["stream"]["partitions_committed"], 3);
  for (const char* until : {"20261101/00", "20261101/02", "20261101/02"}) {
    testing::Result r = Run(Job("ckpt_2", "serving_2", until, config));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    if (std::string(until) == "20261101/02") {
      EXPECT_EQ(r.last_json["digest"], one.last_json["digest"]);
    }
  }
}

TEST_F(StreamTest, LateAndMissingPartitionsFollowTheRule) {
  Gen(4, 2000);
  // 20261101/02 is not ready (no done file); 03 is.
  ASSERT_EQ(std::remove(Path("root/20261101/02/_SUCCESS").c_str()), 0);
  testing::Result fail = Run(Job("ckpt_f", "serving_f", "20261101/03",
                                 "--set stream.max_wait=0.3 --set stream.on_late=fail"));
  EXPECT_NE(fail.exit_code, 0);
  EXPECT_NE(fail.err.find("partition 20261101/02"), std::string::npos) << fail.err;
  EXPECT_NE(fail.err.find("stream.on_late: fail"), std::string::npos) << fail.err;
  EXPECT_EQ(CommittedExamples("ckpt_f"), 4000u);  // 00 and 01 committed, nothing of 02

  testing::Result skip = Run(Job("ckpt_s", "serving_s", "20261101/03",
                                 "--set stream.max_wait=0.3 --set stream.on_late=skip"));
  ASSERT_EQ(skip.exit_code, 0) << skip.err;
  EXPECT_EQ(skip.last_json["stream"]["skipped"], 1);
  EXPECT_EQ(skip.last_json["stream"]["partitions_committed"], 3);
  EXPECT_EQ(CommittedExamples("ckpt_s"), 6000u);
  // Late but within stream.max_wait: waited for, then trained in its place.
  std::thread lands([&] {
    // Once the job has committed 01 (and so waits for 02, with 03 ready), however slow the
    // machine; then a moment more.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (CommittedExamples("ckpt_w") < 4000 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    (void)WriteFileAtomic(Env::Posix(), Path("root/20261101/02/_SUCCESS"), "");
  });
  testing::Result waited = Run(Job("ckpt_w", "serving_w", "20261101/03",
                                   "--set stream.max_wait=120 --set stream.on_late=skip"));
  lands.join();
  ASSERT_EQ(waited.exit_code, 0) << waited.err;
  EXPECT_EQ(waited.last_json["stream"]["skipped"], 0);
  EXPECT_EQ(CommittedExamples("ckpt_w"), 8000u);
  EXPECT_NE(waited.err.find("waiting up to 120 s"), std::string::npos) << waited.err;
  ASSERT_EQ(std::remove(Path("root/20261101/02/_SUCCESS").c_str()), 0);

  // 02 arrives after it was skipped: a restart does not go back for it.
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("root/20261101/02/_SUCCESS"), "").ok());
  testing::Result after = Run(Job("ckpt_s", "serving_s", "20261101/03"));
  ASSERT_EQ(after.exit_code, 0) << after.err;
  EXPECT_EQ(after.last_json["stream"]["partitions_trained_now"], 0);
  EXPECT_EQ(CommittedExamples("ckpt_s"), 6000u);
}

// The job died after its checkpoint committed a partition and before the donefile listed the
// version: the next start publishes it, identical.
TEST_F(StreamTest, AVersionCommittedButNotListedIsPublishedAtTheNextStart) {
  Gen(2, 2000);
  ASSERT_EQ(Run(Job("ckpt", "serving", "20261101/01")).exit_code, 0);
  auto v = Versions("serving");
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->size(), 2u);
  std::string text;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("serving/versions.jsonl"), &text).ok());
  const std::string first_line = text.substr(0, text.find('\n') + 1);
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("serving/versions.jsonl"), first_line).ok());
  testing::Result r = Run(Job("ckpt", "serving", "20261101/01"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.last_json["stream"]["partitions_trained_now"], 0);
  auto w = Versions("serving");
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->size(), 2u);
  EXPECT_EQ((*w)[1].checksum, (*v)[1].checksum);
  EXPECT_EQ((*w)[1].time, (*v)[1].time);  // the same line, not a new version
}

// N ranks: every rank takes its share of each partition (rank 0 follows the root and decides),
// tests and trains it with the others, and the ranks commit each partition together; rank 0
// writes every version from all ranks' rows and the donefile. Two starts end as one; the
// deltas applied to their base hold the model a base of every partition holds.
TEST_F(StreamTest, RanksTakeTheirShareOfEveryPartitionAndRankZeroPublishes) {
  Gen(4, 3000);
  const std::string ranks = " --local-ranks 2 --set serving.base_every=100";
  testing::Result whole = Run(Job("ckpt_a", "serving_a", "20261101/03", ranks));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_EQ(whole.last_json["stream"]["partitions_committed"], 4);
  EXPECT_EQ(whole.last_json["ranks"], 2);
  ASSERT_TRUE(whole.last_json["digest"].is_string());
  EXPECT_EQ(whole.last_json["examples"], 12000);  // each row once, over the two ranks
  EXPECT_NE(whole.err.find("partition 20261101/02: online AUC"), std::string::npos) << whole.err;

  for (const char* until : {"20261101/01", "20261101/03"}) {
    testing::Result r = Run(Job("ckpt_b", "serving_b", until, ranks));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.last_json["stream"]["partitions_trained_now"], 2);
    if (std::string(until) == "20261101/03") {
      EXPECT_EQ(r.last_json["digest"], whole.last_json["digest"]);
    }
  }
  testing::Result bases = Run(Job("ckpt_c", "serving_c", "20261101/03",
                                  " --local-ranks 2 --set serving.base_every=1 "
                                  "--set serving.keep_bases=10"));
  ASSERT_EQ(bases.exit_code, 0) << bases.err;
  auto a = Versions("serving_a"), b = Versions("serving_b"), c = Versions("serving_c");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_EQ(a->size(), 4u);
  ASSERT_EQ(b->size(), 4u);
  ASSERT_EQ(c->size(), 4u);
  uint64_t deleted = 0;
  for (uint64_t v = 1; v <= 4; ++v) {
    EXPECT_EQ((*a)[v - 1].checksum, (*b)[v - 1].checksum) << "version " << v;
    EXPECT_EQ((*a)[v - 1].base, v == 1);
    deleted += (*a)[v - 1].deleted;
    auto x = LoadServingState(Env::Posix(), Path("serving_a"), v);
    auto y = LoadServingState(Env::Posix(), Path("serving_c"), v);
    ASSERT_TRUE(x.ok()) << x.status().ToString();
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    EXPECT_TRUE(x->rows == y->rows) << "version " << v;
    EXPECT_EQ(x->rows.size(), (*a)[v - 1].keys);
  }
  EXPECT_GT(deleted, 0u);
  // The newest version holds the ranks' model: its keys are the saved model's.
  EXPECT_EQ(a->back().keys, whole.last_json["keys"].get<uint64_t>());
  // Admission by count is one process's for now, and says so.
  testing::Result admit =
      Run(Job("ckpt_d", "serving_d", "20261101/00", ranks + " --set table.admit.min_count=2"));
  EXPECT_NE(admit.exit_code, 0);
  EXPECT_NE(admit.err.find("not built yet"), std::string::npos) << admit.err;
  // A stream of 2 ranks continues on 2 ranks: one process is told so (no re-shard offered).
  testing::Result one = Run(Job("ckpt_a", "serving_a", "20261101/03"));
  EXPECT_NE(one.exit_code, 0);
  EXPECT_NE(one.err.find("holds a stream job of 2 ranks"), std::string::npos) << one.err;
  EXPECT_EQ(one.err.find("re-shard"), std::string::npos) << one.err;
}

// A partition named in the future (a typo, a wrong clock) beside the real ones makes no
// partition late: the late one is trained when it lands, the future one is named once, and a
// directory the layout cannot read is named. stream.start on the resumed stream is the way
// past partitions the stream should give up on.
TEST_F(StreamTest, APartitionFromTheFutureDoesNotDerailTheStream) {
  Gen(3, 1000);
  ASSERT_EQ(std::remove(Path("root/20261101/02/_SUCCESS").c_str()), 0);
  namespace fs = std::filesystem;
  fs::create_directories(Path("root/20991231"));
  fs::copy(Path("root/20261101/00"), Path("root/20991231/23"), fs::copy_options::recursive);
  fs::create_directories(Path("root/20261101/5"));
  std::thread lands([&] {
    // Once 00 and 01 are committed (the job waits for 02, the future one ready), and longer
    // than stream.max_wait: a future partition must not have made 02 late.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (CommittedExamples("ckpt") < 2000 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    (void)WriteFileAtomic(Env::Posix(), Path("root/20261101/02/_SUCCESS"), "");
  });
  testing::Result r = Run(Job("ckpt", "serving", "20261101/02", "--set stream.max_wait=0.3"));
  lands.join();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.last_json["stream"]["skipped"], 0);
  EXPECT_EQ(CommittedExamples("ckpt"), 3000u);
  const std::string future =
      "partition 20991231/23 (" + Path("root/20991231/23") + ") is ready but not taken: it begins";
  ASSERT_NE(r.err.find(future), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(future), r.err.rfind(future)) << "named more than once: " << r.err;
  EXPECT_NE(r.err.find(Path("root/20261101/5") + ": not a partition of stream.layout"),
            std::string::npos)
      << r.err;
  // Moving on to it on purpose: the partitions between are skipped, counted in one line.
  testing::Result on = Run(Job("ckpt", "serving", "20991231/23",
                               "--set stream.start=20991231/23 --set stream.max_ahead=1e10"));
  ASSERT_EQ(on.exit_code, 0) << on.err;
  EXPECT_EQ(on.last_json["stream"]["partitions_committed"], 4);
  EXPECT_EQ(on.last_json["stream"]["partitions_trained_now"], 1);
  EXPECT_GT(on.last_json["stream"]["skipped"].get<uint64_t>(), 600000u);
  EXPECT_NE(on.err.find("stream.start 20991231/23: moving on from 20261101/03"), std::string::npos)
      << on.err;
}

// A partition's files are the ones marked done: one changed after its done file is refused
// (nothing of it committed) until the partition is written again, its done file last.
TEST_F(StreamTest, AFileChangedAfterTheDoneFileIsNotTrained) {
  Gen(2, 2000);
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(Path("root/20261101/01"))) {
    if (e.path().filename().string()[0] != '_') files.push_back(e.path().string());
  }
  ASSERT_FALSE(files.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::filesystem::resize_file(files[0], std::filesystem::file_size(files[0]) / 2);
  testing::Result r = Run(Job("ckpt", "serving", "20261101/01"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("partition 20261101/01: " + files[0] + " changed after its done file"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(CommittedExamples("ckpt"), 2000u);  // 00 only
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("root/20261101/01/_SUCCESS"), "").ok());
  testing::Result again = Run(Job("ckpt", "serving", "20261101/01"));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.last_json["stream"]["partitions_committed"], 2);
}

// A partition marked done with no data files is committed with nothing trained: no online
// metrics are made up for it. Entries of a partition that are not files are named.
TEST_F(StreamTest, AnEmptyPartitionHasNoOnlineMetricsAndOddEntriesAreNamed) {
  Gen(2, 1000);
  for (const auto& e : std::filesystem::directory_iterator(Path("root/20261101/01"))) {
    if (e.path().filename().string()[0] != '_') std::filesystem::remove(e.path());
  }
  std::filesystem::create_directories(Path("root/20261101/00/nested"));
  testing::Result r = Run(
      Job("ckpt", "serving", "20261101/01", "--set train.metrics_path=" + Path("metrics.jsonl")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.last_json["stream"]["partitions_committed"], 2);
  EXPECT_NE(r.err.find("partition 20261101/01: no examples (nothing to test)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("partition 20261101/00: " + Path("root/20261101/00/nested") + " left out"),
            std::string::npos)
      << r.err;
  std::string log;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("metrics.jsonl"), &log).ok());
  int partitions = 0;
  for (size_t at = 0, end; at < log.size(); at = end + 1) {
    end = log.find('\n', at);
    if (end == std::string::npos) end = log.size();
    const nlohmann::json line = nlohmann::json::parse(log.substr(at, end - at), nullptr, false);
    if (!line.is_object() || line.value("event", "") != "partition") continue;
    ++partitions;
    EXPECT_EQ(line.contains("online"), line["partition"] == "20261101/00") << line.dump();
  }
  EXPECT_EQ(partitions, 2);
}

TEST_F(StreamTest, BadStreamSettingsAreNamed) {
  Gen(1, 500);
  struct Case {
    std::string more, expect;
  };
  for (const Case& c : std::vector<Case>{
           {"--set stream.layout={day}/{hours}", "stream.layout"},
           {"--set stream.start=2026-11-01", "stream.start"},
           {"--data " + Path("root"), "data.paths"},
           {"--set serving.quant.bits=4", "serving.quant.bits"},
           {"--set stream.root=" + Path("no_such_root"), "stream.root"},
           {"--set stream.done_file=", "stream.done_file '' must be a file name"},
           {"--set stream.done_file=../x", "stream.done_file '../x' must be a file name"},
           {"--set stream.done_file=a/b", "stream.done_file 'a/b' must be a file name"},
           {"--set stream.start=20261101/03", "stream.until 20261101/00 comes before"},
       }) {
    testing::Result r = Run(Job("ckpt", "serving", "20261101/00", c.more));
    EXPECT_NE(r.exit_code, 0) << c.more;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.more << ": " << r.err;
  }
  // A new job (--fresh here) on a serving.dir of another job's versions is refused.
  ASSERT_EQ(Run(Job("ckpt_x", "serving_x", "20261101/00")).exit_code, 0);
  testing::Result fresh = Run(Job("ckpt_x", "serving_x", "20261101/00", "--fresh"));
  EXPECT_NE(fresh.exit_code, 0);
  EXPECT_NE(fresh.err.find("holds versions of another job"), std::string::npos) << fresh.err;
  // The stream's serving.dir changed between starts: refused, both named.
  testing::Result moved = Run(Job("ckpt_x", "serving_y", "20261101/00"));
  EXPECT_NE(moved.exit_code, 0);
  EXPECT_NE(moved.err.find("serving.dir: this stream publishes into " + Path("serving_x")),
            std::string::npos)
      << moved.err;
  EXPECT_NE(moved.err.find(Path("serving_y")), std::string::npos) << moved.err;
  // Admission counts that cannot fit the machine are refused, with their cost.
  if (sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE) < (int64_t{64} << 30)) {
    testing::Result bloom =
        Run(Job("ckpt_b", "serving_b", "20261101/00",
                "--set table.admit.min_count=2 --set table.admit.bloom_bits=34"));
    EXPECT_NE(bloom.exit_code, 0);
    EXPECT_NE(bloom.err.find("table.admit.bloom_bits 34: 16.0 GiB of counters"), std::string::npos)
        << bloom.err;
  }
  // gen's stream options without --partitions, and views as partitions, are refused.
  testing::Result lone = Run(Ctrbox("gen --rows 10 --interval 1 --out " + Path("x.tsv")));
  EXPECT_NE(lone.exit_code, 0);
  EXPECT_NE(lone.err.find("--partitions"), std::string::npos) << lone.err;
  testing::Result views =
      Run(Ctrbox("gen --format views --partitions 2 --rows 10 --out " + Path("v")));
  EXPECT_NE(views.exit_code, 0);
  EXPECT_NE(views.err.find("not views"), std::string::npos) << views.err;
  // A stream needs ckpt.dir (its commits); serving.dir needs a stream.
  testing::Result no_ckpt =
      Run(Ctrbox("train --set stream.root=" + Path("root") + " --set stream.until=20261101/00"));
  EXPECT_NE(no_ckpt.err.find("ckpt.dir"), std::string::npos) << no_ckpt.err;
  testing::Result no_stream = Run(Ctrbox("train --set serving.dir=" + Path("s")));
  EXPECT_NE(no_stream.err.find("stream.root"), std::string::npos) << no_stream.err;
}

}  // namespace
}  // namespace ctrbox
