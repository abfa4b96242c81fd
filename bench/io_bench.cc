// I/O benchmark: how to read many small records (SSD-PS group records) fastest here.
//
//   build/bench/io_bench [--file-mb 1024] [--record 4096] [--reads 200000] [--dir DIR]
//
// Reads `reads` random aligned records of `record` bytes from a file of `file-mb` MiB, with
// the page cache (buffered) and without it (O_DIRECT), by: one thread of preads; a pool of
// N threads of preads (N = 2, 4, 8); io_uring with N requests in flight; and, buffered, copies
// out of a read-only mapping of the file (storage.mapped_reads), the mapping's first touches
// included. One JSON line each.
#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "bench/bench_util.h"
#include "util/random.h"

namespace ctrbox::bench {
namespace {

struct Result {
  double seconds;
  uint64_t bytes;
};

Result Preads(int fd, const std::vector<uint64_t>& offsets, size_t record, int threads) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  Stopwatch clock;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      void* buf = nullptr;
      if (posix_memalign(&buf, 4096, record) != 0) std::abort();
      for (size_t i; (i = next.fetch_add(1)) < offsets.size();) {
        if (pread(fd, buf, record, static_cast<off_t>(offsets[i])) != static_cast<ssize_t>(record))
          std::abort();
      }
      std::free(buf);
    });
  }
  for (auto& w : workers) w.join();
  return {clock.Seconds(), offsets.size() * record};
}

// Copies of the records out of a fresh read-only mapping of the file (MADV_RANDOM, as the SSD
// tier maps its files), one thread.
Result Mapped(int fd, uint64_t file_bytes, const std::vector<uint64_t>& offsets, size_t record) {
  void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) std::abort();
  ::madvise(map, file_bytes, MADV_RANDOM);
  std::vector<char> buf(record);
  uint64_t sum = 0;
  Stopwatch clock;
  for (uint64_t o : offsets) {
    std::memcpy(buf.data(), static_cast<const char*>(map) + o, record);
    sum += static_cast<unsigned char>(buf[o % record]);
  }
  const double secs = clock.Seconds();
  ::munmap(map, file_bytes);
  if (sum == 0) std::abort();  // the file is all 'x': the copies were made
  return {secs, offsets.size() * record};
}

Result Uring(int fd, const std::vector<uint64_t>& offsets, size_t record, unsigned depth) {
  io_uring ring;
  if (io_uring_queue_init(depth, &ring, 0) != 0) std::abort();
  std::vector<void*> bufs(depth);
  for (auto& b : bufs) {
    if (posix_memalign(&b, 4096, record) != 0) std::abort();
  }
  std::vector<unsigned> free_slots;
  for (unsigned i = 0; i < depth; ++i) free_slots.push_back(i);
  size_t submitted = 0, done = 0;
  Stopwatch clock;
  while (done < offsets.size()) {
    while (!free_slots.empty() && submitted < offsets.size()) {
      unsigned slot = free_slots.back();
      free_slots.pop_back();
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      io_uring_prep_read(sqe, fd, bufs[slot], record, offsets[submitted++]);
      io_uring_sqe_set_data(sqe, reinterpret_cast<void*>(uintptr_t{slot}));
    }
    io_uring_submit_and_wait(&ring, 1);
    io_uring_cqe* cqe;
    while (io_uring_peek_cqe(&ring, &cqe) == 0) {
      if (cqe->res != static_cast<int>(record)) std::abort();
      free_slots.push_back(
          static_cast<unsigned>(reinterpret_cast<uintptr_t>(io_uring_cqe_get_data(cqe))));
      io_uring_cqe_seen(&ring, cqe);
      ++done;
    }
  }
  const double secs = clock.Seconds();
  for (auto b : bufs) std::free(b);
  io_uring_queue_exit(&ring);
  return {secs, offsets.size() * record};
}

int Main(int argc, char** argv) {
  uint64_t file_mb = 1024, reads = 200000;
  size_t record = 4096;
  std::string dir = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--file-mb")
      file_mb = std::stoull(v);
    else if (k == "--record")
      record = std::stoull(v);
    else if (k == "--reads")
      reads = std::stoull(v);
    else if (k == "--dir")
      dir = v;
  }
  const std::string path = dir + "/ctrbox_io_bench.dat";
  {
    int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    std::string block(1 << 20, 'x');
    for (uint64_t m = 0; m < file_mb; ++m) {
      if (::write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size())) return 1;
    }
    ::fsync(fd);
    ::close(fd);
  }
  Random rng(1);
  std::vector<uint64_t> offsets(reads);
  const uint64_t slots = file_mb * (1 << 20) / record;
  for (auto& o : offsets) o = rng.Below(slots) * record;
  for (bool direct : {false, true}) {
    int fd = ::open(path.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
    if (fd < 0) continue;
    auto emit = [&](const std::string& method, int par, Result r) {
      Emit({{"bench", "io"},
            {"method", method},
            {"parallel", par},
            {"direct", direct},
            {"record_bytes", record},
            {"reads", reads},
            {"reads_per_s", reads / r.seconds},
            {"mb_per_s", r.bytes / r.seconds / 1e6}});
    };
    if (!direct) Preads(fd, offsets, record, 4);  // warm the page cache
    emit("pread", 1, Preads(fd, offsets, record, 1));
    if (!direct) emit("mapped", 1, Mapped(fd, file_mb << 20, offsets, record));
    for (int t : {2, 4, 8}) emit("pread_pool", t, Preads(fd, offsets, record, t));
    for (unsigned d : {4u, 16u, 64u})
      emit("io_uring", static_cast<int>(d), Uring(fd, offsets, record, d));
    ::close(fd);
  }
  ::unlink(path.c_str());
  return 0;
}

}  // namespace
}  // namespace ctrbox::bench

int main(int argc, char** argv) { return ctrbox::bench::Main(argc, argv); }
