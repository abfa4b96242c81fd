// What a new user's second round of abuse found (issue 45): one regression test per class.
#include <fmt/format.h>
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
  // A bad held-out row past what that check reads: the model was saved first, and the error
  // says so and where.
  ASSERT_EQ(Run(Ctrbox("gen --rows 5000 --seed 7 --out " + Path("late.tsv"))).exit_code, 0);
  ASSERT_EQ(Run("echo 'not a row' >> " + Path("late.tsv")).exit_code, 0);
  Result late = Run(Ctrbox("train --data " + Path("g.tsv") + " --eval-data " + Path("late.tsv") +
                           " --model-dir " + Path("m3") +
                           " --set data.max_error_rate=0 --set data.chunk_bytes=64KB"));
  EXPECT_EQ(late.exit_code, 1);
  EXPECT_NE(late.err.find("late.tsv:5001"), std::string::npos) << late.err;
  EXPECT_NE(late.err.find("the trained model was saved before the test data was scored: " +
                          Path("m3") + ", digest "),
            std::string::npos)
      << late.err;
  EXPECT_TRUE(Env::Posix()->FileExists(Path("m3/MANIFEST")));
}

// A train command run again does not train its saved model further unasked: it says how to
// continue it or replace it, and leaves it as it was.
TEST_F(CliTest, ATrainCommandRunAgainDoesNotContinueItsModelUnasked) {
  ASSERT_EQ(Run(Ctrbox("gen --rows 3000 --out " + Path("g.tsv"))).exit_code, 0);
  const std::string cmd = "train --data " + Path("g.tsv") + " --model-dir " + Path("m");
  Result first = Run(Ctrbox(cmd));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // (3000 rows are too few for 256 steps of the rule's least batch, 128: the log says so.)
  EXPECT_NE(first.err.find("train.batch_size 128 for about 3000 rows"), std::string::npos)
      << first.err;
  EXPECT_NE(first.err.find("or 128 when the rows are too few for 256 steps"), std::string::npos)
      << first.err;
  Result again = Run(Ctrbox(cmd));
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find(Path("m") + " holds a trained model (" +
                           std::to_string(first.last_json["keys"].get<uint64_t>()) +
                           " keys, 3000 examples trained): pass --continue"),
            std::string::npos)
      << again.err;
  EXPECT_NE(again.err.find("--fresh to replace it"), std::string::npos) << again.err;
  Result same = Run(Ctrbox("inspect --model-dir " + Path("m")));
  EXPECT_EQ(same.last_json["digest"], first.last_json["digest"]);
  Result on = Run(Ctrbox(cmd + " --continue"));
  ASSERT_EQ(on.exit_code, 0) << on.err;
  EXPECT_NE(on.err.find("continuing training of the model in"), std::string::npos) << on.err;
  EXPECT_NE(on.last_json["digest"], first.last_json["digest"]);
  EXPECT_EQ(Run(Ctrbox(cmd + " --continue --fresh")).exit_code, 2);  // one or the other
  Result fresh = Run(Ctrbox(cmd + " --fresh"));
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_EQ(fresh.last_json["digest"], first.last_json["digest"]);  // a new model, the same
}

// train.epochs: auto validates on one process: on ranks it is refused before anything is
// written (each rank would validate its own share, and commit a model the ranks disagree on).
TEST_F(CliTest, EpochsAutoOnRanksIsRefusedBeforeAnythingIsWritten) {
  ASSERT_EQ(Run(Ctrbox("gen --rows 3000 --out " + Path("g.tsv"))).exit_code, 0);
  Result r = Run(Ctrbox("train --data " + Path("g.tsv") + " --local-ranks 2 --model-dir " +
                        Path("m") + " --set ckpt.dir=" + Path("ck") + " --set train.epochs=auto"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not built for ranks"), std::string::npos) << r.err;
  EXPECT_FALSE(Env::Posix()->FileExists(Path("m")));
  EXPECT_FALSE(Env::Posix()->FileExists(Path("ck")));
}

// Item 4: inputs that passed quietly. A job over a small main view joined to a side view,
// written here, with one abuse at a time.
class ViewAbuseTest : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    std::string main = "id,user,items,label\n";
    for (int i = 0; i < 300; ++i) {
      main += fmt::format("i{},u{},a{} b{} c,{}\n", i, i % 20, i % 7, i % 5, i % 3 == 0 ? 1 : 0);
    }
    Write("main.csv", main);
    std::string users = "user,age\n";
    for (int u = 0; u < 20; ++u) users += fmt::format("u{},{}\n", u, 20 + u);
    Write("users.csv", users);
  }
  void Write(const std::string& name, const std::string& text) {
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path(name), text).ok());
  }
  // The job file, with `users_extra` in the view and `ops_extra` after the ops.
  std::string Job(const std::string& users_extra = "", const std::string& ops_extra = "",
                  const std::string& features_extra = "", std::string data = "") {
    if (data.empty()) data = "paths: [" + dir_ + "/main.csv]";
    Write("job.yaml", fmt::format(R"(data:
  {4}
features:
{3}  main: {{format: csv, header: true, columns: {{id: string, user: string, items: string, label: int}}}}
  views:
    users: {{paths: [{0}/users.csv], format: csv, header: true, columns: {{user: string, age: int}}, key: user{1}}}
  ops:
    - {{op: join, view: users, on: user}}
    - {{name: words, op: split, input: items, sep: " "}}
    - {{name: pairs, op: cross, inputs: [words, words]}}
{2}  label: label
  slots: [user, words, pairs]
  dense: [users.age]
)",
                                  dir_, users_extra, ops_extra, features_extra, data));
    return " -c " + Path("job.yaml") + " --set model.mlp=16 --set train.batch_size=64";
  }
};

TEST_F(ViewAbuseTest, AnEmptySideViewIsRefusedUnlessAllowed) {
  Write("users.csv", "user,age\n");
  Result empty = Run(Ctrbox("train" + Job()));
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_NE(empty.err.find("view users: " + Path("users.csv") +
                           " has no rows with a key (a "
                           "header at most)"),
            std::string::npos)
      << empty.err;
  EXPECT_NE(empty.err.find("allow_empty: true"), std::string::npos) << empty.err;
  Result allowed = Run(Ctrbox("train" + Job(", allow_empty: true")));
  EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
}

TEST_F(ViewAbuseTest, DuplicateSideViewKeysAreCountedOnceAsBad) {
  std::string users;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("users.csv"), &users).ok());
  for (int u = 0; u < 5; ++u) users += fmt::format("u{},{}\n", u, 99);  // 5 keys again
  Write("users.csv", users);
  Result r = Run(Ctrbox("train" + Job() + " --set data.max_error_rate=0.5"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto& side = r.last_json["extract"]["side_bad"];
  EXPECT_EQ(side["records_good"], 20);  // 25 rows: 20 keys, 5 again (was: 25 good + 5 bad)
  EXPECT_EQ(side["malformed"]["duplicate_key"], 5);
  EXPECT_NE(r.err.find("of 25 (duplicate_key 5)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("users.csv:22: duplicate_key: view users: the key of line 2 again"),
            std::string::npos)
      << r.err;
}

TEST_F(ViewAbuseTest, AViewLineLongerThanTheLimitIsOverlongAsInEveryReader) {
  std::string main;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("main.csv"), &main).ok());
  main.insert(main.find("\ni5,") + 1, "i5" + std::string(5000, 'x'));  // 5 KB, between short lines
  Write("main.csv", main);
  Result r = Run(Ctrbox("train" + Job() + " --set data.max_line_bytes=1KB"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.last_json["malformed"]["overlong_line"], 1);
  EXPECT_NE(r.err.find("main.csv:7: overlong_line"), std::string::npos) << r.err;
  EXPECT_EQ(r.last_json["extract"]["rows_in"], 299);
}

TEST_F(ViewAbuseTest, AHeaderNamingAColumnTwiceIsRefused) {
  std::string main;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("main.csv"), &main).ok());
  main.replace(0, main.find('\n'), "id,user,items,user");
  Write("main.csv", main);
  Result r = Run(Ctrbox("train" + Job()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("the header names column 'user' twice (fields 2 and 4)"), std::string::npos)
      << r.err;
}

// A cross over one long list made 9.4 M keys and 5 GB with max_keys: 10000000. A row makes at
// most features.max_row_keys keys; one that would make more is bad (too_many_keys), counted
// and named, and no key of it is made.
TEST_F(ViewAbuseTest, ARowMakingMoreKeysThanTheBoundIsBadAndCostsNothing) {
  std::string main;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("main.csv"), &main).ok());
  std::string items;
  for (int k = 0; k < 3000; ++k) items += fmt::format("{}w{}", k ? " " : "", k);
  main.replace(main.find("a3 b3 c"), 7, items);  // row i3: a cross of 9 M combinations
  Write("main.csv", main);
  const std::string big =
      "    - {name: big, op: cross, inputs: [words, words], max_keys: 10000000}\n";
  Result r = Run(
      Ctrbox("train" + Job("", big, "  max_row_keys: 5000\n") + " --set data.max_error_rate=0.01"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.last_json["malformed"]["too_many_keys"], 1);
  EXPECT_NE(r.err.find("main.csv:5: too_many_keys: operator pairs (cross) makes more than 5000 "
                       "keys from words, words (its max_keys 65536, features.max_row_keys 5000)"),
            std::string::npos)
      << r.err;
  EXPECT_LT(r.last_json["peak_rss_bytes"].get<double>(), 1e9);
  // A row whose slots together make more than the bound (here: its cross 900 keys, its
  // words 30, its user 1; the bound 920) is bad too (i3 still is).
  items.clear();
  for (int k = 0; k < 30; ++k) items += fmt::format("{}w{}", k ? " " : "", k);
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("main.csv"), &main).ok());
  main.replace(main.find("a4 b4 c"), 7, items);
  Write("main.csv", main);
  Result split = Run(
      Ctrbox("train" + Job("", "", "  max_row_keys: 920\n") + " --set data.max_error_rate=0.01"));
  ASSERT_EQ(split.exit_code, 0) << split.err;
  EXPECT_EQ(split.last_json["malformed"]["too_many_keys"], 2);  // rows i3 and i4
  EXPECT_NE(split.err.find("main.csv:6: too_many_keys: the row makes 931 keys, more than "
                           "features.max_row_keys 920 (slot pairs makes 900)"),
            std::string::npos)
      << split.err;
  Result bad = Run(Ctrbox("train" + Job("", "", "  max_row_keys: 0\n")));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("max_row_keys '0': expected an integer in [1, 10^7]"), std::string::npos)
      << bad.err;
}

TEST_F(ViewAbuseTest, AFillValueThatIsNotAnIntegerIsRefusedForAnIntColumn) {
  Result r = Run(Ctrbox(
      "train" + Job("", "    - {name: age, op: fill_null, input: users.age, value: 2.5}\n")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("fill_null ('age'): value 2.5 is not an integer, and 'users.age' is int"),
            std::string::npos)
      << r.err;
  Result whole = Run(
      Ctrbox("train" + Job("", "    - {name: age, op: fill_null, input: users.age, value: 2.0}\n") +
             " --set data.max_error_rate=0.5"));
  EXPECT_EQ(whole.exit_code, 0) << whole.err;
}

TEST_F(ViewAbuseTest, InvalidUtf8IsEscapedInTheLogAndTheReport) {
  std::string main;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("main.csv"), &main).ok());
  main.replace(main.find("i4,u4"), 5, "i4,u\xff\xfe");
  Write("main.csv", main);
  Result r = Run(Ctrbox("train" + Job() + " --set data.max_error_rate=0.5"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("column user: u\\xff\\xfe"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\xff'), std::string::npos) << "a raw byte in the log";
  // A path that is not UTF-8 ends in the JSON report (with U+FFFD), not in an abort.
  Result odd = Run(Ctrbox("gen --rows 2000 --out " + Path("\xff.tsv")));
  ASSERT_EQ(odd.exit_code, 0) << odd.err;
  EXPECT_TRUE(odd.last_json.is_object()) << odd.out;
}

TEST_F(ViewAbuseTest, AFilterThatDropsEveryRowSaysSoAndWritesNothing) {
  const std::string none = "    - {op: filter, input: label, cmp: \"==\", value: 7}\n";
  Result r = Run(Ctrbox("train" + Job("", none) + " --model-dir " + Path("m")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("the feature graph read 300 rows: 300 filtered out by its filters"),
            std::string::npos)
      << r.err;
  Result text = Run(Ctrbox("extract" + Job("", none) + " --text " + Path("rows.txt")));
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_NE(text.err.find("300 filtered out"), std::string::npos) << text.err;
  EXPECT_FALSE(Env::Posix()->FileExists(Path("rows.txt")));
  EXPECT_FALSE(Env::Posix()->FileExists(Path("rows.txt.tmp")));
  Result shards = Run(Ctrbox("extract" + Job("", none) + " --out " + Path("sh")));
  EXPECT_EQ(shards.exit_code, 1);
  EXPECT_FALSE(Env::Posix()->FileExists(Path("sh")));
}

// Item 3 with a feature graph: held-out views whose header differs from the training view's
// were found after training ("dev.csv:1: the header differs ..."), with no report.
TEST_F(ViewAbuseTest, AHeldOutViewWithAnotherHeaderIsRefusedBeforeTraining) {
  std::string main;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("main.csv"), &main).ok());
  const std::string rows = main.substr(main.find('\n') + 1);
  Write("dev.csv", "id,user,items,region\n" + rows);  // a header of other columns
  const std::string job =
      Job("", "", "",
          "paths: [" + Path("main.csv") + "]\n  eval_paths: [" + Path("dev.csv") + "]") +
      " --model-dir " + Path("m");
  Result r = Run(Ctrbox("train" + job));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(Path("dev.csv") + ":1: the header differs from the main view's first "
                                         "file's"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("pass 0"), std::string::npos) << "it trained first: " << r.err;
  EXPECT_FALSE(Env::Posix()->FileExists(Path("m")));
  // The same header, or none (issue 44: line 1 is then data): trains and evaluates.
  for (const std::string& dev : {main, rows}) {
    Write("dev.csv", dev);
    Result ok = Run(Ctrbox("train --fresh" + job));
    EXPECT_EQ(ok.exit_code, 0) << ok.err;
    EXPECT_EQ(ok.last_json["test_examples"], 300);
  }
}

// Item 5: convert and extract died silently on SIGTERM (rc 143) leaving part files. The first
// signal stops them cleanly: a message, status 130, and nothing of the output left.
TEST_F(ViewAbuseTest, ConvertAndExtractStopCleanlyOnSigterm) {
  ASSERT_EQ(Run(Ctrbox("gen --rows 20000 --out " + Path("g.tsv"))).exit_code, 0);
  const std::string tag = std::to_string(::getpid() % 1000 + 3000);  // an unlikely sleep time
  struct Case {
    std::string command, out;
  };
  for (const Case& c :
       {Case{"convert --rows-per-file 2000 --set \"data.command=cat " + Path("g.tsv") + "; sleep " +
                 tag + "\"",
             "s"},
        Case{"extract" + Job("", "", "", "command: cat " + Path("main.csv") + "; sleep " + tag) +
                 " --rows-per-file 50",
             "x"}}) {
    SCOPED_TRACE(c.command);
    // Started in the background; once it has read the data (and waits on the stalled
    // command), SIGTERM.
    Result r = Run("bash -c '" + Ctrbox(c.command + " --out " + Path(c.out)) + " >/dev/null 2>" +
                   Path("stop.log") + " & p=$!; for i in $(seq 600); do [ -e " + Path(c.out) +
                   "/LOCK ] && break; sleep 0.05; done; sleep 1; kill -TERM $p; wait $p; echo " +
                   "rc=$?'");
    EXPECT_NE(r.out.find("rc=130"), std::string::npos) << r.out << r.err;
    std::string log;
    ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("stop.log"), &log).ok());
    EXPECT_NE(log.find("interrupted: stopped before the end of the input; nothing is written to " +
                       Path(c.out)),
              std::string::npos)
        << log;
    EXPECT_FALSE(Env::Posix()->FileExists(Path(c.out))) << "output left behind";
    (void)std::system(("pkill -f \"^sleep " + tag + "$\"").c_str());
  }
}

}  // namespace
}  // namespace ctrbox
