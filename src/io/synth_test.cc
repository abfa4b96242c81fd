#include "io/synth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "io/test_util.h"
#include "util/random.h"

namespace ctrbox {
namespace {

TEST(SynthTest, BatchFormEqualsTheParsedTextForm) {
  for (DataFormat f :
       {DataFormat::kCriteo, DataFormat::kSlots, DataFormat::kLibsvm, DataFormat::kLibfm}) {
    SynthOptions o;
    o.format = f;
    o.seed = 5;
    SynthGenerator g(o);
    Batch direct;
    std::vector<double> p1, p2;
    g.GenerateBatch(100, 600, &direct, &p1);
    TextChunk chunk;
    g.GenerateText(100, 600, &chunk.data, &p2);
    TextFormatOptions t;
    t.format = f;
    t.schema = g.schema();
    ChunkParseResult r;
    ParseTextChunk(t, chunk, &r);
    ASSERT_EQ(r.counts.bad_total(), 0u)
        << DataFormatName(f) << ": " << (r.samples.empty() ? "" : r.samples[0].ToString());
    EXPECT_TRUE(testing::SameBatch(direct, r.batch)) << DataFormatName(f);
    EXPECT_EQ(p1, p2);
  }
}

TEST(SynthTest, RowsDependOnlyOnSeedAndIndex) {
  SynthGenerator g(SynthOptions{});
  std::string whole, a, b;
  g.GenerateText(0, 300, &whole, nullptr);
  g.GenerateText(0, 120, &a, nullptr);
  g.GenerateText(120, 300, &b, nullptr);
  EXPECT_EQ(whole, a + b);
  SynthOptions other;
  other.seed = 2;
  std::string c;
  SynthGenerator(other).GenerateText(0, 300, &c, nullptr);
  EXPECT_NE(whole, c);
}

TEST(SynthTest, ClickRateAndZipfSkew) {
  SynthGenerator g(SynthOptions{});
  Batch b;
  std::vector<double> p;
  g.GenerateBatch(0, 20000, &b, &p);
  double ctr = 0;
  for (float l : b.labels) ctr += l;
  ctr /= b.rows();
  EXPECT_GT(ctr, 0.12);
  EXPECT_LT(ctr, 0.35);

  ZipfSampler z(1000, 1.15);
  Random rng(3);
  std::map<uint64_t, int> counts;
  for (int i = 0; i < 100000; ++i) {
    uint64_t v = z.Sample(&rng);
    ASSERT_LT(v, 1000u);
    ++counts[v];
  }
  // P(rank k) is proportional to (k+1)^-1.15: rank 0 vs rank 9 is 10^1.15 = 14.1.
  double ratio = static_cast<double>(counts[0]) / counts[9];
  EXPECT_NEAR(ratio, 14.1, 2.0);
}

}  // namespace
}  // namespace ctrbox
