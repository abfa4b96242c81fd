// CRC32C benchmark: GB/s of the checksum every SSD-PS record carries (util/crc32c.h: three
// crc32 streams in parallel, combined) against two references over the same bytes: one crc32
// dependency chain (what util/crc32c.cc did before the three streams) and the table version
// (Crc32cExtendPortable). Sizes: a row (148 B), a delta (1 KiB), a base record (8 KiB), 64 KiB.
//
//   build/bench/crc_bench [--reps 5]
//
// Prints a JSON line per size: the median GB/s of each over the reps, and the ratios.
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "bench/bench_util.h"
#include "util/crc32c.h"

namespace ctrbox::bench {
namespace {

#if defined(__x86_64__)
// The reference: one dependent chain of 8-byte crc32 steps.
__attribute__((target("sse4.2"))) uint32_t OneStream(uint32_t crc, const char* p, size_t n) {
  uint64_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n) c32 = _mm_crc32_u8(c32, static_cast<uint8_t>(*p++));
  return ~c32;
}
#endif

template <typename F>
double GbPerSecond(F crc, const std::string& data, size_t len, uint32_t* sink) {
  const size_t calls = std::max<size_t>(1, (size_t{256} << 20) / len);  // 256 MB a rep
  Stopwatch clock;
  uint32_t x = 0;
  for (size_t i = 0; i < calls; ++i) x ^= crc(data.data() + (i % 64), len);
  const double s = clock.Seconds();
  *sink ^= x;
  return static_cast<double>(calls) * static_cast<double>(len) / s / 1e9;
}

int Main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
  }
  std::string data((64 << 10) + 64, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + (i >> 7));
  uint32_t sink = 0;
  for (size_t len : {size_t{148}, size_t{1024}, size_t{8192}, size_t{65536}}) {
    std::vector<double> fast, table, one;
    for (int r = 0; r < reps; ++r) {
      fast.push_back(
          GbPerSecond([](const char* p, size_t n) { return Crc32c(p, n); }, data, len, &sink));
      table.push_back(GbPerSecond(
          [](const char* p, size_t n) { return Crc32cExtendPortable(0, p, n); }, data, len, &sink));
#if defined(__x86_64__)
      if (__builtin_cpu_supports("sse4.2")) {
        one.push_back(GbPerSecond([](const char* p, size_t n) { return OneStream(0, p, n); }, data,
                                  len, &sink));
      }
#endif
    }
    nlohmann::json j = {{"bench", "crc32c"},
                        {"bytes", len},
                        {"reps", reps},
                        {"three_streams_gb_s", Median(fast)},
                        {"table_gb_s", Median(table)},
                        {"ratio_over_table", Median(fast) / Median(table)}};
    if (!one.empty()) {
      j["one_stream_gb_s"] = Median(one);
      j["ratio_over_one_stream"] = Median(fast) / Median(one);
    }
    j["checksums_xor"] = sink;  // printed so that no checksum can be optimised away
    Emit(j);
  }
  return 0;
}

}  // namespace
}  // namespace ctrbox::bench

int main(int argc, char** argv) { return ctrbox::bench::Main(argc, argv); }
