#include "io/shard_dir.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "io/reader.h"
#include "io/shard.h"
#include "io/test_util.h"
#include "util/hash.h"

namespace ctrbox {
namespace {

using testing::RandomBatch;
using testing::TempDir;

bool Contains(const Status& s, std::string_view what) {
  return s.message().find(what) != std::string::npos;
}

// Writes `rows_per_file` shards into `dir` as convert does, with or without the manifest.
ShardDirManifest WriteDir(const std::string& dir, const std::vector<size_t>& rows_per_file,
                          bool manifest) {
  Env* env = Env::Posix();
  const Schema schema{4, 2};
  ShardDirManifest m;
  m.schema = schema;
  for (size_t i = 0; i < rows_per_file.size(); ++i) {
    const std::string name = "part-0000" + std::to_string(i) + ".ctrshard";
    auto w = ShardWriter::Open(env, JoinPath(dir, name), schema, {});
    EXPECT_TRUE(w.ok());
    EXPECT_TRUE((*w)->Add(RandomBatch(schema, rows_per_file[i], i, true, false)).ok());
    EXPECT_TRUE((*w)->Finish().ok());
    m.files.push_back({name, rows_per_file[i], (*w)->bytes_written()});
  }
  if (manifest) {
    EXPECT_TRUE(WriteShardManifest(env, dir, m).ok());
  }
  return m;
}

TEST(ShardDirTest, ManifestRoundTrips) {
  ShardDirManifest m;
  m.schema = {39, 13};
  m.files = {{"part-00000.ctrshard", 100, 4096}, {"part-00001.ctrshard", 7, 512}};
  const std::string text = EncodeShardManifest(m);
  auto back = DecodeShardManifest(text, "SHARDS");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->schema, m.schema);
  ASSERT_EQ(back->files.size(), 2u);
  EXPECT_EQ(back->files[1].name, "part-00001.ctrshard");
  EXPECT_EQ(back->files[1].rows, 7u);
  EXPECT_EQ(back->files[0].bytes, 4096u);
  EXPECT_EQ(back->rows(), 107u);
}

// Every truncation and every flipped byte of a manifest is refused (never a shorter list).
TEST(ShardDirTest, DamagedManifestsAreRefused) {
  ShardDirManifest m;
  m.schema = {3, 0};
  m.files = {{"part-00000.ctrshard", 10, 100}, {"part-00001.ctrshard", 20, 200}};
  const std::string text = EncodeShardManifest(m);
  for (size_t n = 0; n < text.size(); ++n) {
    EXPECT_FALSE(DecodeShardManifest(text.substr(0, n), "SHARDS").ok()) << "truncated at " << n;
  }
  for (size_t i = 0; i < text.size(); ++i) {
    std::string bad = text;
    bad[i] ^= 0x04;
    EXPECT_FALSE(DecodeShardManifest(bad, "SHARDS").ok()) << "flipped byte " << i;
  }
  // A well-formed checksum over a bad body: each check is reached and names its line.
  auto sealed = [](std::string body) {
    return body + fmt::format("checksum {:016x}\n", Checksum64(body));
  };
  auto s = DecodeShardManifest(sealed("ctrbox-shards 2\n"), "D/SHARDS").status();
  EXPECT_TRUE(Contains(s, "D/SHARDS:1")) << s.ToString();
  s = DecodeShardManifest(
          sealed("ctrbox-shards 1\nschema 3 0\nfile ../x.ctrshard 1 1\ntotal 1 1\n"), "SHARDS")
          .status();
  EXPECT_TRUE(Contains(s, "SHARDS:3")) << s.ToString();
  s = DecodeShardManifest(sealed("ctrbox-shards 1\nschema 3 0\nfile a.ctrshard 1 1\ntotal 1 2\n"),
                          "SHARDS")
          .status();
  EXPECT_TRUE(Contains(s, "SHARDS:4")) << s.ToString();
  s = DecodeShardManifest(
          sealed("ctrbox-shards 1\nschema 3 0\nfile a.ctrshard 1 1\nfile a.ctrshard 1 1\n"
                 "total 2 2\n"),
          "SHARDS")
          .status();
  EXPECT_TRUE(Contains(s, "listed twice")) << s.ToString();
}

TEST(ShardDirTest, ReaderUsesOnlyAFinishedDirectoryAndExactlyItsFiles) {
  TempDir dir;
  Env* env = Env::Posix();
  DataOptions o;
  o.paths = {dir.path()};
  o.format = DataFormat::kShards;

  // Shards without a manifest: a conversion that did not finish.
  WriteDir(dir.path(), {30, 40}, /*manifest=*/false);
  auto r = OpenReader(env, o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status(), "did not finish")) << r.status().ToString();

  ShardDirManifest m = WriteDir(dir.path(), {30, 40}, /*manifest=*/true);
  auto all = testing::ReadAll(o);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->rows(), 70u);

  // A shard the manifest does not list (copied in, or left by another conversion).
  ASSERT_TRUE(
      env->RenameFile(dir.File("part-00001.ctrshard"), dir.File("part-00009.ctrshard")).ok());
  r = OpenReader(env, o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status(), "part-00001.ctrshard: listed in")) << r.status().ToString();
  ASSERT_TRUE(
      env->RenameFile(dir.File("part-00009.ctrshard"), dir.File("part-00001.ctrshard")).ok());
  ASSERT_TRUE(WriteFileAtomic(env, dir.File("extra.ctrshard"), "x").ok());
  r = OpenReader(env, o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status(), "extra.ctrshard: not listed")) << r.status().ToString();
  ASSERT_TRUE(env->DeleteFile(dir.File("extra.ctrshard")).ok());

  // A listed shard replaced by one of another size.
  m.files[0].bytes += 1;
  ASSERT_TRUE(WriteShardManifest(env, dir.path(), m).ok());
  r = OpenReader(env, o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status(), "changed since convert")) << r.status().ToString();
}

TEST(ShardDirTest, ClearReplacesAnEarlierConversionAndRefusesForeignFiles) {
  TempDir dir;
  Env* env = Env::Posix();
  const std::string out = dir.File("shards");
  auto cleared = ClearShardDir(env, out);  // creates it
  ASSERT_TRUE(cleared.ok());
  EXPECT_EQ(*cleared, 0u);
  EXPECT_TRUE(env->IsDirectory(out));

  WriteDir(out, {5, 6, 7}, /*manifest=*/true);
  ASSERT_TRUE(WriteFileAtomic(env, JoinPath(out, "part-00003.ctrshard.tmp"), "partial").ok());
  cleared = ClearShardDir(env, out);
  ASSERT_TRUE(cleared.ok()) << cleared.status().ToString();
  EXPECT_EQ(*cleared, 4u);
  auto children = env->GetChildren(out);
  ASSERT_TRUE(children.ok());
  EXPECT_TRUE(children->empty());

  ASSERT_TRUE(WriteFileAtomic(env, JoinPath(out, "notes.txt"), "mine").ok());
  WriteDir(out, {5}, /*manifest=*/true);
  cleared = ClearShardDir(env, out);
  ASSERT_FALSE(cleared.ok());
  EXPECT_TRUE(Contains(cleared.status(), "notes.txt")) << cleared.status().ToString();
  EXPECT_TRUE(env->FileExists(JoinPath(out, "notes.txt")));
  EXPECT_TRUE(env->FileExists(JoinPath(out, "SHARDS")));  // refused before deleting anything

  ASSERT_TRUE(WriteFileAtomic(env, dir.File("file"), "x").ok());
  EXPECT_FALSE(ClearShardDir(env, dir.File("file")).ok());

  // A failed conversion's files are removed, and the directory if convert created it.
  const std::string failed = dir.File("failed");
  ASSERT_TRUE(ClearShardDir(env, failed).ok());
  WriteDir(failed, {5}, /*manifest=*/false);
  ASSERT_TRUE(WriteFileAtomic(env, JoinPath(failed, "part-00001.ctrshard.tmp"), "p").ok());
  RemoveFailedConversion(env, failed, /*created_dir=*/true);
  EXPECT_FALSE(env->FileExists(failed));
}

}  // namespace
}  // namespace ctrbox
