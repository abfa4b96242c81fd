// SsdStore's dead files (table/ssd_store.h, docs/storage.md "Recycled files"): kept in a pool
// and written over by the next new files, never while a view read in place holds one.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "table/param_file.h"
#include "table/ssd_store.h"
#include "table/ssd_store_test_util.h"
#include "util/env.h"
#include "util/random.h"
#include "util/temp_dir.h"

namespace ctrbox {
namespace {

constexpr ValueLayout kLayout{4, 4, 1};

// Dead files are written over by the next new ones (SsdOptions::recycle_files, docs/storage.md
// "Recycled files"): each record supersedes the last, so every file dies once the next is
// written. Every record reads back, a sealed file holds its records alone (the old file's
// longer tail cut off), at most recycle_files dead files are kept, and none is left once the
// INDEX is written or the store goes. Without recycling, dead files are deleted.
TEST(SsdStoreTest, DeadFilesAreWrittenOverByTheNextOnes) {
  for (uint32_t recycle : {0u, 2u}) {
    testing::TempDir dir;
    Env* env = Env::Posix();
    const SsdOptions o = TwoRecordsPerFile(dir.path(), recycle);
    auto created = SsdStore::Create(env, o, kLayout);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    std::unique_ptr<SsdStore> store = std::move(*created);
    auto pooled = [&] {
      const auto children = env->GetChildren(dir.path());
      EXPECT_TRUE(children.ok());
      size_t n = 0;
      for (const std::string& c : *children) n += FileRecycler::IsPoolName(c);
      return n;
    };
    Random rng(recycle);
    RecordBuilder b;
    for (uint64_t i = 0; i < 40; ++i) {
      // A record of 50 rows (~3000 bytes) in group i % 2, or every third one of 10, so that a
      // file may be shorter than the dead one it is written over.
      std::vector<uint64_t> keys;
      for (uint64_t k = 1 + 1000 * i; keys.size() < (i % 3 == 0 ? 10u : 50u); ++k) {
        if (GroupOfKey(kLayout, o.group_bits, k) == i % 2) keys.push_back(k);
      }
      BuildRecord(kLayout, i % 2, keys, true, &rng, &b);
      RecordLoc loc;
      ASSERT_TRUE(store->Append(&b, &loc).ok());
      ASSERT_TRUE(store->FlushAppends().ok());
      store->Replace(i % 2, BaseOnly(loc));
      RecordView view;
      const Status read = store->Read(loc, i % 2, &view);
      ASSERT_TRUE(read.ok()) << i << ": " << read.ToString();
      ASSERT_EQ(view.rows(), keys.size());
      std::vector<uint64_t> got = view.keys;
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, keys) << i;
      EXPECT_LE(pooled(), recycle);
      EXPECT_EQ(store->Stats().free_file_bytes > 0, pooled() > 0);
    }
    const DiskStats d = store->Stats();
    if (recycle == 0) {
      EXPECT_EQ(d.files_recycled, 0u);
    } else {
      EXPECT_GE(d.files_recycled, 10u);  // ~16 files made, the first two or three new
    }
    // The sealed files hold what was appended to them alone.
    for (uint32_t g = 0; g < 2; ++g) {
      const std::shared_ptr<ParamFile> f = store->File(store->entry(g).base.file);
      ASSERT_NE(f, nullptr);
      if (f->id == store->entry(1).base.file) continue;  // the current file: still being written
      auto size = env->GetFileSize(f->path);
      ASSERT_TRUE(size.ok());
      EXPECT_EQ(*size, store->FileBytes(*f));
    }
    ASSERT_TRUE(store->WriteIndex().ok());
    EXPECT_EQ(pooled(), 0u);
    store.reset();
    EXPECT_EQ(pooled(), 0u);
  }
}

// Reads out of a mapping are in place (docs/storage.md, "Reads in place"): the view's bytes are
// the mapping's, not a copy, and give the rows a pread gives. A view read in place holds its
// file: a file that dies while a view points into it is neither deleted nor written over (the
// pool's next file) until the view lets go, and the view's rows stay what they were.
TEST(SsdStoreTest, ReadsInPlaceHoldTheirFileWhileTheirViewPointsIntoIt) {
  for (const MappedReads way : {MappedReads::kOff, MappedReads::kOn}) {
    SCOPED_TRACE(way == MappedReads::kOn ? "mapped" : "pread");
    testing::TempDir dir;
    Env* env = Env::Posix();
    SsdOptions o = TwoRecordsPerFile(dir.path(), 2);
    o.mapped_reads = way;
    auto created = SsdStore::Create(env, o, kLayout);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    std::unique_ptr<SsdStore> store = std::move(*created);
    Random rng(7);
    RecordBuilder b;
    auto append = [&](uint64_t first_key, RecordLoc* loc) {
      std::vector<uint64_t> keys;  // 50 of group 0
      for (uint64_t k = first_key; keys.size() < 50; ++k) {
        if (GroupOfKey(kLayout, o.group_bits, k) == 0) keys.push_back(k);
      }
      BuildRecord(kLayout, 0, keys, true, &rng, &b);
      ASSERT_TRUE(store->Append(&b, loc).ok());
      ASSERT_TRUE(store->FlushAppends().ok());
      store->Replace(0, BaseOnly(*loc));
    };
    RecordLoc first;
    append(1, &first);
    RecordView held, pread;
    ASSERT_TRUE(store->Read(first, 0, &held).ok());
    const std::string first_path = store->File(first.file)->path;
    {  // the same rows as the bytes a pread reads, in place when mapped
      auto reader = env->NewRandomAccessFile(first_path);
      ASSERT_TRUE(reader.ok());
      pread.bytes.resize(first.length);
      size_t got = 0;
      ASSERT_TRUE((*reader)->Read(first.offset, first.length, pread.bytes.data(), &got).ok());
      ASSERT_TRUE(pread.Parse(kLayout, o.group_bits, 0, first.offset, store->page_bytes()).ok());
    }
    const bool in_place = held.data().data() != held.bytes.data();
    EXPECT_EQ(in_place, way == MappedReads::kOn && store->Stats().mapped_reads);
    if (way == MappedReads::kOn && !store->Stats().mapped_reads) {
      GTEST_SKIP() << "this file system maps no files";
    }
    ASSERT_EQ(held.keys, pread.keys);
    for (size_t j = 0; j < held.rows(); ++j) ASSERT_EQ(held.row(j), pread.row(j)) << j;
    // Each record supersedes the last: the first file dies, the later ones too, and dead files
    // are written over by the next ones.
    for (uint64_t i = 1; i < 12; ++i) {
      RecordLoc loc;
      append(1000 * i + 1, &loc);
    }
    EXPECT_GT(store->Stats().files_recycled, 0u);
    EXPECT_EQ(env->FileExists(first_path), in_place) << "a dead file held by a view read in place";
    ASSERT_EQ(held.keys, pread.keys);
    for (size_t j = 0; j < held.rows(); ++j) ASSERT_EQ(held.row(j), pread.row(j)) << j;
    held.UseBytes();  // lets the file go
    EXPECT_FALSE(env->FileExists(first_path));
  }
}

}  // namespace
}  // namespace ctrbox
