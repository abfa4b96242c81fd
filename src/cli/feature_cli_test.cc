// The feature graph from the command line (docs/features.md): generated views train through
// the extract stage to the same model as `ctrbox extract`'s shards; a graph error names its
// YAML line; bad rows stop a strict job naming file:line.
#include <fstream>

#include "cli/cli_test_util.h"

namespace ctrbox {
namespace {

using testing::CliTest;
using testing::Result;

class FeatureCliTest : public CliTest {
 protected:
  void Gen(uint64_t rows) {
    Result g = Run(Ctrbox("gen --format views --rows " + std::to_string(rows) +
                          " --test-rows 4000 --seed 3 --out " + Path("views")));
    ASSERT_EQ(g.exit_code, 0) << g.err;
    EXPECT_GT(g.last_json["oracle_auc"].get<double>(), 0.7);
  }
};

TEST_F(FeatureCliTest, TrainingThroughTheExtractStageEqualsTrainingOnExtractedShards) {
  Gen(24000);
  const std::string common =
      " --set model.mlp=64,32 --set train.batch_size=512 "
      "--set pipeline.pass_examples=8192 --fresh";
  Result t1 =
      Run(Ctrbox("train -c " + Path("views/job.yaml") + " --model-dir " + Path("m1") + common));
  ASSERT_EQ(t1.exit_code, 0) << t1.err;
  ASSERT_TRUE(t1.last_json.contains("extract")) << t1.out;
  const auto& x = t1.last_json["extract"];
  EXPECT_EQ(x["rows_in"], 24000);
  EXPECT_EQ(x["rows_out"], t1.last_json["examples"]);
  EXPECT_GT(x["filtered"].get<int>(), 500);
  EXPECT_GT(x["duplicates"].get<int>(), 50);
  EXPECT_GT(t1.last_json["test_auc"].get<double>(), 0.62);  // the held-out views
  EXPECT_NE(t1.err.find("extract:"), std::string::npos) << t1.err;
  // The stage table: the report, every pass line, and the HTML page.
  EXPECT_GT(t1.last_json["stages"]["extract"]["busy_seconds"].get<double>(), 0.0);
  std::ifstream metrics(Path("m1/metrics.jsonl"));
  int passes = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["event"] != "pass") continue;
    ++passes;
    EXPECT_GE(j["stages"]["extract"]["busy_seconds"].get<double>(), 0.0) << line;
  }
  EXPECT_GE(passes, 2);
  ASSERT_EQ(Run(Ctrbox("report --model-dir " + Path("m1"))).exit_code, 0);
  std::ifstream page(Path("m1/report.html"));
  const std::string html((std::istreambuf_iterator<char>(page)), std::istreambuf_iterator<char>());
  EXPECT_NE(html.find(">extract<"), std::string::npos);

  Result e = Run(Ctrbox("extract -c " + Path("views/job.yaml") + " --out " + Path("shards") +
                        " --rows-per-file 10000 --explain"));
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_EQ(e.last_json["rows"], t1.last_json["examples"]);
  EXPECT_NE(e.err.find("layer 1:"), std::string::npos) << e.err;
  Result t2 = Run(Ctrbox("train --format shards --data " + Path("shards") + " --model-dir " +
                         Path("m2") + common));
  ASSERT_EQ(t2.exit_code, 0) << t2.err;
  EXPECT_EQ(t1.last_json["digest"], t2.last_json["digest"])
      << "extraction inside the pipeline must give the rows ctrbox extract writes";

  // Sequential stages and the sequential schedule: the same model again.
  std::ifstream in(Path("views/job.yaml"));
  std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = yaml.find("features:\n");
  ASSERT_NE(at, std::string::npos);
  yaml.insert(at + 10, "  schedule: sequential\n");
  std::ofstream(Path("seq.yaml")) << yaml;
  Result t3 = Run(Ctrbox("train -c " + Path("seq.yaml") + " --model-dir " + Path("m3") + common +
                         " --set pipeline.enabled=false --set data.reader_threads=2"));
  ASSERT_EQ(t3.exit_code, 0) << t3.err;
  EXPECT_EQ(t1.last_json["digest"], t3.last_json["digest"]);

  // eval reads the held-out views through the graph too.
  Result ev = Run(Ctrbox("eval -c " + Path("views/job.yaml") + " --model-dir " + Path("m1") +
                         " --data " + Path("views/impressions_test.csv")));
  ASSERT_EQ(ev.exit_code, 0) << ev.err;
  EXPECT_EQ(ev.last_json["auc"], t1.last_json["test_auc"]);
}

// A job of epochs over views: the report's extraction counts the epochs' training reads, not
// the reads that score the rows held back after each epoch.
TEST_F(FeatureCliTest, EpochsCountTheirTrainingExtractionOnly) {
  Gen(3000);
  Result t = Run(Ctrbox("train -c " + Path("views/job.yaml") + " --model-dir " + Path("m") +
                        " --set model.mlp=16 --set train.epochs=2 "
                        "--set train.validation_fraction=0.2"));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(t.last_json["extract"]["rows_in"], 2 * 3000);
  EXPECT_LE(t.last_json["extract"]["rows_out"].get<uint64_t>(), 2u * 3000);
}

TEST_F(FeatureCliTest, GraphErrorsNameTheYamlLineAndBadRowsTheirLine) {
  Gen(3000);
  std::ofstream(Path("cycle.yaml")) << "data:\n  paths: [" << Path("views/impressions.csv")
                                    << "]\nfeatures:\n"
                                       "  main: {format: csv, columns: {ts: int, label: int}}\n"
                                       "  ops:\n"
                                       "    - {name: a, op: log, input: b}\n"
                                       "    - {name: b, op: clip, input: a, min: 0, max: 1}\n"
                                       "  label: label\n  slots: [ts]\n";
  Result c = Run(Ctrbox("train -c " + Path("cycle.yaml") + " --model-dir " + Path("m")));
  EXPECT_EQ(c.exit_code, 1);
  EXPECT_NE(c.err.find("cycle.yaml:6: features: the operators form a cycle"), std::string::npos)
      << c.err;

  // A line of the main view with a label of 7, and a strict error rate.
  std::ifstream in(Path("views/impressions.csv"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t line4 = 0;
  for (int i = 0; i < 3; ++i) line4 = text.find('\n', line4) + 1;
  const size_t end4 = text.find('\n', line4);
  text.replace(end4 - 1, 1, "7");
  std::ofstream(Path("views/impressions.csv")) << text;
  Result b = Run(Ctrbox("train -c " + Path("views/job.yaml") + " --model-dir " + Path("m") +
                        " --set data.max_error_rate=0"));
  EXPECT_EQ(b.exit_code, 1);
  EXPECT_NE(b.err.find("impressions.csv:4: bad_label"), std::string::npos) << b.err;
  // A flag the graph's job would ignore is refused.
  Result f = Run(Ctrbox("train -c " + Path("views/job.yaml") + " --model-dir " + Path("m") +
                        " --format criteo"));
  EXPECT_EQ(f.exit_code, 1);
  EXPECT_NE(f.err.find("--format criteo: this job has a feature graph"), std::string::npos)
      << f.err;
}

TEST_F(FeatureCliTest, RanksEachExtractTheirOwnFiles) {
  Gen(8000);
  // The main view as two files, one per rank.
  std::ifstream in(Path("views/impressions.csv"));
  std::string header, line;
  std::getline(in, header);
  std::ofstream a(Path("views/a.csv")), b(Path("views/b.csv"));
  a << header << "\n";
  b << header << "\n";
  for (int i = 0; getline(in, line); ++i) (i < 4000 ? a : b) << line << "\n";
  a.close();
  b.close();
  const std::string job = Path("views/job.yaml");
  const std::string common = " --set model.mlp=32 --set train.batch_size=512 --fresh --data " +
                             Path("views/a.csv") + " --data " + Path("views/b.csv");
  Result one = Run(Ctrbox("train -c " + job + " --model-dir " + Path("m1") + common));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  Result two =
      Run(Ctrbox("train -c " + job + " --model-dir " + Path("m2") + common + " --local-ranks 2"));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  // The same examples (a duplicate never spans the two files here: copies are adjacent,
  // and the split falls between two distinct impressions unless line 4001 repeats 4000).
  EXPECT_NEAR(two.last_json["examples"].get<double>(), one.last_json["examples"].get<double>(), 1);
  EXPECT_EQ(two.last_json["extract"]["rows_in"], 8000);
  EXPECT_EQ(two.last_json["per_rank"][1]["extract"]["rows_in"], 4000);
  EXPECT_NEAR(two.last_json["test_auc"].get<double>(), one.last_json["test_auc"].get<double>(),
              0.02);

  // One file for 2 ranks: each reads the lines starting in its half of the bytes (the header
  // is the file's first line, in rank 0's half). The held-out file too.
  Result halves = Run(Ctrbox("train -c " + job + " --model-dir " + Path("m3") +
                             " --set model.mlp=32 --set train.batch_size=512 --fresh "
                             "--local-ranks 2"));
  ASSERT_EQ(halves.exit_code, 0) << halves.err;
  EXPECT_EQ(halves.last_json["extract"]["rows_in"], 8000);
  EXPECT_GT(halves.last_json["per_rank"][1]["extract"]["rows_in"].get<int>(), 3000);
  EXPECT_NEAR(halves.last_json["examples"].get<double>(), one.last_json["examples"].get<double>(),
              1);
  EXPECT_EQ(halves.last_json["test_examples"], one.last_json["test_examples"]);
}

// A job killed (-9) after a checkpoint resumes through the extract stage (the passes it
// trained read again and skipped, the dedupe's memory with them) to the uninterrupted model.
TEST_F(FeatureCliTest, AKilledJobResumesThroughTheExtractStageToTheSameModel) {
  Gen(120000);
  const std::string job = Ctrbox("train -c " + Path("views/job.yaml") +
                                 " --set pipeline.pass_examples=4096 --set model.mlp=32 "
                                 "--set ckpt.every_passes=2 --set train.progress_seconds=1e9 ");
  Result full =
      Run(job + "--model-dir " + Path("full") + " --set ckpt.dir=" + Path("ck_full") + " --fresh");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const std::string metrics = Path("metrics.jsonl");
  const std::string part = job + "--model-dir " + Path("part") +
                           " --set ckpt.dir=" + Path("ck_part") +
                           " --set train.metrics_path=" + metrics;
  Result killed =
      Run("sh -c '" + part + " --fresh >/dev/null 2>&1 & p=$!; until grep -q checkpoint " +
          metrics + " 2>/dev/null; do sleep 0.02; done; kill -9 $p; wait $p; echo $?'");
  EXPECT_EQ(Trim(killed.out), "137") << killed.err;
  Result resumed = Run(part + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  ASSERT_TRUE(resumed.last_json.contains("resumed_from")) << resumed.out;
  EXPECT_LT(resumed.last_json["examples"].get<uint64_t>(),
            full.last_json["examples"].get<uint64_t>());
  EXPECT_EQ(resumed.last_json["digest"], full.last_json["digest"]);
}

// The example job, beside its views, trains from any working directory: a job file's relative
// paths start from its folder. A data file it names that is missing is named with its line.
TEST_F(FeatureCliTest, TheExampleJobTrainsBesideItsViewsFromAnyDirectory) {
  const std::string cd = "cd " + dir_ + " && ";
  Result g = Run(cd + Ctrbox("gen --format views --rows 4000 --out views"));
  ASSERT_EQ(g.exit_code, 0) << g.err;
  Result copy = Run("cp " + source_ + "/examples/views_job.yaml " + dir_ + "/job.yaml");
  ASSERT_EQ(copy.exit_code, 0) << copy.err;
  Result t = Run("cd / && " + Ctrbox("train -c " + dir_ + "/job.yaml --model-dir " + dir_ +
                                     "/m --set pipeline.pass_examples=2048"));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_GT(t.last_json["test_examples"].get<int>(), 600);
  EXPECT_EQ(t.last_json["extract"]["rows_in"], 4000);
  ASSERT_EQ(std::remove((dir_ + "/views/impressions_test.csv").c_str()), 0);
  Result missing =
      Run("cd / && " + Ctrbox("train -c " + dir_ + "/job.yaml --fresh --model-dir " + dir_ + "/m"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find(dir_ + "/job.yaml:13: data.eval_paths: " + dir_ +
                             "/views/impressions_test.csv does not exist (a job file's relative "
                             "paths start from its folder, " +
                             dir_ + ")"),
            std::string::npos)
      << missing.err;
}

}  // namespace
}  // namespace ctrbox
