// The SSD tier's choice between two ways of reading a record: a copy out of a mapping of its
// file or a pread (storage.mapped_reads=auto, docs/storage.md "Reads").
#ifndef CTRBOX_TABLE_READ_PATH_H_
#define CTRBOX_TABLE_READ_PATH_H_

#include <atomic>
#include <cstdint>
#include <mutex>

namespace ctrbox {

// A window of reads and how many of them were slow: one atomic add a read, written by every
// reader, so on a cache line of its own (the members its owner declares beside it, such as the
// SSD store's group index read by every pull, share none of it).
class SlowReadWindow {
 public:
  SlowReadWindow(uint32_t reads, uint64_t slow_nanos) : reads_(reads), slow_nanos_(slow_nanos) {}
  // Counts a read that took `nanos`. The read that fills the window closes it: true, with
  // *share the slow share of its reads (those noted meanwhile included); false otherwise.
  bool Add(uint64_t nanos, double* share);

 private:
  const uint32_t reads_;
  const uint64_t slow_nanos_;
  alignas(64) std::atomic<uint64_t> count_{0};  // reads in the low 32 bits, slow in the high 32
};

// A copy out of a mapping costs no system call where the page cache holds the file (0.6 us a
// 4 KiB read against 1.4 for a pread: bench/results/io_mapped.jsonl), and where it does not,
// each page faults on its own (a pread asks for a record's pages at once) and mapped pages are
// costlier to reclaim: a confined box read ~1.8x the device pages. So the reads go through
// mappings while they come from memory, and through pread once they come from the device.
//
// What the chooser watches is the share of *slow* reads (longer than slow_nanos: a device's
// latency, not a copy's) in each window of `window` reads taken the current way: above
// to_pread of them, mapped reads give way to preads; below to_mapped (lower: hysteresis),
// preads give way to mapped reads. Where the mappings alone are slow (each page's fault costs
// where a pread reads a record at once), the two would take turns a window each: so a return
// to mappings that lasts a single window doubles the windows of preads before the next one (up
// to 1024 windows); a longer stint resets it. Thread-safe: Note is a single atomic add, and the
// reader whose read closes a window decides.
class ReadPathChooser {
 public:
  struct Options {
    uint32_t window = 4096;
    uint64_t slow_nanos = 20'000;
    double to_pread = 0.05, to_mapped = 0.01;
  };
  explicit ReadPathChooser(Options o);
  ReadPathChooser() : ReadPathChooser(Options{}) {}

  // Whether the next read should be a mapped one.
  bool mapped() const { return mapped_.load(std::memory_order_relaxed); }
  // Counts a read that took `nanos`, taken through a mapping (`mapped`) or not. A read taken
  // the other way than the current one (begun before a switch) is not counted. True when this
  // read's window changed the way (once per switch).
  bool Note(bool mapped, uint64_t nanos);
  // How many times the way changed.
  uint64_t switches() const { return switches_.load(std::memory_order_relaxed); }

 private:
  // Decides at the end of a window whose reads were `share` slow; true if it switched.
  bool Decide(bool mapped, double share);

  const Options o_;
  std::atomic<bool> mapped_{true};
  std::mutex decide_mu_;  // one window decided at a time (try_lock: a late one is dropped)
  uint32_t windows_ = 0;  // closed since the last switch (decide_mu_)
  uint32_t hold_ = 1;     // windows of preads before mappings may come back (decide_mu_)
  std::atomic<uint64_t> switches_{0};
  SlowReadWindow window_;  // the current window of reads taken the current way
};

// Whether the SSD tier's record reads come from the device now, whichever way they are taken
// (storage.device_io_threads: more reads in flight pay where the device serves them, and cost
// two cores the switches where the page cache does; docs/storage.md "Reads"). The same test
// as the chooser's, over every read: in each window of `window` reads, more than to_device of
// them slow (longer than slow_nanos) and the reads come from the device; fewer than to_memory
// (hysteresis) and they come from memory again. Thread-safe: Note is a single atomic add, and
// the reader whose read closes a window decides.
class DeviceWatch {
 public:
  struct Options {
    uint32_t window = 4096;
    uint64_t slow_nanos = 20'000;
    double to_device = 0.05, to_memory = 0.01;
  };
  explicit DeviceWatch(Options o) : o_(o), window_(o.window, o.slow_nanos) {}
  DeviceWatch() : DeviceWatch(Options{}) {}

  bool device() const { return device_.load(std::memory_order_relaxed); }
  // Counts a read that took `nanos`. True when its window changed the answer.
  bool Note(uint64_t nanos);
  uint64_t switches() const { return switches_.load(std::memory_order_relaxed); }

 private:
  const Options o_;
  std::atomic<bool> device_{false};
  std::atomic<uint64_t> switches_{0};
  SlowReadWindow window_;
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_READ_PATH_H_
