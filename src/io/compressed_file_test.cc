#include "io/compressed_file.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <cstring>

#include "io/reader.h"
#include "io/test_util.h"
#include "util/random.h"

namespace ctrbox {
namespace {

// Serves `data` in reads of at most `step` bytes, as a pipe does.
class StringFile final : public SequentialFile {
 public:
  StringFile(std::string data, size_t step) : data_(std::move(data)), step_(step) {}
  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    *bytes_read = std::min({n, step_, data_.size() - pos_});
    std::memcpy(scratch, data_.data() + pos_, *bytes_read);
    pos_ += *bytes_read;
    return Status::OK();
  }
  const std::string& name() const override { return name_; }

 private:
  std::string data_, name_ = "in.txt";
  size_t step_, pos_ = 0;
};

std::string Gzip(std::string_view text) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, text.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// With a content checksum, as the zstd command line writes by default (a frame without one
// cannot be checked for damage to its literals).
std::string Zstd(std::string_view text) {
  ZSTD_CCtx* ctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(ctx, ZSTD_c_checksumFlag, 1);
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const size_t n = ZSTD_compress2(ctx, out.data(), out.size(), text.data(), text.size());
  ZSTD_freeCCtx(ctx);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

std::string Lines(uint64_t seed, size_t n) {
  Random rng(seed);
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{}\t{}\t{:x}\n", rng.Below(2), i, rng.Next());
  return s;
}

// Reads all of `data` through OpenDecompressed in reads of `read_size`.
StatusOr<std::string> ReadThrough(std::string data, size_t step, size_t read_size,
                                  Compression* c = nullptr) {
  ASSIGN_OR_RETURN(auto f,
                   OpenDecompressed(std::make_unique<StringFile>(std::move(data), step), c));
  std::string out, buf(read_size, '\0');
  while (true) {
    size_t got = 0;
    RETURN_IF_ERROR(f->Read(buf.size(), buf.data(), &got));
    if (got == 0) return out;
    out.append(buf.data(), got);
  }
}

TEST(CompressedFileTest, DecompressesGzipAndZstdAndPassesPlainBytesThrough) {
  const std::string a = Lines(1, 5000), b = Lines(2, 3000);
  struct Case {
    std::string name, data, want;
    Compression c;
  };
  const std::vector<Case> cases = {
      {"plain", a, a, Compression::kNone},
      {"empty", "", "", Compression::kNone},
      {"short", "1\n", "1\n", Compression::kNone},
      {"gzip", Gzip(a), a, Compression::kGzip},
      {"gzip members", Gzip(a) + Gzip(b), a + b, Compression::kGzip},
      {"gzip empty", Gzip(""), "", Compression::kGzip},
      {"zstd", Zstd(a), a, Compression::kZstd},
      {"zstd frames", Zstd(a) + Zstd(b), a + b, Compression::kZstd},
  };
  for (const Case& k : cases) {
    for (size_t step : {size_t{1}, size_t{7}, size_t{1} << 20}) {
      for (size_t read_size : {size_t{1}, size_t{4093}, size_t{1} << 20}) {
        if (step == 1 && read_size == 1 && k.want.size() > 10000) continue;  // slow, no news
        Compression got_c;
        auto out = ReadThrough(k.data, step, read_size, &got_c);
        ASSERT_TRUE(out.ok()) << k.name << ": " << out.status().ToString();
        EXPECT_EQ(*out, k.want) << k.name << " step " << step << " read " << read_size;
        EXPECT_EQ(got_c, k.c) << k.name;
      }
    }
  }
}

// A compressed file cut short or damaged is an error naming the file, never a shorter input.
TEST(CompressedFileTest, TruncatedAndCorruptStreamsAreErrors) {
  const std::string text = Lines(3, 2000);
  for (const std::string& z : {Gzip(text), Zstd(text)}) {
    for (size_t cut : {size_t{5}, size_t{10}, z.size() / 2, z.size() - 1}) {
      auto out = ReadThrough(z.substr(0, cut), 1 << 16, 1 << 16);
      ASSERT_FALSE(out.ok()) << "cut at " << cut;
      EXPECT_NE(out.status().message().find("in.txt"), std::string::npos);
    }
    for (size_t at : {z.size() / 3, z.size() - 3}) {
      std::string bad = z;
      bad[at] ^= 0x55;
      auto out = ReadThrough(bad, 1 << 16, 1 << 16);
      EXPECT_FALSE(out.ok() && *out == text) << "flipped byte " << at;
      EXPECT_FALSE(out.ok()) << "flipped byte " << at;
    }
  }
  auto out = ReadThrough(Gzip(text) + "trailing junk", 1 << 16, 1 << 16);
  EXPECT_FALSE(out.ok());
}

TEST(CompressedFileTest, OtherCompressionsAreNamed) {
  auto bz = OpenDecompressed(std::make_unique<StringFile>("BZh91AY&SY", 100));
  ASSERT_FALSE(bz.ok());
  EXPECT_NE(bz.status().message().find("bzip2"), std::string::npos);
  auto xz = OpenDecompressed(std::make_unique<StringFile>(std::string("\xfd"
                                                                      "7zXZ\0\0",
                                                                      7),
                                                          100));
  ASSERT_FALSE(xz.ok());
  EXPECT_NE(xz.status().message().find("xz"), std::string::npos);
}

// The reader trains on a gzip log exactly as on the plain one.
TEST(CompressedFileTest, TheReaderReadsCompressedLogsLosslessly) {
  testing::TempDir dir;
  std::string text;
  for (int i = 0; i < 300; ++i) text += fmt::format("{} 1:{} 2:{}\n", i % 2, i % 17, i % 5);
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), dir.File("a.txt"), text).ok());
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), dir.File("a.txt.gz"), Gzip(text)).ok());
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), dir.File("a.txt.zst"), Zstd(text)).ok());
  DataOptions o;
  o.format = DataFormat::kLibsvm;
  o.paths = {dir.File("a.txt")};
  auto plain = testing::ReadAll(o);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->rows(), 300u);
  for (const char* name : {"a.txt.gz", "a.txt.zst"}) {
    o.paths = {dir.File(name)};
    auto got = testing::ReadAll(o);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status().ToString();
    EXPECT_TRUE(testing::SameBatch(*plain, *got)) << name;
  }
}

}  // namespace
}  // namespace ctrbox
