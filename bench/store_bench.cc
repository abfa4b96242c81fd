// Store benchmark: ctrbox's tiered table against RocksDB on a trace of passes.
//
//   build/bench/store_bench [--keys N] [--passes P] [--draws D] [--zipf 1.1]
//                           [--budget-fraction 0.1] [--systems ctrbox,rocksdb] [--dir DIR]
//                           [--threads 2] [--group-bits G]
//
// Each pass draws D ranks from a Zipf law over N ids (rank -> key by a hash, so popularity is
// unrelated to key order), pulls the distinct keys (absent ones get default rows), changes
// every row as training would (show + 1, one embedding element) and pushes them back. Rows are
// the default model's (dimension 16, Adagrad state): 148 value bytes per key.
// Both systems get the same memory budget: `budget-fraction` of the final model's value
// bytes (a dry run of the trace counts its distinct keys first). ctrbox: storage.memory_budget.
// RocksDB: block cache of the budget minus its write buffers (2 x budget/8), full Bloom filters
// (10 bits/key), no compression, WAL off; MultiGet and WriteBatch, split over the same number
// of threads.
//
// Prints one JSON line per pass and system, and a summary per system: median keys/s (pulled +
// pushed) over the second half of the passes, bytes read and written per pushed key (syscall
// level, /proc/self/io rchar/wchar, for both), final disk use and live bytes.
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "bench/bench_util.h"
#include "io/synth.h"
#include "jobs/train_report.h"
#include "table/tiered_table.h"
#include "util/random.h"

namespace ctrbox::bench {
namespace {

constexpr ValueLayout kLayout{16, 16, 1};

struct Args {
  uint64_t keys = 20'000'000, passes = 30, draws = 2'000'000;
  double zipf = 1.1, budget_fraction = 0.1;
  std::string systems = "ctrbox,rocksdb", dir = "/tmp/ctrbox-store-bench";
  int threads = 2;
  uint32_t group_bits = 0;  // 0: train's default for the budget
};

// Syscall-level bytes read and written by this process (/proc/self/io).
std::pair<uint64_t, uint64_t> ProcIo() {
  std::ifstream in("/proc/self/io");
  std::string k;
  uint64_t v, r = 0, w = 0;
  while (in >> k >> v) {
    if (k == "rchar:") r = v;
    if (k == "wchar:") w = v;
  }
  return {r, w};
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  auto children = Env::Posix()->GetChildren(dir);
  if (!children.ok()) return 0;
  for (const auto& c : *children) {
    auto size = Env::Posix()->GetFileSize(dir + "/" + c);
    if (size.ok()) total += *size;
  }
  return total;
}

// The distinct keys of pass p, sorted (the same for every system).
std::vector<uint64_t> PassKeys(const Args& a, uint64_t p) {
  ZipfSampler zipf(a.keys, a.zipf);
  Random rng(Mix64(p + 12345));
  std::vector<uint64_t> keys(a.draws);
  for (uint64_t& k : keys) k = Mix64(zipf.Sample(&rng) + 1);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

void Train(RowBlock* rows, size_t i) {
  rows->show(i) += 1;
  rows->emb(i)[rows->key(i) % 16] += 0.001f;
}

// A store under test: pull + push of one pass.
class Store {
 public:
  virtual ~Store() = default;
  virtual Status Pass(const std::vector<uint64_t>& keys) = 0;
  virtual nlohmann::json Report() = 0;
};

class CtrboxStore final : public Store {
 public:
  CtrboxStore(const Args& a, uint64_t budget) : pool_(a.threads), acc_(kLayout, AccessorOptions{}) {
    TieredOptions o;
    o.layout = kLayout;
    o.memory_budget = budget;
    o.ssd.dir = a.dir + "/ctrbox";
    uint32_t bits = 10;
    while ((uint64_t{1} << (bits + 1)) * 640 <= budget && bits < 28) ++bits;  // as train's default
    o.ssd.group_bits = a.group_bits ? a.group_bits : bits;
    auto t = TieredTable::Open(Env::Posix(), o);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
      std::exit(1);
    }
    table_ = std::move(*t);
  }
  Status Pass(const std::vector<uint64_t>& keys) override {
    RowBlock rows(kLayout);
    ASSIGN_OR_RETURN(PinnedRows pins, table_->Pull(keys.data(), keys.size(), &acc_, &rows, &pool_));
    for (size_t i = 0; i < rows.size(); ++i) Train(&rows, i);
    return table_->Push(&pins, rows, &pool_);
  }
  nlohmann::json Report() override { return StorageJson(table_->Storage()); }

 private:
  ThreadPool pool_;
  CtrAccessor acc_;
  std::unique_ptr<TieredTable> table_;
};

class RocksStore final : public Store {
 public:
  RocksStore(const Args& a, uint64_t budget)
      : threads_(a.threads), acc_(kLayout, AccessorOptions{}) {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.compression = rocksdb::kNoCompression;
    o.write_buffer_size = std::max<uint64_t>(budget / 8, 1 << 20);
    o.max_write_buffer_number = 2;
    o.IncreaseParallelism(a.threads);
    rocksdb::BlockBasedTableOptions t;
    const uint64_t cache =
        budget > 2 * o.write_buffer_size ? budget - 2 * o.write_buffer_size : budget / 2;
    t.block_cache = rocksdb::NewLRUCache(cache);
    t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10, false));
    t.cache_index_and_filter_blocks = true;  // index and filters count against the cache
    o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
    rocksdb::DB* db = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(o, a.dir + "/rocksdb", &db);
    if (!s.ok()) {
      std::fprintf(stderr, "rocksdb: %s\n", s.ToString().c_str());
      std::exit(1);
    }
    db_.reset(db);
    wo_.disableWAL = true;
    cache_bytes_ = cache;
    write_buffer_ = o.write_buffer_size;
  }
  Status Pass(const std::vector<uint64_t>& keys) override {
    std::vector<Status> status(threads_);
    std::vector<std::thread> workers;
    const size_t per = (keys.size() + threads_ - 1) / threads_;
    for (int t = 0; t < threads_; ++t) {
      workers.emplace_back([&, t] {
        const size_t b = std::min(keys.size(), t * per), e = std::min(keys.size(), b + per);
        status[t] = Part(keys, b, e);
      });
    }
    for (auto& w : workers) w.join();
    for (const Status& s : status) RETURN_IF_ERROR(s);
    return Status::OK();
  }
  nlohmann::json Report() override {
    std::string v;
    nlohmann::json r = {{"block_cache_bytes", cache_bytes_}, {"write_buffer_bytes", write_buffer_}};
    if (db_->GetProperty("rocksdb.estimate-live-data-size", &v)) r["live_bytes"] = std::stoull(v);
    if (db_->GetProperty("rocksdb.estimate-table-readers-mem", &v))
      r["table_readers_mem"] = std::stoull(v);
    return r;
  }

 private:
  Status Part(const std::vector<uint64_t>& keys, size_t b, size_t e) {
    constexpr size_t kChunk = 8192;
    RowBlock rows(kLayout);
    std::vector<rocksdb::Slice> slices;
    std::vector<uint64_t> big_endian;
    std::vector<rocksdb::Status> st;
    std::string enc;
    for (size_t c = b; c < e; c += kChunk) {
      const size_t n = std::min(kChunk, e - c);
      // Big-endian keys: RocksDB orders keys bytewise, the pass's keys are sorted numerically.
      big_endian.resize(n);
      slices.clear();
      for (size_t i = 0; i < n; ++i) {
        big_endian[i] = __builtin_bswap64(keys[c + i]);
        slices.emplace_back(reinterpret_cast<const char*>(&big_endian[i]), 8);
      }
      std::vector<rocksdb::PinnableSlice> values(n);
      st.assign(n, rocksdb::Status());
      db_->MultiGet(rocksdb::ReadOptions(), db_->DefaultColumnFamily(), n, slices.data(),
                    values.data(), st.data(), /*sorted_input=*/true);
      rows.Resize(n);
      rocksdb::WriteBatch batch;
      for (size_t i = 0; i < n; ++i) {
        if (st[i].ok()) {
          enc.assign(reinterpret_cast<const char*>(&keys[c + i]), 8);
          enc.append(values[i].data(), values[i].size());
          if (rows.DecodeRow(enc.data(), enc.size(), i) == 0)
            return CorruptionError("rocksdb value");
        } else if (st[i].IsNotFound()) {
          acc_.InitRow(&rows, i, keys[c + i]);
        } else {
          return IOError(st[i].ToString());
        }
        Train(&rows, i);
        enc.clear();
        rows.EncodeRow(i, &enc);
        batch.Put(slices[i], rocksdb::Slice(enc.data() + 8, enc.size() - 8));
      }
      rocksdb::Status s = db_->Write(wo_, &batch);
      if (!s.ok()) return IOError(s.ToString());
    }
    return Status::OK();
  }

  int threads_;
  CtrAccessor acc_;
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::WriteOptions wo_;
  uint64_t cache_bytes_ = 0, write_buffer_ = 0;
};

int Main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--keys")
      a.keys = std::stoull(v);
    else if (k == "--passes")
      a.passes = std::stoull(v);
    else if (k == "--draws")
      a.draws = std::stoull(v);
    else if (k == "--zipf")
      a.zipf = std::stod(v);
    else if (k == "--budget-fraction")
      a.budget_fraction = std::stod(v);
    else if (k == "--systems")
      a.systems = v;
    else if (k == "--dir")
      a.dir = v;
    else if (k == "--threads")
      a.threads = std::stoi(v);
    else if (k == "--group-bits")
      a.group_bits = static_cast<uint32_t>(std::stoul(v));
  }
  // Dry run: the distinct keys of the whole trace, hence the model size and the budget.
  std::vector<uint64_t> seen_bits((a.keys + 63) / 64, 0);
  {
    ZipfSampler zipf(a.keys, a.zipf);
    for (uint64_t p = 0; p < a.passes; ++p) {
      Random rng(Mix64(p + 12345));
      for (uint64_t d = 0; d < a.draws; ++d) {
        const uint64_t r = zipf.Sample(&rng);
        seen_bits[r / 64] |= uint64_t{1} << (r % 64);
      }
    }
  }
  uint64_t distinct = 0;
  for (uint64_t w : seen_bits) distinct += __builtin_popcountll(w);
  seen_bits = {};
  const uint64_t model_bytes = distinct * (kLayout.EncodedBytes(true) - 8);
  const uint64_t budget =
      static_cast<uint64_t>(a.budget_fraction * static_cast<double>(model_bytes));
  Emit({{"bench", "store_trace"},
        {"key_space", a.keys},
        {"distinct_keys", distinct},
        {"passes", a.passes},
        {"draws_per_pass", a.draws},
        {"zipf", a.zipf},
        {"model_value_bytes", model_bytes},
        {"memory_budget", budget},
        {"threads", a.threads}});

  // The trace, generated before any system runs (so no system gets background time from it).
  std::vector<std::vector<uint64_t>> trace(a.passes);
  for (uint64_t p = 0; p < a.passes; ++p) trace[p] = PassKeys(a, p);

  for (const std::string& system : {std::string("ctrbox"), std::string("rocksdb")}) {
    if (a.systems.find(system) == std::string::npos) continue;
    (void)std::system(("rm -rf '" + a.dir + "/" + system + "'").c_str());
    Env::Posix()->CreateDirs(a.dir).IgnoreError();  // Open reports a real failure
    std::unique_ptr<Store> store;
    if (system == "ctrbox")
      store = std::make_unique<CtrboxStore>(a, budget);
    else
      store = std::make_unique<RocksStore>(a, budget);
    std::vector<double> rates;
    uint64_t pushed = 0;
    const auto io0 = ProcIo();
    Stopwatch total;
    for (uint64_t p = 0; p < a.passes; ++p) {
      const std::vector<uint64_t>& keys = trace[p];
      Stopwatch clock;
      Status s = store->Pass(keys);
      const double secs = clock.Seconds();
      if (!s.ok()) {
        std::fprintf(stderr, "%s: %s\n", system.c_str(), s.ToString().c_str());
        return 1;
      }
      pushed += keys.size();
      const double rate = 2.0 * keys.size() / secs;  // pulled + pushed keys
      if (p >= a.passes / 2) rates.push_back(rate);
      nlohmann::json line = {{"bench", "store"},
                             {"system", system},
                             {"pass", p},
                             {"keys", keys.size()},
                             {"seconds", secs},
                             {"keys_per_s", rate},
                             {"disk_bytes", DirBytes(a.dir + "/" + system)},
                             {"rss_bytes", CurrentRssBytes()}};
      if (system == "ctrbox") {
        nlohmann::json r = store->Report();
        line["hit_rate_total"] = r["hit_rate"];
        line["memory_bytes"] = r["memory_bytes"];
      }
      Emit(line);
    }
    const auto io1 = ProcIo();
    nlohmann::json summary = {
        {"bench", "store_summary"},
        {"system", system},
        {"keys_per_s_median_second_half", Median(rates)},
        {"seconds", total.Seconds()},
        {"pushed_keys", pushed},
        {"bytes_read_per_pushed_key", double(io1.first - io0.first) / pushed},
        {"bytes_written_per_pushed_key", double(io1.second - io0.second) / pushed},
        {"disk_bytes", DirBytes(a.dir + "/" + system)},
        {"peak_rss_bytes", PeakRssBytes()},
        {"memory_budget", budget},
        {"report", store->Report()}};
    Emit(summary);
    store.reset();
    (void)std::system(("rm -rf '" + a.dir + "/" + system + "'").c_str());
  }
  return 0;
}

}  // namespace
}  // namespace ctrbox::bench

int main(int argc, char** argv) { return ctrbox::bench::Main(argc, argv); }
