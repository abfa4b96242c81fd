// The feature graph guessed for a headed CSV file (feature/csv_guess.h): each column's role
// from the sample, a graph that parses, and errors that name the file, line and column.
#include "feature/csv_guess.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>

#include "util/temp_dir.h"

namespace ctrbox {
namespace {

using testing::TempDir;

std::string Write(const TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.File(name)) << text;
  return dir.File(name);
}

// 300 rows: a row id, the label, an hour code, a site name, a price (never negative), a
// temperature (signed), a note that is always empty.
std::string Sample() {
  std::string t = "id,Click,hour,site,price,temp,note\n";
  for (int i = 0; i < 300; ++i) {
    t += fmt::format("{},{},{},\"s,{}\",{:.2f},{:.1f},\n", 1000 + i, i % 3 == 0 ? 1 : 0, i % 24,
                     i % 7, 0.5 + i * 1.25, -20.0 + i * 0.3);
  }
  return t;
}

TEST(CsvGuessTest, EachColumnGetsItsRoleAndTheGraphParses) {
  TempDir dir;
  const std::string file = Write(dir, "train.csv", Sample());
  auto g = GuessCsvFeatures(Env::Posix(), {file}, CsvGuessOptions());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->summary,
            "label Click; 2 slots (hour, site); 2 dense (price, temp: (x - min) / sd); "
            "left out: id (every value differs: a row id?), note (empty in the sample)");
  auto plan = ParseFeatures(YAML::Load(g->features_yaml), "guess");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString() << "\n" << g->features_yaml;
  // The job file holds the same graph under features:, with the data.
  YAML::Node job = YAML::Load(g->job_yaml);
  EXPECT_EQ(job["data"]["paths"][0].as<std::string>(), file);
  EXPECT_TRUE(ParseFeatures(job["features"], "job").ok());
  EXPECT_NE(g->features_yaml.find("op: normalize, input: \"temp\", mean: -20, std: 25.98"),
            std::string::npos)
      << g->features_yaml;
}

TEST(CsvGuessTest, TheLabelIsNamedOrRefusedWithItsLine) {
  TempDir dir;
  const std::string file = Write(dir, "t.csv", "a,b,outcome\nx,1,1\ny,2,0\n");
  auto none = GuessCsvFeatures(Env::Posix(), {file}, CsvGuessOptions());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().ToString().find("no column is named as a label"), std::string::npos);
  EXPECT_NE(none.status().ToString().find("its header: a, b, outcome"), std::string::npos);
  CsvGuessOptions o;
  o.label = "outcome";
  auto named = GuessCsvFeatures(Env::Posix(), {file}, o);
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_EQ(named->summary, "label outcome; 2 slots (a, b); 0 dense (none)");
  o.label = "nope";
  EXPECT_NE(GuessCsvFeatures(Env::Posix(), {file}, o)
                .status()
                .ToString()
                .find("data.label_column nope: " + file + " has no such column"),
            std::string::npos);
  const std::string yes = Write(dir, "yes.csv", "site,click\na,1\nb,yes\n");
  auto bad = GuessCsvFeatures(Env::Posix(), {yes}, CsvGuessOptions());
  EXPECT_NE(bad.status().ToString().find(yes + ":3: the label column click holds 'yes'"),
            std::string::npos)
      << bad.status().ToString();
}

TEST(CsvGuessTest, AFileWithoutAHeaderIsNamedAndACompressedOneIsRead) {
  TempDir dir;
  const std::string raw = Write(dir, "raw.csv", "1,0.5,3\n0,0.25,4\n");
  auto r = GuessCsvFeatures(Env::Posix(), {raw}, CsvGuessOptions());
  EXPECT_NE(r.status().ToString().find(raw + ":1: mostly numbers is not a header"),
            std::string::npos)
      << r.status().ToString();
  const std::string tabs = Write(dir, "tabs.csv", "click\tsite\n1\ta\n");
  r = GuessCsvFeatures(Env::Posix(), {tabs}, CsvGuessOptions());
  EXPECT_NE(r.status().ToString().find("the line has tabs: --format tsv?"), std::string::npos)
      << r.status().ToString();
  CsvGuessOptions tsv;
  tsv.format = ViewFormat::kTsv;
  EXPECT_TRUE(GuessCsvFeatures(Env::Posix(), {tabs}, tsv).ok());
  // A compressed file is read as every text reader reads it; a damaged one names the file.
  Write(dir, "z.csv", Sample());
  ASSERT_EQ(std::system(("gzip -k " + dir.File("z.csv")).c_str()), 0);
  auto gz = GuessCsvFeatures(Env::Posix(), {dir.File("z.csv.gz")}, CsvGuessOptions());
  ASSERT_TRUE(gz.ok()) << gz.status().ToString();
  EXPECT_EQ(gz->summary,
            GuessCsvFeatures(Env::Posix(), {dir.File("z.csv")}, CsvGuessOptions())->summary);
  const std::string bad = Write(dir, "x.csv.gz", std::string("\x1f\x8b\x08\x00", 4) + "zz");
  r = GuessCsvFeatures(Env::Posix(), {bad}, CsvGuessOptions());
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find(bad), std::string::npos) << r.status().ToString();
  EXPECT_NE(GuessCsvFeatures(Env::Posix(), {"-"}, CsvGuessOptions())
                .status()
                .ToString()
                .find("standard input cannot be read twice"),
            std::string::npos);
}

}  // namespace
}  // namespace ctrbox
