// ReadPathChooser (table/read_path.h) alone, and the SSD store reading through it
// (storage.mapped_reads=auto): mapped while reads are fast, pread once mapped reads wait, back
// to mapped once preads are fast again; the bytes read the same whichever way. DeviceWatch
// alone, and the store's ReadsFromDevice following the reads' latency whichever way.
#include "table/read_path.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "table/param_file.h"
#include "table/ssd_store.h"
#include "util/mem_env.h"
#include "util/random.h"

namespace ctrbox {
namespace {

constexpr uint64_t kFast = 1'000, kSlow = 100'000;  // nanoseconds

ReadPathChooser::Options Window(uint32_t reads) {
  ReadPathChooser::Options o;
  o.window = reads;
  return o;
}

// Notes a window of `reads` reads taken the chooser's current way, `slow` of them slow.
void NoteWindow(ReadPathChooser* c, int reads, int slow) {
  const bool mapped = c->mapped();
  for (int i = 0; i < reads; ++i) c->Note(mapped, i < slow ? kSlow : kFast);
}

TEST(ReadPathChooserTest, LeavesMappingsWhenTheirReadsWaitAndComesBackWhenPreadsDoNot) {
  ReadPathChooser c(Window(100));
  EXPECT_TRUE(c.mapped());
  NoteWindow(&c, 100, 5);  // 5 %: not above the 5 % that sends reads to pread
  EXPECT_TRUE(c.mapped());
  NoteWindow(&c, 100, 6);
  EXPECT_FALSE(c.mapped());
  EXPECT_EQ(c.switches(), 1u);
  // Reads begun the old way are not counted in the new way's window.
  for (int i = 0; i < 1000; ++i) c.Note(/*mapped=*/true, kFast);
  EXPECT_FALSE(c.mapped());
  // Hysteresis: preads come back to mappings only below 1 % slow.
  NoteWindow(&c, 100, 1);
  EXPECT_FALSE(c.mapped());
  NoteWindow(&c, 100, 3);
  EXPECT_FALSE(c.mapped());
  NoteWindow(&c, 100, 0);
  EXPECT_TRUE(c.mapped());
  EXPECT_EQ(c.switches(), 2u);
  // A window is its reads alone: 99 fast reads, then a slow window, switch at its end.
  NoteWindow(&c, 99, 0);
  EXPECT_TRUE(c.mapped());
  NoteWindow(&c, 1, 1);  // closes the window: 1 slow of 100
  EXPECT_TRUE(c.mapped());
  NoteWindow(&c, 100, 100);
  EXPECT_FALSE(c.mapped());
}

TEST(ReadPathChooserTest, ThreadsNotingAtOnceSwitchOnceAndCountEveryRead) {
  // Four threads note fast mapped reads (no switch), then slow ones: the first window that
  // closes switches, and the mapped reads after it are not counted.
  ReadPathChooser c(Window(64));
  auto run = [&](uint64_t nanos) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 20'000; ++i) c.Note(/*mapped=*/true, nanos);
      });
    }
    for (auto& t : threads) t.join();
  };
  run(kFast);
  EXPECT_TRUE(c.mapped());
  EXPECT_EQ(c.switches(), 0u);
  run(kSlow);
  EXPECT_FALSE(c.mapped());
  EXPECT_EQ(c.switches(), 1u);
}

TEST(DeviceWatchTest, SaysTheDeviceOnceReadsWaitAndMemoryOnceTheyDoNot) {
  DeviceWatch w({.window = 100});
  auto window = [&](int slow) {
    bool changed = false;
    for (int i = 0; i < 100; ++i) changed |= w.Note(i < slow ? kSlow : kFast);
    return changed;
  };
  EXPECT_FALSE(w.device());
  EXPECT_FALSE(window(5));  // 5 %: not above the 5 % that says the device
  EXPECT_FALSE(w.device());
  EXPECT_TRUE(window(6));
  EXPECT_TRUE(w.device());
  // Hysteresis: memory again only below 1 % slow.
  EXPECT_FALSE(window(3));
  EXPECT_FALSE(window(1));
  EXPECT_TRUE(w.device());
  EXPECT_TRUE(window(0));
  EXPECT_FALSE(w.device());
  EXPECT_EQ(w.switches(), 2u);
  // Four threads noting slow reads at once: one switch, whichever thread closes the windows.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20'000; ++i) w.Note(kSlow);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(w.device());
  EXPECT_EQ(w.switches(), 3u);
}

// An Env whose reads take at least the time set for their way: copies out of a "mapping" (a
// reader of MemEnv's bytes standing for one) or preads.
class TimedEnv : public MemEnv {
 public:
  std::atomic<uint64_t> mapped_nanos{0}, pread_nanos{0};
  std::atomic<int> released{0};  // ReleaseMappedPages calls of the "mapped" readers

  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    return Timed(path, &pread_nanos, nullptr);
  }
  StatusOr<std::unique_ptr<RandomAccessFile>> NewMappedRandomAccessFile(const std::string& path,
                                                                        uint64_t) override {
    return Timed(path, &mapped_nanos, &released);
  }

 private:
  class Reader : public RandomAccessFile {
   public:
    Reader(std::unique_ptr<RandomAccessFile> r, const std::atomic<uint64_t>* nanos,
           std::atomic<int>* released)
        : r_(std::move(r)), nanos_(nanos), released_(released) {}
    Status Read(uint64_t offset, size_t n, char* scratch, size_t* bytes_read) const override {
      const auto until =
          std::chrono::steady_clock::now() + std::chrono::nanoseconds(nanos_->load());
      while (std::chrono::steady_clock::now() < until) {
      }
      return r_->Read(offset, n, scratch, bytes_read);
    }
    uint64_t size() const override { return r_->size(); }
    const std::string& name() const override { return r_->name(); }
    void ReleaseMappedPages() const override {
      if (released_ != nullptr) ++*released_;
    }

   private:
    std::unique_ptr<RandomAccessFile> r_;
    const std::atomic<uint64_t>* nanos_;
    std::atomic<int>* released_;
  };

  StatusOr<std::unique_ptr<RandomAccessFile>> Timed(const std::string& path,
                                                    const std::atomic<uint64_t>* nanos,
                                                    std::atomic<int>* released) {
    ASSIGN_OR_RETURN(auto r, MemEnv::NewRandomAccessFile(path));
    return std::unique_ptr<RandomAccessFile>(new Reader(std::move(r), nanos, released));
  }
};

TEST(ReadPathChooserTest, AStoreReadsOutOfMappingsWhileTheyAreFast) {
  constexpr ValueLayout kLayout{4, 4, 1};
  for (MappedReads mode : {MappedReads::kOff, MappedReads::kOn, MappedReads::kAuto}) {
    SCOPED_TRACE(static_cast<int>(mode));
    TimedEnv env;
    SsdOptions o;
    o.dir = "/s";
    o.group_bits = 4;
    o.mapped_reads = mode;
    // A read is slow past 200 us, and the slow ones below take 250 us. A fast read the
    // scheduler stops once can still pass 200 us on a busy machine (one did in CI at 20 us),
    // so a window turns only with a quarter of its reads slow and comes back under a tenth.
    o.read_path = {.window = 32, .slow_nanos = 200'000, .to_pread = 0.25, .to_mapped = 0.1};
    o.device_watch = {.window = 32, .slow_nanos = 200'000, .to_device = 0.25, .to_memory = 0.1};
    auto created = SsdStore::Create(&env, o, kLayout);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    SsdStore& store = **created;
    // One record of 40 rows in each of the 16 groups.
    std::vector<RecordLoc> locs(16);
    std::vector<std::string> bytes(16);
    Random rng(7);
    RowBlock rows(kLayout);
    RecordBuilder b;
    for (uint32_t g = 0; g < 16; ++g) {
      b.Reset(g);
      rows.Resize(40);
      uint32_t i = 0;
      for (uint64_t k = 1; i < 40; ++k) {
        if (GroupOfKey(kLayout, o.group_bits, k) != g) continue;
        rows.ClearRow(i, k);
        rows.show(i) = static_cast<float>(rng.Below(100));
        b.AddRow(rows, i++);
      }
      ASSERT_TRUE(store.Append(&b, &locs[g]).ok());
    }
    ASSERT_TRUE(store.FlushAppends().ok());
    // Reads every record `times` times (the same bytes each time); returns the mapped ones.
    auto read = [&](int times) {
      const uint64_t before = store.Stats().mapped_records_read;
      for (int t = 0; t < times; ++t) {
        for (uint32_t g = 0; g < 16; ++g) {
          RecordView view;
          const Status st = store.Read(locs[g], g, &view);
          EXPECT_TRUE(st.ok()) << st.ToString();
          EXPECT_EQ(view.rows(), 40u);
          if (bytes[g].empty()) bytes[g] = view.bytes;
          EXPECT_EQ(view.bytes, bytes[g]) << g;
        }
      }
      return store.Stats().mapped_records_read - before;
    };
    const bool maps = mode != MappedReads::kOff;
    EXPECT_EQ(read(8), maps ? 128u : 0u);  // the page cache holds the files: both fast
    EXPECT_FALSE(store.ReadsFromDevice());
    env.mapped_nanos = env.pread_nanos = 250'000;  // read from the device: both wait
    const uint64_t mapped_from_device = read(16);
    EXPECT_TRUE(store.ReadsFromDevice());
    env.mapped_nanos = env.pread_nanos = 0;  // cached again
    const uint64_t mapped_again = read(8);
    EXPECT_FALSE(store.ReadsFromDevice());
    // The mappings alone wait (their faults; preads fast): auto must not take turns.
    env.mapped_nanos = 250'000;
    const uint64_t mapped_alone_slow = read(40);
    const DiskStats d = store.Stats();
    EXPECT_EQ(d.records_read, 72u * 16);
    EXPECT_EQ(d.mapped_reads, maps);
    switch (mode) {
      case MappedReads::kOff:
        EXPECT_EQ(mapped_from_device + mapped_again + mapped_alone_slow, 0u);
        EXPECT_EQ(d.read_path_switches, 0u);
        EXPECT_EQ(env.released, 0);
        EXPECT_EQ(d.device_read_switches, 2u);  // the preads were fast at the end
        EXPECT_FALSE(store.ReadsFromDevice());
        break;
      case MappedReads::kOn:
        EXPECT_EQ(mapped_from_device, 256u);
        EXPECT_EQ(mapped_alone_slow, 640u);
        EXPECT_EQ(d.read_path_switches, 0u);
        EXPECT_EQ(env.released, 0);
        EXPECT_EQ(d.device_read_switches, 3u);  // the mapped reads were slow at the end
        EXPECT_TRUE(store.ReadsFromDevice());
        break;
      case MappedReads::kAuto:
        // The first window of 32 reads (all slow) ends the mapped ones; the slow preads keep
        // them away.
        EXPECT_EQ(mapped_from_device, 32u);
        // Back to mappings after the first window of fast preads.
        EXPECT_EQ(mapped_again, 128u - 32u);
        // Mapped 1 window, pread 1, mapped 1, pread 2, mapped 1, pread 4, mapped 1, pread 8,
        // mapped 1 of the 20: a window each way would have mapped 10 of them.
        EXPECT_EQ(mapped_alone_slow, 5u * 32);
        EXPECT_EQ(d.read_path_switches, 2u + 9u);
        // Every switch to pread let go of the mapped pages of the store's one file.
        EXPECT_EQ(d.files, 1u);
        EXPECT_EQ(env.released, 1 + 5);
        // The watch follows the reads' latency whichever way they were taken: slow in each
        // window of mappings, fast in each of preads (its windows those of the chooser here).
        EXPECT_EQ(d.device_read_switches, 2u + 9u);
        EXPECT_TRUE(store.ReadsFromDevice());  // the last window was a mapped one
        break;
    }
  }
}

}  // namespace
}  // namespace ctrbox
