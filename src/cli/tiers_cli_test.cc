// End-to-end tests of the ctrbox command line over the SSD tier: a store trained, kept and
// inspected (with the disk under it measured), and the row layouts through every tier.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_test_util.h"
#include "util/env.h"

namespace ctrbox {
namespace {

using testing::CliTest;
using testing::Result;

TEST_F(CliTest, TrainsOverAnSsdStoreAndInspectsIt) {
  ASSERT_EQ(Run(Ctrbox("gen --rows 20000 --out " + Path("train.tsv"))).exit_code, 0);
  const std::string common = " --data " + Path("train.tsv") +
                             " --set model.mlp=32 --set train.batch_size=512 --fresh"
                             " --set pipeline.pass_examples=2048";
  const std::string budget = " --set storage.memory_budget=3MB --set storage.file_bytes=4MB";
  Result mem = Run(Ctrbox("train --model-dir " + Path("m1") + common));
  ASSERT_EQ(mem.exit_code, 0) << mem.err;
  Result ssd =
      Run(Ctrbox("train --model-dir " + Path("m2") + common + budget +
                 " --set storage.ssd_dir=" + Path("ssd") + " --set storage.keep_store=true"));
  ASSERT_EQ(ssd.exit_code, 0) << ssd.err;
  EXPECT_EQ(mem.last_json["digest"], ssd.last_json["digest"]);
  const auto& st = ssd.last_json["storage"];
  EXPECT_EQ(st["tiers"], "memory+ssd");
  EXPECT_GT(st["loaded_from_ssd"].get<uint64_t>(), 0u) << st.dump();
  Result in = Run(Ctrbox("inspect --store " + Path("ssd")));
  ASSERT_EQ(in.exit_code, 0) << in.err;
  EXPECT_EQ(in.last_json["keys"], ssd.last_json["keys"]) << in.out;
  EXPECT_EQ(in.last_json["tiers"]["disk_keys"], ssd.last_json["keys"]) << in.out;
  EXPECT_EQ(in.last_json["bytes_live"], ssd.last_json["bytes_live"]);
  // The disk under the store's files, measured (or why not: a file system without O_DIRECT).
  const nlohmann::json& ceiling = in.last_json["disk_ceiling"];
  if (ceiling["measured"].get<bool>()) {
    EXPECT_GT(ceiling["random_4k_reads_qd1_per_s"].get<double>(), 0) << ceiling;
    EXPECT_GT(ceiling["seq_read_mb_per_s"].get<double>(), 0) << ceiling;
  } else {
    EXPECT_NE(ceiling["why_not"].get<std::string>().find("O_DIRECT"), std::string::npos);
  }
  // The compaction bound (docs/storage.md): no sealed file is more than compact_stale (0.5)
  // stale, so the files take at most 2 x the live records plus the active file.
  EXPECT_GT(in.last_json["files"].get<int>(), 1) << in.out;
  EXPECT_LE(in.last_json["file_bytes"].get<double>(),
            2 * in.last_json["live_record_bytes"].get<double>() + 4.1 * 1024 * 1024)
      << in.out;
  Result both = Run(Ctrbox("inspect --store " + Path("ssd") + " --model-dir " + Path("m2")));
  EXPECT_NE(both.exit_code, 0);
  // The same job over a store read another way (model dir and store named by `name`).
  auto train_reading = [&](const std::string& name, const std::string& how) {
    return Run(Ctrbox("train --model-dir " + Path("m-" + name) + common + budget +
                      " --set storage.ssd_dir=" + Path("ssd-" + name) + how));
  };
  // The files read around the page cache (storage.direct_reads): the same model; the JSON says
  // whether O_DIRECT was taken, which is whether this file system takes it.
  Result direct = train_reading("direct", " --set storage.direct_reads=true");
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  EXPECT_EQ(direct.last_json["digest"], mem.last_json["digest"]);
  EXPECT_GT(direct.last_json["storage"]["loaded_from_ssd"].get<uint64_t>(), 0u);
  const bool takes_direct = Env::Posix()->NewDirectRandomAccessFile(Path("train.tsv")).ok();
  EXPECT_EQ(direct.last_json["storage"]["direct_reads"].get<bool>(), takes_direct);
  EXPECT_EQ(direct.last_json["storage"]["mapped_records_read"].get<uint64_t>(), 0u);
  EXPECT_FALSE(st["direct_reads"].get<bool>());
  // By default (storage.mapped_reads=auto) the records are read out of mappings while the
  // page cache holds the files, as here; with pread when told: the same model again.
  EXPECT_TRUE(st["mapped_reads"].get<bool>());
  EXPECT_GT(st["mapped_records_read"].get<uint64_t>(), 0u);
  Result pread = train_reading("pread", " --set storage.mapped_reads=false");
  ASSERT_EQ(pread.exit_code, 0) << pread.err;
  EXPECT_EQ(pread.last_json["digest"], mem.last_json["digest"]);
  EXPECT_GT(pread.last_json["storage"]["loaded_from_ssd"].get<uint64_t>(), 0u);
  EXPECT_FALSE(pread.last_json["storage"]["mapped_reads"].get<bool>());
  EXPECT_EQ(pread.last_json["storage"]["mapped_records_read"].get<uint64_t>(), 0u);
  // Mapped reads asked for with O_DIRECT ones: the files are read one way, not both.
  Result both_ways =
      train_reading("both", " --set storage.mapped_reads=true --set storage.direct_reads=true");
  EXPECT_NE(both_ways.exit_code, 0);
  EXPECT_NE(both_ways.err.find("storage.mapped_reads"), std::string::npos) << both_ways.err;
}

// Row layouts: a job trained in memory and over the SSD tier gives one model.
class RowLayoutCliTest : public CliTest {
 protected:
  // Trains `base` in memory (model dir "mem", returned in *mem) and over the SSD tier with
  // `budget` ("ssd"): rows come back from the files and the digests are equal.
  void TrainInMemoryAndOverSsd(const std::string& base, const std::string& budget, Result* mem) {
    *mem = Run(Ctrbox(base + " --model-dir " + Path("mem")));
    ASSERT_EQ(mem->exit_code, 0) << mem->err;
    Result ssd = Run(
        Ctrbox(base + " --model-dir " + Path("ssd") + " --set storage.ssd_dir=" + Path("store") +
               " --set storage.memory_budget=" + budget + " --set storage.file_bytes=4MB"));
    ASSERT_EQ(ssd.exit_code, 0) << ssd.err;
    EXPECT_GT(ssd.last_json["storage"]["loaded_from_ssd"].get<uint64_t>(), 0u);
    EXPECT_EQ(ssd.last_json["digest"], mem->last_json["digest"]);
  }
};

TEST_F(RowLayoutCliTest, RowwiseAdagradRowsAreSmallAndTrainThroughEveryTier) {
  ASSERT_EQ(
      Run(Ctrbox("gen --format criteo --rows 20000 --seed 5 --out " + Path("r.tsv"))).exit_code, 0);
  const std::string base = "train --data " + Path("r.tsv") +
                           " --set model.mlp=32,16 --set pipeline.pass_examples=2000"
                           " --set optimizer.sparse.type=rowwise_adagrad"
                           " --set storage.quant.bits=16";
  Result mem;
  ASSERT_NO_FATAL_FAILURE(TrainInMemoryAndOverSsd(base, "2MB", &mem));
  // 16 bytes of counters, wide weight 4 and its state 4, 16 two-byte codes, one state float
  // (per-element float32 Adagrad: 148).
  EXPECT_EQ(mem.last_json["value_bytes_per_key"], 56.0);
  Result inspect = Run(Ctrbox("inspect --model-dir " + Path("mem")));
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_EQ(inspect.last_json["spec"]["sparse_optimizer"]["kind"], "rowwise_adagrad");
  // The stored state is one value per row: continuing with per-element Adagrad is refused.
  Result other = Run(Ctrbox(base + " --continue --model-dir " + Path("mem") +
                            " --set optimizer.sparse.type=adagrad"));
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.err.find("rowwise_adagrad"), std::string::npos) << other.err;
}

TEST_F(RowLayoutCliTest, Bf16AdagradStateHalvesTheStateAndTrainsThroughEveryTier) {
  ASSERT_EQ(
      Run(Ctrbox("gen --format criteo --rows 20000 --seed 6 --out " + Path("h.tsv"))).exit_code, 0);
  const std::string base = "train --data " + Path("h.tsv") +
                           " --set model.mlp=32,16 --set pipeline.pass_examples=2000"
                           " --set optimizer.sparse.state_bits=16";
  Result mem;
  ASSERT_NO_FATAL_FAILURE(TrainInMemoryAndOverSsd(base, "3MB", &mem));
  // 16 bytes of counters, wide weight 4 and its state 4, 16 floats, 16 two-byte state values
  // (float32 state: 148).
  EXPECT_EQ(mem.last_json["value_bytes_per_key"], 116.0);
  Result seq = Run(Ctrbox(base + " --model-dir " + Path("seq") + " --set pipeline.enabled=false"));
  ASSERT_EQ(seq.exit_code, 0) << seq.err;
  EXPECT_EQ(seq.last_json["digest"], mem.last_json["digest"]);
  Result inspect = Run(Ctrbox("inspect --model-dir " + Path("mem")));
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_EQ(inspect.last_json["spec"]["sparse_optimizer"]["state_bits"], 16);
  EXPECT_EQ(inspect.last_json["digest"], mem.last_json["digest"]);
  Result eval = Run(Ctrbox("eval --model-dir " + Path("mem") + " --data " + Path("h.tsv")));
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  // The stored state's width is part of the model: continuing with float32 state is refused.
  Result other = Run(Ctrbox(base + " --continue --model-dir " + Path("mem") +
                            " --set optimizer.sparse.state_bits=0"));
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.err.find("state_bits"), std::string::npos) << other.err;
  Result wrong = Run(Ctrbox("train --set optimizer.sparse.state_bits=8"));
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.err.find("optimizer.sparse.state_bits must be 0 or 16"), std::string::npos)
      << wrong.err;
  wrong =
      Run(Ctrbox("train --set optimizer.sparse.state_bits=16 --set optimizer.sparse.type=adam"));
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.err.find("is for adagrad and rowwise_adagrad"), std::string::npos) << wrong.err;
}

}  // namespace
}  // namespace ctrbox
