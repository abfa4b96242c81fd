// Regression tests for what a new user's abuse found (issue 21): every command stops, bad
// options and inputs are refused up front with what is wrong named, nothing is overwritten
// without being told. Each test failed before its fix.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "cli/cli_test_util.h"

namespace ctrbox {
namespace {

using testing::CliTest;
using testing::Result;

// Item 1: a negative number for an unsigned option wrapped to ~2^64 (gen wrote without end).
// Every numeric option of the command line goes through one parser that refuses it.
TEST_F(CliTest, NegativeAndZeroCountsAreRefusedWithTheOptionNamed) {
  struct Case {
    std::string args, option;
  };
  const std::string out = Path("g.tsv");
  for (const Case& c : std::vector<Case>{
           {"gen --rows -5 --out " + out, "--rows"},
           {"gen --rows 0 --out " + out, "--rows"},
           {"gen --rows 1.5 --out " + out, "--rows"},
           {"gen --rows 10 --seed -1 --out " + out, "--seed"},
           {"gen --rows 10 --threads -2 --out " + out, "--threads"},
           {"gen --rows 10 --vocab-scale -1 --out " + out, "--vocab-scale"},
           {"gen --rows 10 --zipf 0.5 --out " + out, "--zipf"},
       }) {
    Result r = Run("timeout 60 " + Ctrbox(c.args));  // 124: the endless write
    EXPECT_EQ(r.exit_code, 2) << c.args;             // a usage error
    EXPECT_NE(r.err.find(c.option), std::string::npos) << c.args << ": " << r.err;
    EXPECT_FALSE(Env::Posix()->FileExists(out)) << c.args;
    EXPECT_FALSE(Env::Posix()->FileExists(out + ".tmp")) << c.args;
  }
  for (const std::string args : {"train --bogus", "bogus", "", "gen --rows"}) {
    EXPECT_EQ(Run(Ctrbox(args)).exit_code, 2) << args;
  }
  EXPECT_EQ(Run(Ctrbox("train --help")).exit_code, 0);
  Result ok = Run(Ctrbox("gen --rows 10 --seed 0 --threads 0 --zipf 0 --out " + out));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.last_json["rows"], 10);
}

// Item 2: convert --rows-per-file 0 looped forever writing empty shards.
TEST_F(CliTest, ConvertRefusesZeroRowsPerFileAndBlockRows) {
  ASSERT_EQ(Run(Ctrbox("gen --rows 100 --out " + Path("g.tsv"))).exit_code, 0);
  for (const std::string opt : {"--rows-per-file 0", "--rows-per-file -3", "--block-rows 0"}) {
    Result r = Run("timeout 60 " +
                   Ctrbox("convert --data " + Path("g.tsv") + " --out " + Path("s") + " " + opt));
    EXPECT_NE(r.exit_code, 0) << opt;
    EXPECT_NE(r.err.find(opt.substr(0, opt.find(' '))), std::string::npos) << opt << r.err;
  }
}

// Item 3: a shard directory was trusted blindly: after a convert killed midway, train used the
// files it had written; a smaller conversion into an earlier one's directory trained on both.
TEST_F(CliTest, AShardDirectoryIsReadOnlyWhenItsConversionFinished) {
  ASSERT_EQ(Run(Ctrbox("gen --rows 50000 --seed 1 --out " + Path("big.tsv"))).exit_code, 0);
  ASSERT_EQ(Run(Ctrbox("gen --rows 3000 --seed 2 --out " + Path("small.tsv"))).exit_code, 0);
  const std::string shards = Path("shards");
  Result c = Run(
      Ctrbox("convert --data " + Path("big.tsv") + " --out " + shards + " --rows-per-file 5000"));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(c.last_json["rows"], 50000);
  const std::string train = " --set model.mlp=16 --set train.batch_size=512 --fresh";

  // A conversion that did not finish: its files are there, the manifest (written last) is not.
  ASSERT_EQ(std::system(("cp -r " + shards + " " + Path("killed") + " && rm " + Path("killed") +
                         "/SHARDS " + Path("killed") + "/part-0000[4-9].ctrshard")
                            .c_str()),
            0);
  Result t = Run(Ctrbox("train --format shards --data " + Path("killed") + " --model-dir " +
                        Path("m0") + train));
  EXPECT_EQ(t.exit_code, 1);
  EXPECT_NE(t.err.find("did not finish"), std::string::npos) << t.err;
  EXPECT_FALSE(Env::Posix()->FileExists(Path("m0/MANIFEST")));

  // Converting 3000 rows into the directory of the 50000-row conversion replaces it.
  c = Run(
      Ctrbox("convert --data " + Path("small.tsv") + " --out " + shards + " --rows-per-file 5000"));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(c.last_json["rows"], 3000);
  EXPECT_NE(c.err.find("replacing an earlier conversion (10 files)"), std::string::npos) << c.err;
  t = Run(Ctrbox("train --format shards --data " + shards + " --model-dir " + Path("m1") + train));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(t.last_json["examples"], 3000);

  // A directory that holds files convert did not write is refused, and they are kept.
  ASSERT_EQ(::mkdir(Path("mine").c_str(), 0700), 0);
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("mine/notes.txt"), "keep").ok());
  c = Run(Ctrbox("convert --data " + Path("small.tsv") + " --out " + Path("mine")));
  EXPECT_EQ(c.exit_code, 1);
  EXPECT_NE(c.err.find("notes.txt"), std::string::npos) << c.err;
  EXPECT_TRUE(Env::Posix()->FileExists(Path("mine/notes.txt")));

  // A conversion that fails (here: no valid rows) leaves nothing behind.
  ASSERT_EQ(std::system(("printf 'x\\ty\\n' > " + Path("bad.tsv")).c_str()), 0);
  c = Run(Ctrbox("convert --data " + Path("bad.tsv") + " --out " + Path("none") +
                 " --set data.max_error_rate=1"));
  EXPECT_NE(c.exit_code, 0);
  EXPECT_FALSE(Env::Posix()->FileExists(Path("none"))) << c.err;
}

// Item 4: a FIFO in a data directory blocked the reader forever.
TEST_F(CliTest, AFifoInADataDirectoryIsRefusedUpFront) {
  ASSERT_EQ(::mkdir(Path("d").c_str(), 0700), 0);
  ASSERT_EQ(Run(Ctrbox("gen --rows 100 --out " + Path("d/a.tsv"))).exit_code, 0);
  ASSERT_EQ(::mkfifo(Path("d/b.fifo").c_str(), 0600), 0);
  Result r = Run("timeout 60 " + Ctrbox("train --data " + Path("d")));
  EXPECT_EQ(r.exit_code, 1) << r.err;  // 124 would be the timeout: the hang
  EXPECT_NE(r.err.find("b.fifo"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
  Result named = Run("timeout 60 " + Ctrbox("train --data " + Path("d/b.fifo")));
  EXPECT_EQ(named.exit_code, 1) << named.err;
  EXPECT_NE(named.err.find("not a regular file"), std::string::npos) << named.err;
}

// Item 4: with a data.command that stalled, SIGTERM acted only when the command ended, and
// then saved an empty model. The first signal now ends the wait within a fraction of a second,
// stops the command (no orphan), and a run that trained nothing saves nothing. The same holds
// for standard input fed by a stalled producer.
TEST_F(CliTest, AStalledCommandOrPipeGivesWayToTheFirstSignal) {
  ASSERT_EQ(Run(Ctrbox("gen --rows 100 --out " + Path("g.tsv"))).exit_code, 0);
  const std::string tag = std::to_string(::getpid() % 1000 + 1000);  // an unlikely sleep time
  for (const std::string& input :
       {"--set \"data.command=head -n 50 " + Path("g.tsv") + "; sleep " + tag + "\"",
        std::string("--data - < <(head -n 50 ") + Path("g.tsv") + "; sleep " + tag + ")"}) {
    const std::string log = Path("train.log");
    Result r = Run("timeout 60 bash -c '" + Ctrbox("train " + input + " --model-dir " + Path("m")) +
                   " 2>" + log +
                   " & pid=$!; sleep 1.5; kill -TERM $pid; start=$(date +%s%N); wait $pid; "
                   "echo exit=$? ms=$(( ($(date +%s%N) - start) / 1000000 )); cat " +
                   log + " >&2'");
    EXPECT_NE(r.out.find("exit=130"), std::string::npos) << input << r.out << r.err;
    const size_t ms_at = r.out.find("ms=");
    ASSERT_NE(ms_at, std::string::npos) << r.out;
    EXPECT_LT(std::stoi(r.out.substr(ms_at + 3)), 5000) << input << ": the signal waited";
    EXPECT_NE(r.err.find("nothing was saved"), std::string::npos) << input << r.err;
    EXPECT_FALSE(Env::Posix()->FileExists(Path("m"))) << input << ": something was written";
    if (input.find("data.command") != std::string::npos) {
      Result orphans = Run("pgrep -f \"^sleep " + tag + "$\"");
      EXPECT_NE(orphans.exit_code, 0) << "the command was left running: " << orphans.out;
    }
    (void)std::system(("pkill -f \"^sleep " + tag + "$\"").c_str());
  }
  // convert stops cleanly at the signal too (status 130, issue 45), and stops its
  // data.command.
  Result c = Run("timeout 60 bash -c '" +
                 Ctrbox("convert --set \"data.command=head -n 50 " + Path("g.tsv") + "; sleep " +
                        tag + "\" --out " + Path("s")) +
                 " 2>/dev/null & pid=$!; sleep 1; kill -TERM $pid; wait $pid; echo exit=$?'");
  EXPECT_NE(c.out.find("exit=130"), std::string::npos) << c.out;
  Result orphans = Run("pgrep -f \"^sleep " + tag + "$\"");
  EXPECT_NE(orphans.exit_code, 0) << "convert left its command running: " << orphans.out;
  (void)std::system(("pkill -f \"^sleep " + tag + "$\"").c_str());
}

// Item 5: -c DIR aborted with an uncaught exception (exit 134).
TEST_F(CliTest, AJobFileThatIsADirectoryIsAnError) {
  ASSERT_EQ(::mkdir(Path("jobdir").c_str(), 0700), 0);
  Result r = Run(Ctrbox("train -c " + Path("jobdir")));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
  Result missing = Run(Ctrbox("train -c " + Path("nope.yaml")));
  EXPECT_EQ(missing.exit_code, 1) << missing.err;
  EXPECT_NE(missing.err.find("nope.yaml"), std::string::npos) << missing.err;
}

// Item 6: model files without a MANIFEST were overwritten without a word.
TEST_F(CliTest, ModelFilesWithoutAManifestAreNotOverwrittenWithoutFresh) {
  const std::string train =
      "train --set data.gen.rows=3000 --set data.gen.test_rows=500 "
      "--set model.mlp=8 --model-dir " +
      Path("m");
  ASSERT_EQ(Run(Ctrbox(train)).exit_code, 0);
  ASSERT_EQ(std::remove(Path("m/MANIFEST").c_str()), 0);
  Result r = Run(Ctrbox(train));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("no MANIFEST"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--fresh"), std::string::npos) << r.err;
  EXPECT_TRUE(Env::Posix()->FileExists(Path("m/sparse-000001.bin")));  // untouched
  Result fresh = Run(Ctrbox(train + " --fresh"));
  EXPECT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_TRUE(Env::Posix()->FileExists(Path("m/MANIFEST")));
}

// Item 7: undefined metrics looked real (auc 0.5 on one-class labels; auc 0.5, logloss 0 and a
// saved model on empty input).
TEST_F(CliTest, UndefinedMetricsAreNullWithAReasonAndNoExamplesIsAnError) {
  ASSERT_EQ(Run(Ctrbox("gen --rows 3000 --seed 1 --out " + Path("g.tsv"))).exit_code, 0);
  ASSERT_EQ(
      Run(Ctrbox("train --data " + Path("g.tsv") +
                 " --set model.mlp=8 --set pipeline.pass_examples=1000 --model-dir " + Path("m")))
          .exit_code,
      0);
  // Every label 1: the AUC needs both classes.
  ASSERT_EQ(Run("sed 's/^0/1/' " + Path("g.tsv") + " > " + Path("pos.tsv")).exit_code, 0);
  Result pos = Run(Ctrbox("eval --model-dir " + Path("m") + " --data " + Path("pos.tsv")));
  ASSERT_EQ(pos.exit_code, 0) << pos.err;
  EXPECT_TRUE(pos.last_json["auc"].is_null()) << pos.out;
  EXPECT_TRUE(pos.last_json["auc_exact"].is_null()) << pos.out;
  EXPECT_EQ(pos.last_json["auc_undefined"], "every label is 1") << pos.out;
  EXPECT_GT(pos.last_json["logloss"].get<double>(), 0.0);  // still defined
  // Empty input: an error for eval and train, and train saves nothing.
  ASSERT_EQ(Run(": > " + Path("empty.tsv")).exit_code, 0);
  Result ev = Run(Ctrbox("eval --model-dir " + Path("m") + " --data " + Path("empty.tsv")));
  EXPECT_EQ(ev.exit_code, 1) << ev.out;
  EXPECT_NE(ev.err.find("no examples"), std::string::npos) << ev.err;
  Result tr = Run(Ctrbox("train --data " + Path("empty.tsv") + " --model-dir " + Path("e")));
  EXPECT_EQ(tr.exit_code, 1) << tr.out;
  EXPECT_NE(tr.err.find("no examples"), std::string::npos) << tr.err;
  EXPECT_FALSE(Env::Posix()->FileExists(Path("e/MANIFEST")));
  // A pass whose labels are all 0 logs an undefined AUC instead of failing or showing 0.5.
  ASSERT_EQ(Run("sed 's/^1/0/' " + Path("g.tsv") + " > " + Path("neg.tsv")).exit_code, 0);
  Result neg = Run(Ctrbox("train --data " + Path("neg.tsv") + " --set model.mlp=8 --model-dir " +
                          Path("n") + " --eval-data " + Path("neg.tsv")));
  ASSERT_EQ(neg.exit_code, 0) << neg.err;
  EXPECT_TRUE(neg.last_json["auc"].is_null()) << neg.out;
  EXPECT_TRUE(neg.last_json["test_auc"].is_null()) << neg.out;
  EXPECT_EQ(neg.last_json["test_auc_undefined"], "every label is 0");
  EXPECT_NE(neg.err.find("auc undefined (every label is 0)"), std::string::npos) << neg.err;
}

// Item 8: a second Ctrl-C abandoned the save silently, with the exit status of a clean save.
TEST_F(CliTest, ASecondInterruptSaysWhatItAbandonsAndHasItsOwnExitStatus) {
  // One pass of 300 000 generated rows: once its training has begun (a progress line), the
  // first signal lets it finish (seconds here), so the second lands while it trains.
  const std::string log = Path("train.log");
  const std::string train = Ctrbox(
      "train --set data.gen.rows=300000 --set data.gen.test_rows=1000 --set model.mlp=64 "
      "--set pipeline.pass_examples=300000 --set train.progress_seconds=0.1 --model-dir " +
      Path("m"));
  Result r = Run("bash -c '" + train + " 2>" + log +
                 " & pid=$!; for i in $(seq 600); do grep -q \"ex/s\" " + log +
                 " && break; sleep 0.1; done; kill -TERM $pid; sleep 0.3; kill -TERM $pid; "
                 "wait $pid; echo exit=$?; cat " +
                 log + " >&2'");
  EXPECT_NE(r.out.find("exit=3"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("second interrupt"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("abandoning"), std::string::npos) << r.err;
  EXPECT_FALSE(Env::Posix()->FileExists(Path("m/MANIFEST")));  // nothing was committed
}

// Item 9: settings that were silently dropped are refused, with the key (and line) named.
TEST_F(CliTest, SettingsThatWouldBeIgnoredAreRefused) {
  struct Case {
    std::string yaml, want;
  };
  for (const Case& c : std::vector<Case>{
           {"train:\n  threads: 2\n  threads: 3\n", "train.threads is given twice"},
           {"model:\n  mlp: 32\nmodel:\n  wide: true\n", "model is given twice"},
           {"train:\n  threads:\n", "train.threads has no value"},
           {"train:\n  threads: 2\n---\ntrain:\n  threads: 3\n", "a second YAML document"},
       }) {
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("job.yaml"), c.yaml).ok());
    Result r = Run(Ctrbox("train -c " + Path("job.yaml")));
    EXPECT_EQ(r.exit_code, 1) << c.yaml;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << c.yaml << r.err;
    EXPECT_NE(r.err.find("job.yaml:"), std::string::npos) << r.err;  // the line is named
  }
  Result budget = Run(Ctrbox("train --set storage.memory_budget=1GB"));
  EXPECT_EQ(budget.exit_code, 1);
  EXPECT_NE(budget.err.find("storage.memory_budget needs storage.ssd_dir"), std::string::npos)
      << budget.err;
  ASSERT_EQ(Run(Ctrbox("gen --format libsvm --rows 100 --out " + Path("l.txt"))).exit_code, 0);
  for (const std::string set : {"data.num_slots=26", "data.num_dense=13"}) {
    Result r = Run(Ctrbox("train --format libsvm --data " + Path("l.txt") + " --set " + set));
    EXPECT_EQ(r.exit_code, 1) << set;
    EXPECT_NE(r.err.find(set.substr(0, set.find('='))), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("libsvm"), std::string::npos) << r.err;
  }
}

// Item 11: a gzip log was reported as a field-count error, a UTF-8 BOM showed as an invisible
// character in the label, NUL bytes were echoed raw into the log, and a spec mismatch named
// the key but not the values.
TEST_F(CliTest, CompressedLogsAreReadAndMessagesShowWhatIsWrong) {
  ASSERT_EQ(Run(Ctrbox("gen --rows 4000 --seed 3 --out " + Path("g.tsv"))).exit_code, 0);
  ASSERT_EQ(std::system(("gzip -c " + Path("g.tsv") + " > " + Path("g.tsv.gz")).c_str()), 0);
  const std::string train = " --set model.mlp=16 --set train.batch_size=512 --fresh";
  Result plain =
      Run(Ctrbox("train --data " + Path("g.tsv") + " --model-dir " + Path("m1") + train));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  Result gz =
      Run(Ctrbox("train --data " + Path("g.tsv.gz") + " --model-dir " + Path("m2") + train));
  ASSERT_EQ(gz.exit_code, 0) << gz.err;
  EXPECT_EQ(gz.last_json["examples"], 4000);
  EXPECT_EQ(gz.last_json["digest"], plain.last_json["digest"]) << "gzip input must be lossless";
  // Standard input and a truncated file.
  Result piped = Run(Ctrbox("eval --model-dir " + Path("m1") + " --data -"), Path("g.tsv.gz"));
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.last_json["examples"], 4000);
  ASSERT_EQ(std::system(("head -c 20000 " + Path("g.tsv.gz") + " > " + Path("cut.gz")).c_str()), 0);
  Result cut = Run(Ctrbox("eval --model-dir " + Path("m1") + " --data " + Path("cut.gz")));
  EXPECT_EQ(cut.exit_code, 1);
  EXPECT_NE(cut.err.find("gzip stream is truncated"), std::string::npos) << cut.err;

  // A byte-order mark before the first record is skipped; control bytes in a quoted field are
  // escaped (the log stays text), as is a BOM in the middle of the file.
  std::string text;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("g.tsv"), &text).ok());
  const size_t second = text.find('\n') + 1;
  text = "\xEF\xBB\xBF" + text.substr(0, second) + std::string("\xEF\xBB\xBF") +
         text.substr(second, text.find('\n', second) + 1 - second) + std::string("1\0\x1b[31m", 8) +
         text.substr(second + 1);
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("odd.tsv"), text).ok());
  Result odd = Run(Ctrbox("eval --model-dir " + Path("m1") + " --data " + Path("odd.tsv")));
  ASSERT_EQ(odd.exit_code, 0) << odd.err;
  EXPECT_EQ(odd.last_json["examples"], 3999);  // the two bad lines skipped, the first read
  EXPECT_EQ(odd.last_json["records_malformed"], 2) << odd.out;
  EXPECT_EQ(odd.err.find('\0'), std::string::npos) << "a raw NUL reached the log";
  EXPECT_EQ(odd.err.find('\x1b'), std::string::npos) << "a raw ESC reached the log";
  EXPECT_NE(odd.err.find("odd.tsv:2: bad_label: label '\\uFEFF"), std::string::npos) << odd.err;
  EXPECT_NE(odd.err.find("\\x00\\x1b[31m"), std::string::npos) << odd.err;
  EXPECT_EQ(odd.err.find("odd.tsv:1:"), std::string::npos) << odd.err;

  // Continuing a model with another shape names both values.
  Result other = Run(Ctrbox("train --continue --data " + Path("g.tsv") + " --model-dir " +
                            Path("m1") + " --set model.mlp=16 --set model.embedding_dim=4"));
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.err.find("model.embedding_dim = 16 there, 4 now"), std::string::npos)
      << other.err;
}

// Item 12: --resume accepted a data file edited in place when its size was unchanged.
TEST_F(CliTest, ResumeRefusesDataEditedInPlace) {
  ASSERT_EQ(Run(Ctrbox("gen --rows 4000 --seed 4 --out " + Path("g.tsv"))).exit_code, 0);
  const std::string train = Ctrbox("train --data " + Path("g.tsv") + " --model-dir " + Path("m") +
                                   " --set ckpt.dir=" + Path("ck") +
                                   " --set pipeline.pass_examples=1000 --set model.mlp=16");
  ASSERT_EQ(Run(train).exit_code, 0);
  Result again = Run(train + " --resume");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  std::string text;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("g.tsv"), &text).ok());
  text[0] = text[0] == '0' ? '1' : '0';
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("g.tsv"), text).ok());
  Result r = Run(train + " --resume");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("has the same size but other content"), std::string::npos) << r.err;
}

// Item 10: failed commands left files behind: a .tmp from gen when --out was a directory, an
// empty metrics.jsonl (and the model directory made for it) from a train that failed. (The
// SSD scratch files and a partial sparse file after a full disk: train_resume_test's fault
// test, in MemEnv, where a disk can be filled at any call.)
TEST_F(CliTest, FailedCommandsLeaveNothingBehind) {
  ASSERT_EQ(::mkdir(Path("outdir").c_str(), 0700), 0);
  Result g = Run(Ctrbox("gen --rows 10 --out " + Path("outdir")));
  EXPECT_EQ(g.exit_code, 1);
  EXPECT_NE(g.err.find("is a directory"), std::string::npos) << g.err;
  EXPECT_FALSE(Env::Posix()->FileExists(Path("outdir.tmp")));

  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("bad.tsv"), "x\ty\nz\n").ok());
  Result t = Run(Ctrbox("train --data " + Path("bad.tsv") + " --model-dir " + Path("m") +
                        " --set data.max_error_rate=1"));
  EXPECT_EQ(t.exit_code, 1);
  EXPECT_NE(t.err.find("no examples"), std::string::npos) << t.err;
  EXPECT_FALSE(Env::Posix()->FileExists(Path("m"))) << "a failed train left its model directory";
}

}  // namespace
}  // namespace ctrbox
