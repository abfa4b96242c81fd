#include "io/shard.h"

#include <gtest/gtest.h>

#include "io/reader.h"
#include "io/test_util.h"
#include "util/hash.h"

namespace ctrbox {
namespace {

using testing::RandomBatch;
using testing::SameBatch;
using testing::TempDir;

Status WriteShard(const std::string& path, const std::vector<Batch>& batches,
                  ShardWriterOptions o) {
  ASSIGN_OR_RETURN(auto w, ShardWriter::Open(Env::Posix(), path, batches[0].schema, o));
  for (const Batch& b : batches) RETURN_IF_ERROR(w->Add(b));
  return w->Finish();
}

StatusOr<Batch> ReadShard(const std::string& path, int threads) {
  DataOptions o;
  o.paths = {path};
  o.format = DataFormat::kShards;
  o.threads = threads;
  return testing::ReadAll(o);
}

TEST(ShardTest, RoundTripsEveryCodecAndShape) {
  TempDir dir;
  for (ShardCodec codec : {ShardCodec::kNone, ShardCodec::kZstd, ShardCodec::kLz4}) {
    for (bool multi : {false, true}) {
      for (bool weights : {false, true}) {
        Schema schema{5, 3};
        std::vector<Batch> parts = {RandomBatch(schema, 700, 1, multi, weights),
                                    RandomBatch(schema, 333, 2, multi, weights)};
        Batch expect;
        expect.Reset(schema);
        for (const Batch& p : parts) expect.AppendRows(p, 0, p.rows());
        ShardWriterOptions o;
        o.codec = codec;
        o.block_rows = 256;
        std::string path = dir.File("x.ctrshard");
        ASSERT_TRUE(WriteShard(path, parts, o).ok());
        for (int threads : {1, 3}) {
          auto got = ReadShard(path, threads);
          ASSERT_TRUE(got.ok()) << got.status().ToString();
          EXPECT_TRUE(SameBatch(*got, expect)) << static_cast<int>(codec) << multi << weights;
        }
      }
    }
  }
}

TEST(ShardTest, EveryCorruptedByteIsDetected) {
  TempDir dir;
  std::string path = dir.File("c.ctrshard");
  ShardWriterOptions o;
  o.block_rows = 40;
  ASSERT_TRUE(WriteShard(path, {RandomBatch(Schema{3, 2}, 100, 3, true, false)}, o).ok());
  std::string good;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), path, &good).ok());
  // Flip one bit of every byte in turn: a read must fail with a corruption error or, when
  // the flip hits a header checksum, still fail; it must never return different data.
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= static_cast<char>(1 << (i % 8));
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), path, bad).ok());
    auto got = ReadShard(path, 1);
    ASSERT_FALSE(got.ok()) << "flip at byte " << i << " went unnoticed";
    EXPECT_EQ(got.status().code(), StatusCode::kCorruption) << got.status().ToString();
    EXPECT_NE(got.status().message().find("c.ctrshard"), std::string::npos);
  }
  // Truncation at every length is detected too.
  for (size_t len = 0; len < good.size(); len += 7) {
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), path, good.substr(0, len)).ok());
    auto got = ReadShard(path, 1);
    ASSERT_FALSE(got.ok()) << "truncation to " << len;
  }
}

TEST(ShardTest, FormatIsPinned) {
  // Compatibility: the bytes of a small shard must never change within version 1.
  TempDir dir;
  std::string path = dir.File("p.ctrshard");
  Batch b;
  b.Reset(Schema{2, 1});
  BatchBuilder builder(&b);
  builder.BeginRow(1);
  builder.SetDense(0, 3);
  builder.AddKey(0, 42);
  builder.AddKey(1, 7);
  builder.EndRow();
  builder.BeginRow(0);
  builder.AddKey(0, 42);
  builder.AddKey(1, 8, 0.5f);
  builder.EndRow();
  ShardWriterOptions o;
  o.codec = ShardCodec::kNone;
  ASSERT_TRUE(WriteShard(path, {b}, o).ok());
  std::string bytes;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), path, &bytes).ok());
  EXPECT_EQ(bytes.size(), 32u + 56 + (2 + 8 + 3 * 8 + 4 * 4 + 4 * 4) + 40);
  EXPECT_EQ(Checksum64(bytes), 0xaca4267206847030ull) << std::hex << Checksum64(bytes);
}

}  // namespace
}  // namespace ctrbox
