#include "table/counting_bloom.h"

#include <gtest/gtest.h>

#include <unordered_map>

#include "util/random.h"

namespace ctrbox {
namespace {

// Against exact counts: never below a key's true count, and the keys that read as admitted
// (count >= t) while seen fewer than t times stay within the filter's false-positive bound.
TEST(CountingBloomTest, CountsNeverUnderAndFalseAdmissionsStayWithinTheBound) {
  for (uint32_t log2 : {14u, 16u}) {
    CountingBloom f(log2);
    std::unordered_map<uint64_t, uint32_t> exact;
    Random rng(log2);
    // A long tail: most keys once, some a few times, a head many times.
    for (int i = 0; i < 12000; ++i) {
      const double u = rng.Uniform();
      const uint64_t key = u < 0.6   ? Mix64(1000000 + i)                // one-off
                           : u < 0.9 ? Mix64(2000000 + rng.Below(1500))  // a few times
                                     : Mix64(3000000 + rng.Below(30));   // the head
      ++exact[key];
      EXPECT_GE(f.Add(key), std::min<uint32_t>(exact[key], 255));
    }
    for (uint32_t t : {2u, 3u, 5u}) {
      uint64_t below = 0, falsely = 0;
      for (const auto& [key, n] : exact) {
        ASSERT_GE(f.Count(key), std::min<uint32_t>(n, 255));
        if (n < t) {
          ++below;
          if (f.Count(key) >= t) ++falsely;
        }
      }
      const double rate = static_cast<double>(falsely) / static_cast<double>(below);
      const double bound = CountingBloom::FalsePositiveBound(exact.size(), log2);
      EXPECT_LE(rate, bound * 1.1 + 0.002) << "log2 " << log2 << " t " << t;
      RecordProperty("false_admission_rate_" + std::to_string(log2) + "_" + std::to_string(t),
                     std::to_string(rate) + " bound " + std::to_string(bound));
    }
  }
}

TEST(CountingBloomTest, EncodeDecodeRoundTripsAndDamageIsFound) {
  CountingBloom f(10);
  for (uint64_t k = 0; k < 500; ++k) f.Add(k % 37);
  const std::string bytes = f.Encode();
  auto g = CountingBloom::Decode(bytes, "admit.bin");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (uint64_t k = 0; k < 100; ++k) EXPECT_EQ(g->Count(k), f.Count(k));
  std::string bad = bytes;
  bad[100] ^= 4;
  auto h = CountingBloom::Decode(bad, "admit.bin");
  EXPECT_EQ(h.status().code(), StatusCode::kCorruption);
  EXPECT_NE(h.status().message().find("admit.bin"), std::string::npos);
}

}  // namespace
}  // namespace ctrbox
