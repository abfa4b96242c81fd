#include "util/crc32c.h"

#include <gtest/gtest.h>

#include <string>

#include "util/random.h"

namespace ctrbox {
namespace {

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c("", 0), 0u);
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);  // the standard check value
  std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
}

TEST(Crc32cTest, HardwareEqualsPortableAndExtendsInPieces) {
  Random rng(1);
  for (int trial = 0; trial < 400; ++trial) {
    // Short inputs, and long ones that take the three-stream blocks (3 x 64 and 3 x 1024
    // bytes) with every kind of remainder.
    std::string s(trial % 2 ? rng.Below(300) : rng.Below(12000), '\0');
    for (char& c : s) c = static_cast<char>(rng.Next());
    const uint32_t whole = Crc32c(s.data(), s.size());
    EXPECT_EQ(whole, Crc32cExtendPortable(0, s.data(), s.size()));
    size_t cut = s.empty() ? 0 : rng.Below(s.size());
    EXPECT_EQ(Crc32cExtend(Crc32c(s.data(), cut), s.data() + cut, s.size() - cut), whole);
  }
}

}  // namespace
}  // namespace ctrbox
