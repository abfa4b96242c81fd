// PassReader: passes of pass_examples examples, never spanning two epochs; Skip checks a
// resumed job's input against its checkpoint.
#include "pipeline/pass_reader.h"

#include <gtest/gtest.h>

#include <vector>

#include "io/synth.h"

namespace ctrbox {
namespace {

// Generated rows in blocks of 300 (so passes cut across blocks).
PassReader Reader(uint64_t rows, uint64_t pass_examples, uint32_t epochs, int* opens) {
  return PassReader(
      [=]() -> StatusOr<std::unique_ptr<BatchReader>> {
        ++*opens;
        SynthOptions o;
        o.seed = 5;
        return NewSynthReader(o, rows, 1, 300);
      },
      PassReaderOptions{pass_examples, epochs});
}

std::vector<Batch> AllPasses(PassReader* r) {
  std::vector<Batch> passes;
  while (true) {
    Batch b;
    bool eof = false;
    EXPECT_TRUE(r->Next(&b, &eof).ok());
    if (eof) {
      EXPECT_EQ(b.rows(), 0u);
      return passes;
    }
    passes.push_back(std::move(b));
  }
}

TEST(PassReaderTest, CutsEachEpochIntoPassesThatNeverSpanTwoEpochs) {
  int opens = 0;
  PassReader r = Reader(2500, 1000, 2, &opens);
  ASSERT_TRUE(r.Open().ok());
  EXPECT_EQ(opens, 1);
  const std::vector<Batch> passes = AllPasses(&r);
  ASSERT_EQ(passes.size(), 6u);
  const size_t want[] = {1000, 1000, 500, 1000, 1000, 500};
  for (size_t p = 0; p < passes.size(); ++p) EXPECT_EQ(passes[p].rows(), want[p]) << p;
  EXPECT_EQ(opens, 2);  // a fresh reader per epoch
  // The second epoch reads the same examples in the same order.
  for (size_t p = 0; p < 3; ++p) {
    EXPECT_EQ(passes[p].labels, passes[p + 3].labels) << p;
    EXPECT_EQ(passes[p].keys, passes[p + 3].keys) << p;
  }
  // Together, the first epoch's passes are the input's rows in order.
  int opens2 = 0;
  PassReader whole = Reader(2500, 1 << 20, 1, &opens2);
  ASSERT_TRUE(whole.Open().ok());
  const std::vector<Batch> one = AllPasses(&whole);
  ASSERT_EQ(one.size(), 1u);
  std::vector<float> labels;
  for (size_t p = 0; p < 3; ++p)
    labels.insert(labels.end(), passes[p].labels.begin(), passes[p].labels.end());
  EXPECT_EQ(labels, one[0].labels);
  EXPECT_EQ(r.counts().good, 5000u);
}

TEST(PassReaderTest, SkipChecksThePassesAResumedJobAlreadyTrained) {
  int opens = 0;
  PassReader r = Reader(2500, 1000, 1, &opens);
  ASSERT_TRUE(r.Open().ok());
  ASSERT_TRUE(r.Skip(2, 2000).ok());
  Batch b;
  bool eof = false;
  ASSERT_TRUE(r.Next(&b, &eof).ok());
  EXPECT_EQ(b.rows(), 500u);

  PassReader fewer = Reader(2500, 1000, 1, &opens);
  ASSERT_TRUE(fewer.Open().ok());
  Status s = fewer.Skip(2, 1999);  // the checkpoint counted other examples: the data changed
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("1999"), std::string::npos) << s.ToString();

  PassReader shorter = Reader(2500, 1000, 1, &opens);
  ASSERT_TRUE(shorter.Open().ok());
  s = shorter.Skip(4, 4000);  // the input ends after 3 passes
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("ended after 3 passes"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace ctrbox
