// The tiered table's SSD tier damaged or failing (tiered_table_test.cc has its differential
// runs): flipped bits in the files and the INDEX, a damaged INDEX, read errors, and the reads
// a Bloom filter saves.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

#include "table/tiered_table.h"
#include "table/tiered_table_test_util.h"
#include "util/bf16.h"
#include "util/mem_env.h"
#include "util/random.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

using namespace tiered_test;  // NOLINT: the tests' helpers

TEST(TieredTableTest, FlippedBitsInParameterFilesAndIndexAreDetectedNeverServed) {
  // A closed store (every row on disk, its INDEX written) in memory; then, for every bit of
  // the INDEX and a sample of bits of each parameter file: flip it, reopen, read every key.
  // The store must refuse to open, or fail the read with a corruption error, or return every
  // row exactly as written (a flip in bytes nothing refers to any more): never a wrong value.
  const ValueLayout layout{4, 4, 1, 8, 1.0f};  // quantized rows: codes are checked too
  CtrAccessor acc(layout, AccessorOptions{});
  TieredOptions o = Options("/s", 64 << 10);
  o.layout = layout;
  std::map<std::string, std::string> files;
  Reference ref;
  std::vector<uint64_t> keys;
  {
    MemEnv env;
    auto opened = TieredTable::Open(&env, o);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    auto table = std::move(*opened);
    Random rng(4);
    for (int round = 0; round < 6; ++round) {  // several records per group: bases and deltas
      std::vector<uint64_t> ks = RandomKeys(&rng, 60, 300);
      RowBlock rows(layout);
      auto pins = table->Pull(ks.data(), ks.size(), &acc, &rows, nullptr);
      ASSERT_TRUE(pins.ok()) << pins.status().ToString();
      for (size_t i = 0; i < ks.size(); ++i) {
        rows.show(i) += static_cast<float>(round + 1);
        ref[ks[i]] = Encode(rows, i);
      }
      ASSERT_TRUE(table->Push(&*pins, rows, nullptr).ok());
      ASSERT_TRUE(table->EvictAll().ok());
    }
    ASSERT_TRUE(table->Close().ok());
    auto names = env.GetChildren("/s");
    ASSERT_TRUE(names.ok());
    for (const std::string& name : *names) files[name] = *env.Contents("/s/" + name);
  }
  for (const auto& [k, v] : ref) keys.push_back(k);
  ASSERT_TRUE(files.count("INDEX"));
  uint64_t detected = 0, harmless = 0, index_flips = 0, index_detected = 0;
  Random pick(11);
  for (const auto& [victim, bytes] : files) {
    const bool is_index = victim == "INDEX";
    const uint64_t bits = bytes.size() * 8;
    const uint64_t tries = is_index ? bits : std::min<uint64_t>(bits, 1500);
    for (uint64_t t = 0; t < tries; ++t) {
      const uint64_t bit = is_index || tries == bits ? t : pick.Below(bits);
      MemEnv env;
      ASSERT_TRUE(env.CreateDirs("/s").ok());
      for (const auto& [name, b] : files) {
        auto f = std::move(env.NewWritableFile("/s/" + name).value());
        ASSERT_TRUE(f->Append(b).ok());
      }
      ASSERT_TRUE(env.FlipBit("/s/" + victim, bit).ok());
      TieredOptions r = o;
      r.reopen = true;
      auto table = TieredTable::Open(&env, r);
      Status failed = table.status();
      if (failed.ok()) {
        RowBlock rows(layout);
        auto pins = (*table)->Pull(keys.data(), keys.size(), nullptr, &rows, nullptr);
        failed = pins.status();
        for (size_t i = 0; failed.ok() && i < keys.size(); ++i) {
          ASSERT_EQ(Encode(rows, i), ref[keys[i]])
              << victim << " bit " << bit << ": wrong row served";
        }
      }
      if (failed.ok()) {
        ++harmless;
      } else {
        ASSERT_EQ(failed.code(), StatusCode::kCorruption)
            << victim << " bit " << bit << ": " << failed.ToString();
        ++detected;
      }
      if (is_index) {
        ++index_flips;
        index_detected += failed.ok() ? 0 : 1;
      }
    }
  }
  RecordProperty("flips_detected_harmless", fmt::format("{} {}", detected, harmless));
  EXPECT_EQ(index_detected, index_flips);  // the INDEX is one checksummed unit
  EXPECT_GT(detected, harmless);           // most bytes are live records
}

TEST(TieredTableTest, InspectDescribesAClosedStoreAndADamagedIndexIsRefused) {
  TempDir dir;
  CtrAccessor acc(kLayout, AccessorOptions{});
  TieredOptions o = Options(dir.path(), 64 << 10);
  uint64_t keys_on_disk = 0;
  {
    auto table = Open(o);
    ASSERT_NO_FATAL_FAILURE(PullAndPushRounds(table.get(), acc, 9, 20, 0.0f));
    ASSERT_TRUE(table->Close().ok());
    keys_on_disk = table->Stats().keys;
  }
  auto report = SsdStore::Inspect(Env::Posix(), dir.path());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->keys, keys_on_disk);
  EXPECT_GT(report->records, 0u);
  EXPECT_GE(report->file_bytes, report->live_record_bytes);

  const std::string index = dir.path() + "/INDEX";
  std::string good;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), index, &good).ok());
  auto rewrite = [&](const std::string& bytes) {
    auto f = Env::Posix()->NewWritableFile(index);
    ASSERT_TRUE((*f)->Append(bytes).ok());
    ASSERT_TRUE((*f)->Close().ok());
  };
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x01;
  for (const std::string& bad : {flipped, good.substr(0, good.size() - 100), good.substr(0, 20)}) {
    rewrite(bad);
    auto inspected = SsdStore::Inspect(Env::Posix(), dir.path());
    ASSERT_FALSE(inspected.ok());
    EXPECT_EQ(inspected.status().code(), StatusCode::kCorruption);
    EXPECT_NE(inspected.status().message().find("INDEX"), std::string::npos);
    TieredOptions r = o;
    r.reopen = true;
    auto reopened = TieredTable::Open(Env::Posix(), r);
    ASSERT_FALSE(reopened.ok());
    EXPECT_EQ(reopened.status().code(), StatusCode::kCorruption) << reopened.status().ToString();
  }
  // Nothing was consumed by the refusals: the intact INDEX still reopens.
  rewrite(good);
  TieredOptions r = o;
  r.reopen = true;
  auto reopened = TieredTable::Open(Env::Posix(), r);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ((*reopened)->Stats().keys, keys_on_disk);
}

TEST(TieredTableTest, ReadErrorsAreRetriedBoundedlyAndNeverServeADefaultRow) {
  // The read policy of docs/checkpoints.md: EIO on a parameter-file read is retried up to 3
  // times with backoff; a read that keeps failing fails the pull, naming the file, and no
  // default row takes the place of a key that has a record.
  MemEnv env;
  CtrAccessor acc(kLayout, AccessorOptions{});
  auto table = std::move(TieredTable::Open(&env, Options("/s", 1 << 20)).value());
  Random rng(12);
  std::vector<uint64_t> keys = RandomKeys(&rng, 800, 1 << 30);
  Reference ref;
  RowBlock rows(kLayout);
  {
    auto pins = table->Pull(keys.data(), keys.size(), &acc, &rows, nullptr);
    ASSERT_TRUE(pins.ok());
    for (size_t i = 0; i < keys.size(); ++i) {
      rows.show(i) = 5.0f + static_cast<float>(i);
      ref[keys[i]] = Encode(rows, i);
    }
    ASSERT_TRUE(table->Push(&*pins, rows, nullptr).ok());
  }
  ASSERT_TRUE(table->EvictAll().ok());
  auto expect_exact = [&](const char* what) {
    auto pins = table->Pull(keys.data(), keys.size(), &acc, &rows, nullptr);
    ASSERT_TRUE(pins.ok()) << what << ": " << pins.status().ToString();
    for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(Encode(rows, i), ref[keys[i]]) << what;
  };

  env.InjectFault(FaultOp::kRead, 1, MemEnv::Eio("injected"));  // one transient error
  expect_exact("after one EIO");
  EXPECT_EQ(table->Storage().read_retries, 1u);
  ASSERT_TRUE(table->EvictAll().ok());

  env.InjectFault(FaultOp::kRead, 1, MemEnv::Eio("injected"), /*sticky=*/true);  // a dead disk
  auto pins = table->Pull(keys.data(), keys.size(), &acc, &rows, nullptr);
  ASSERT_FALSE(pins.ok());
  EXPECT_EQ(pins.status().code(), StatusCode::kIOError);
  EXPECT_NE(pins.status().message().find("params-"), std::string::npos) << pins.status().ToString();
  EXPECT_NE(pins.status().message().find("3 retries"), std::string::npos)
      << pins.status().ToString();
  env.ClearFaults();
  expect_exact("after the failed pull");  // the failed pull inserted no default rows
}

TEST(TieredTableTest, FirstTimeKeysCostNoReadAndCorruptionIsReported) {
  TempDir dir;
  CtrAccessor acc(kLayout, AccessorOptions{});
  auto table = Open(Options(dir.path(), 1 << 20));
  Random rng(6);
  std::vector<uint64_t> keys = RandomKeys(&rng, 3000, 1 << 30);
  RowBlock rows(kLayout);
  {
    auto pins = table->Pull(keys.data(), keys.size(), &acc, &rows, nullptr);
    ASSERT_TRUE(pins.ok());
    ASSERT_TRUE(table->Push(&*pins, rows, nullptr).ok());
  }
  ASSERT_TRUE(table->EvictAll().ok());  // every group now has a record on disk
  const StorageStats before = table->Storage();
  std::vector<uint64_t> fresh = RandomKeys(&rng, 3000, 1 << 30);
  {
    auto pins = table->Pull(fresh.data(), fresh.size(), &acc, &rows, nullptr);
    ASSERT_TRUE(pins.ok());
  }
  const StorageStats after = table->Storage();
  const uint64_t reads = after.records_read - before.records_read;
  const uint64_t prunes = after.bloom_prunes - before.bloom_prunes;
  EXPECT_GT(prunes, 2800u);  // ~2 % false positives
  EXPECT_LT(reads, 200u);

  // Flip a byte inside a record payload: the pull that reads it fails with corruption.
  ASSERT_TRUE(table->EvictAll().ok());
  auto children = Env::Posix()->GetChildren(dir.path());
  std::string victim;
  for (const auto& c : *children) {
    if (c.rfind("params-", 0) == 0 && !FileRecycler::IsPoolName(c)) victim = dir.path() + "/" + c;
  }
  std::string data;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), victim, &data).ok());
  for (size_t i = kParamFileHeaderBytes + 40; i < data.size(); i += 97) data[i] ^= 0x10;
  {
    auto f = Env::Posix()->NewWritableFile(victim);
    ASSERT_TRUE((*f)->Append(data).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  Status failed;
  for (size_t b = 0; b < keys.size() && failed.ok(); b += 100) {
    auto pins = table->Pull(keys.data() + b, 100, &acc, &rows, nullptr);
    if (!pins.ok()) failed = pins.status();
  }
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.code(), StatusCode::kCorruption) << failed.ToString();
  EXPECT_NE(failed.message().find("params-"), std::string::npos) << failed.ToString();
  EXPECT_NE(failed.message().find(": record at offset "), std::string::npos) << failed.ToString();
  // (A pull reads the pieces of a base that may hold its keys, each verified by its own CRC.)
  EXPECT_NE(failed.message().find(": segment CRC mismatch"), std::string::npos)
      << failed.ToString();
}

}  // namespace
}  // namespace ctrbox
