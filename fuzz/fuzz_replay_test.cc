// Runs every fuzz target over its checked-in corpus (fuzz/corpus/<target>/: seeds and every
// finding kept as a regression input) and over deterministic mutations of each input: bit
// flips, truncations, insertions and splices. A crash or sanitizer report fails the test; in
// CI this is the short fuzz run that needs no clang (docs/fuzzing.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fuzz/fuzz_targets.h"
#include "util/env.h"
#include "util/random.h"

namespace ctrbox {
namespace {

std::vector<std::string> Corpus(const std::string& target) {
  std::vector<std::string> inputs;
  const std::filesystem::path dir =
      std::filesystem::path(CTRBOX_SOURCE_DIR) / "fuzz/corpus" / target;
  if (!std::filesystem::is_directory(dir)) return inputs;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::string s;
    EXPECT_TRUE(ReadFileToString(Env::Posix(), f.string(), &s).ok()) << f;
    inputs.push_back(std::move(s));
  }
  return inputs;
}

std::vector<std::string> CorpusNames(const std::string& target) {
  std::vector<std::string> names;
  const std::filesystem::path dir =
      std::filesystem::path(CTRBOX_SOURCE_DIR) / "fuzz/corpus" / target;
  if (!std::filesystem::is_directory(dir)) return names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

std::string Mutate(const std::string& in, const std::string& other, Random* rng) {
  std::string s = in;
  const int edits = 1 + static_cast<int>(rng->Below(4));
  for (int e = 0; e < edits; ++e) {
    switch (rng->Below(5)) {
      case 0:  // flip a bit
        if (!s.empty()) s[rng->Below(s.size())] ^= static_cast<char>(1 << rng->Below(8));
        break;
      case 1:  // truncate
        s.resize(rng->Below(s.size() + 1));
        break;
      case 2:  // insert random bytes
        s.insert(rng->Below(s.size() + 1),
                 std::string(1 + rng->Below(8), static_cast<char>(rng->Next())));
        break;
      case 3:  // overwrite a byte with an interesting value
        if (!s.empty()) {
          static constexpr char kVals[] = {
              0, 1, 0x7f, static_cast<char>(0x80), static_cast<char>(0xff), '\n', '\t', ':'};
          s[rng->Below(s.size())] = kVals[rng->Below(sizeof(kVals))];
        }
        break;
      default:  // splice in a piece of another input
        if (!other.empty()) {
          const size_t from = rng->Below(other.size()), n = rng->Below(other.size() - from + 1);
          s.insert(rng->Below(s.size() + 1), other.substr(from, n));
        }
    }
  }
  return s;
}

class FuzzReplayTest : public ::testing::TestWithParam<FuzzTarget> {};

TEST_P(FuzzReplayTest, CorpusAndMutationsRunClean) {
  const FuzzTarget& t = GetParam();
  if (std::getenv("CTRBOX_WRITE_SEEDS")) {  // regenerate the built-in seeds' corpus files
    const std::vector<std::string> seeds = BuiltInSeeds(t.name);
    const std::string dir = std::string(CTRBOX_SOURCE_DIR) + "/fuzz/corpus/" + t.name;
    for (size_t i = 0; i < seeds.size(); ++i) {
      ASSERT_TRUE(Env::Posix()->CreateDirs(dir).ok());
      ASSERT_TRUE(
          WriteFileAtomic(Env::Posix(), dir + "/builtin-" + std::to_string(i), seeds[i]).ok());
    }
  }
  const std::vector<std::string> corpus = Corpus(t.name);
  ASSERT_FALSE(corpus.empty()) << "no seed corpus in fuzz/corpus/" << t.name;
  auto run = [&](const std::string& s) {
    return t.fn(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  // Every seed (but those named *bad*) is valid input that the target parses to the end.
  const std::vector<std::string> names = CorpusNames(t.name);
  for (size_t i = 0; i < corpus.size(); ++i) {
    EXPECT_EQ(run(corpus[i]), 0);
    if (names[i].find("bad") == std::string::npos) {
      EXPECT_TRUE(LastInputAccepted()) << t.name << "/" << names[i] << " is not accepted";
    }
  }
  // Deterministic mutations: about 4 000 inputs per target (a few seconds in all).
  Random rng(0xF022);
  const int per_seed = static_cast<int>(4000 / corpus.size()) + 1;
  for (size_t i = 0; i < corpus.size(); ++i) {
    for (int m = 0; m < per_seed; ++m) {
      EXPECT_EQ(run(Mutate(corpus[i], corpus[rng.Below(corpus.size())], &rng)), 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzReplayTest, ::testing::ValuesIn(FuzzTargets()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ctrbox
