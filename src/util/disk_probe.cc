#include "util/disk_probe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "fmt/format.h"

namespace ctrbox {
namespace {

constexpr size_t kBlock = 4096;
constexpr size_t kSeqBytes = 1 << 20;

using Clock = std::chrono::steady_clock;

struct OpenFile {
  int fd = -1;
  uint64_t blocks = 0;  // whole 4 KiB blocks
  std::string path;
};

struct Files {
  std::vector<OpenFile> open;
  std::vector<uint64_t> cumulative;  // blocks up to and including each file
  ~Files() {
    for (OpenFile& f : open) ::close(f.fd);
  }
};

// An aligned buffer for O_DIRECT.
std::unique_ptr<char, decltype(&std::free)> Aligned(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, kBlock, bytes) != 0) p = nullptr;
  return {static_cast<char*>(p), &std::free};
}

// Random 4 KiB reads by `threads` threads for `seconds`; the reads made, or the first error.
StatusOr<uint64_t> RandomReads(const Files& files, int threads, double seconds) {
  std::atomic<uint64_t> reads{0};
  std::mutex mu;
  Status failed;
  const Clock::time_point end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(seconds));
  std::vector<std::thread> pool;
  const uint64_t total = files.cumulative.back();
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      auto buf = Aligned(kBlock);
      std::mt19937_64 rng(0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(t + 1));
      uint64_t mine = 0;
      while (Clock::now() < end) {
        const uint64_t b = rng() % total;
        const size_t f = static_cast<size_t>(
            std::upper_bound(files.cumulative.begin(), files.cumulative.end(), b) -
            files.cumulative.begin());
        const uint64_t before = f == 0 ? 0 : files.cumulative[f - 1];
        const off_t at = static_cast<off_t>((b - before) * kBlock);
        const ssize_t n = ::pread(files.open[f].fd, buf.get(), kBlock, at);
        if (n != static_cast<ssize_t>(kBlock)) {
          std::lock_guard<std::mutex> l(mu);
          if (failed.ok()) {
            failed = IOError(fmt::format("{}: disk probe read at {}: {}", files.open[f].path, at,
                                         n < 0 ? std::strerror(errno) : "short read"));
          }
          break;
        }
        ++mine;
      }
      reads += mine;
    });
  }
  for (std::thread& th : pool) th.join();
  if (!failed.ok()) return failed;
  return reads.load();
}

}  // namespace

StatusOr<DiskCeiling> ProbeDisk(const std::vector<std::string>& paths, double seconds) {
  DiskCeiling c;
  const Clock::time_point start = Clock::now();
  Files files;
  for (const std::string& p : paths) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0 && errno == EINVAL) {
      c.why_not =
          fmt::format("{}: the file system takes no O_DIRECT (its page cache would answer)", p);
      return c;
    }
    if (fd < 0) return IOError(fmt::format("{}: disk probe: {}", p, std::strerror(errno)));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < static_cast<off_t>(kBlock)) {
      ::close(fd);
      continue;
    }
    files.open.push_back({fd, static_cast<uint64_t>(st.st_size) / kBlock, p});
    files.cumulative.push_back((files.cumulative.empty() ? 0 : files.cumulative.back()) +
                               files.open.back().blocks);
  }
  if (files.open.empty()) {
    c.why_not = "no file of at least 4 KiB to read";
    return c;
  }
  // One read first: a file system may accept O_DIRECT at open and refuse the read.
  {
    auto buf = Aligned(kBlock);
    if (::pread(files.open[0].fd, buf.get(), kBlock, 0) < 0) {
      if (errno == EINVAL) {
        c.why_not = fmt::format("{}: the file system takes no O_DIRECT reads", files.open[0].path);
        return c;
      }
      return IOError(fmt::format("{}: disk probe: {}", files.open[0].path, std::strerror(errno)));
    }
  }
  const double part = std::max(seconds, 0.05);
  auto timed = [](auto&& f) {
    const Clock::time_point t0 = Clock::now();
    auto r = f();
    return std::make_pair(std::move(r), std::chrono::duration<double>(Clock::now() - t0).count());
  };
  auto [qd1, s1] = timed([&] { return RandomReads(files, 1, 0.4 * part); });
  if (!qd1.ok()) return qd1.status();
  auto [qd16, s16] = timed([&] { return RandomReads(files, 16, 0.4 * part); });
  if (!qd16.ok()) return qd16.status();
  c.random_reads_qd1_per_s = static_cast<double>(*qd1) / s1;
  c.random_reads_qd16_per_s = static_cast<double>(*qd16) / s16;
  c.reads = *qd1 + *qd16;
  // Sequential: the largest file from its start, 1 MiB at a time.
  const OpenFile& big =
      *std::max_element(files.open.begin(), files.open.end(),
                        [](const OpenFile& a, const OpenFile& b) { return a.blocks < b.blocks; });
  auto buf = Aligned(kSeqBytes);
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point until =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(0.2 * part));
  uint64_t bytes = 0;
  const uint64_t size = big.blocks * kBlock;
  while (Clock::now() < until) {
    const uint64_t at = bytes % size;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kSeqBytes, size - at));
    const ssize_t n = ::pread(big.fd, buf.get(), want, static_cast<off_t>(at));
    if (n <= 0) {
      return IOError(fmt::format("{}: disk probe read at {}: {}", big.path, at,
                                 n < 0 ? std::strerror(errno) : "end of file"));
    }
    bytes += static_cast<uint64_t>(n);
    ++c.reads;
  }
  const double seq_s = std::chrono::duration<double>(Clock::now() - t0).count();
  c.seq_mb_per_s = static_cast<double>(bytes) * 1e-6 / seq_s;
  c.measured = true;
  c.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return c;
}

StatusOr<DiskCeiling> ProbeDiskDir(Env* env, const std::string& dir, double seconds) {
  ASSIGN_OR_RETURN(std::vector<std::string> names, env->GetChildren(dir));
  std::vector<std::string> files;
  for (const std::string& n : names) files.push_back(JoinPath(dir, n));
  return ProbeDisk(files, seconds);
}

}  // namespace ctrbox
