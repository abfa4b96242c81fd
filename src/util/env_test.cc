#include "util/env.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "util/mem_env.h"
#include "util/sys.h"
#include "util/temp_dir.h"

namespace ctrbox {
namespace {

class EnvTest : public ::testing::Test {
 protected:
  testing::TempDir tmp_;
  Env* env_ = Env::Posix();
  const std::string dir_ = tmp_.path();
};

TEST_F(EnvTest, WriteReadRenameDelete) {
  std::string path = JoinPath(dir_, "a/b/file.txt");
  ASSERT_TRUE(env_->CreateDirs(DirName(path)).ok());
  ASSERT_TRUE(WriteFileAtomic(env_, path, "hello world").ok());
  std::string data;
  ASSERT_TRUE(ReadFileToString(env_, path, &data).ok());
  EXPECT_EQ(data, "hello world");
  auto size = env_->GetFileSize(path);
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 11u);

  auto raf = env_->NewRandomAccessFile(path);
  ASSERT_TRUE(raf.ok());
  char buf[16];
  size_t n = 0;
  ASSERT_TRUE((*raf)->Read(6, 10, buf, &n).ok());
  EXPECT_EQ(std::string(buf, n), "world");

  std::string moved = JoinPath(dir_, "a/moved.txt");
  ASSERT_TRUE(env_->RenameFile(path, moved).ok());
  EXPECT_FALSE(env_->FileExists(path));
  auto children = env_->GetChildren(JoinPath(dir_, "a"));
  ASSERT_TRUE(children.ok());
  EXPECT_EQ(*children, (std::vector<std::string>{"b", "moved.txt"}));
  ASSERT_TRUE(env_->DeleteFile(moved).ok());
  EXPECT_EQ(env_->DeleteFile(moved).code(), StatusCode::kNotFound);
}

TEST_F(EnvTest, MissingFileIsNotFoundWithPath) {
  auto f = env_->NewSequentialFile(JoinPath(dir_, "nope"));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("nope"), std::string::npos);
}

TEST_F(EnvTest, AppendableFileAppends) {
  std::string path = JoinPath(dir_, "log");
  for (int i = 0; i < 2; ++i) {
    auto f = env_->NewAppendableFile(path);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append("line\n").ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  std::string data;
  ASSERT_TRUE(ReadFileToString(env_, path, &data).ok());
  EXPECT_EQ(data, "line\nline\n");
}

// A reused file holds what was written into it alone once closed, whether that is shorter or
// longer than what it held; the old name is gone. MemEnv's default (rename, truncate) agrees.
TEST_F(EnvTest, AReusedFileHoldsTheNewBytesAlone) {
  MemEnv mem;
  ASSERT_TRUE(mem.CreateDirs(dir_).ok());
  for (Env* env : {env_, static_cast<Env*>(&mem)}) {
    const std::string old_path = JoinPath(dir_, "dead"), path = JoinPath(dir_, "new");
    for (size_t written : {3000u, 10000u, 25000u}) {
      ASSERT_TRUE(WriteFileAtomic(env, old_path, std::string(10000, 'a')).ok());
      auto f = env->ReuseWritableFile(old_path, path);
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      ASSERT_TRUE((*f)->Append(std::string(written / 2, 'b')).ok());
      ASSERT_TRUE((*f)->Flush().ok());
      ASSERT_TRUE((*f)->Append(std::string(written - written / 2, 'c')).ok());
      ASSERT_TRUE((*f)->Close().ok());
      EXPECT_FALSE(env->FileExists(old_path));
      std::string data;
      ASSERT_TRUE(ReadFileToString(env, path, &data).ok());
      EXPECT_EQ(data, std::string(written / 2, 'b') + std::string(written - written / 2, 'c'))
          << written << " bytes written over 10000";
      ASSERT_TRUE(env->DeleteFile(path).ok());
    }
    EXPECT_FALSE(env->ReuseWritableFile(old_path, path).ok());  // nothing to reuse
  }
}

// Files are read without touching their access time (O_NOATIME): a plain read of a file
// whose access time is older than its modification time moves it (relatime, the default),
// the Env's reads leave it. Where the file system keeps no access times the test skips.
TEST_F(EnvTest, ReadsLeaveTheAccessTime) {
  const std::string path = JoinPath(dir_, "rows.dat");
  ASSERT_TRUE(WriteFileAtomic(env_, path, std::string(8192, 'r')).ok());
  auto age = [&] {  // access time a day before the modification time
    struct stat st;
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    struct timespec times[2] = {st.st_mtim, st.st_mtim};
    times[0].tv_sec -= 86400;
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  };
  auto atime = [&] {
    struct stat st;
    EXPECT_EQ(::stat(path.c_str(), &st), 0);
    return st.st_atim.tv_sec;
  };
  age();
  const time_t aged = atime();
  {  // the control: a plain open and read
    const int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    char c;
    ASSERT_EQ(::pread(fd, &c, 1, 100), 1);
    ::close(fd);
  }
  if (atime() == aged) GTEST_SKIP() << "this file system does not update access times on reads";
  age();
  char buf[64];
  size_t n = 0;
  auto raf = env_->NewRandomAccessFile(path);
  ASSERT_TRUE(raf.ok());
  ASSERT_TRUE((*raf)->Read(100, sizeof(buf), buf, &n).ok());
  EXPECT_EQ(n, sizeof(buf));
  EXPECT_EQ(atime(), aged) << "NewRandomAccessFile";
  auto seq = env_->NewSequentialFile(path);
  ASSERT_TRUE(seq.ok());
  ASSERT_TRUE((*seq)->Read(sizeof(buf), buf, &n).ok());
  EXPECT_EQ(atime(), aged) << "NewSequentialFile";
  auto direct = env_->NewDirectRandomAccessFile(path);
  if (direct.ok()) {
    ASSERT_TRUE((*direct)->Read(0, sizeof(buf), buf, &n).ok());
    EXPECT_EQ(atime(), aged) << "NewDirectRandomAccessFile";
  }
}

TEST(PathTest, Components) {
  EXPECT_EQ(JoinPath("a", "b"), "a/b");
  EXPECT_EQ(JoinPath("a/", "b"), "a/b");
  EXPECT_EQ(DirName("a/b/c"), "a/b");
  EXPECT_EQ(DirName("c"), ".");
  EXPECT_EQ(DirName("/c"), "/");
  EXPECT_EQ(BaseName("a/b/c/"), "c");
}

// Issue 45, item 5: `ctrbox report --out /tmp` left /tmp.tmp behind. A write that fails
// leaves no temporary file; a directory as the target is named before anything is written.
TEST_F(EnvTest, AFailedAtomicWriteLeavesNoTemporaryFile) {
  const std::string d = JoinPath(dir_, "out");
  ASSERT_TRUE(env_->CreateDirs(d).ok());
  Status s = WriteFileAtomic(env_, d, "x");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is a directory"), std::string::npos) << s.ToString();
  EXPECT_FALSE(env_->FileExists(d + ".tmp"));
}

// Reads that bypass the page cache (O_DIRECT, widened to whole blocks) return exactly the
// bytes of buffered reads, for ranges across blocks, inside one, at and past the file's
// unaligned end, from several threads at once (each its own aligned buffer).
TEST_F(EnvTest, DirectReadsGiveTheBytesOfBufferedReads) {
  const std::string path = JoinPath(dir_, "records.dat");
  std::string data(3 * 4096 + 777, '\0');
  uint32_t x = 12345;
  for (char& c : data) c = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  ASSERT_TRUE(WriteFileAtomic(env_, path, data).ok());
  auto direct = env_->NewDirectRandomAccessFile(path);
  if (!direct.ok()) {
    ASSERT_EQ(direct.status().code(), StatusCode::kFailedPrecondition)
        << direct.status().ToString();
    GTEST_SKIP() << "no O_DIRECT on this file system: " << direct.status().ToString();
  }
  auto buffered = env_->NewRandomAccessFile(path);
  ASSERT_TRUE(buffered.ok());
  EXPECT_EQ((*direct)->size(), data.size());
  auto check = [&](uint64_t offset, size_t n) {
    std::string want(n, '\1'), got(n, '\2');
    size_t want_n = 0, got_n = 0;
    ASSERT_TRUE((*buffered)->Read(offset, n, want.data(), &want_n).ok());
    Status s = (*direct)->Read(offset, n, got.data(), &got_n);
    ASSERT_TRUE(s.ok()) << s.ToString() << " at " << offset << " + " << n;
    ASSERT_EQ(got_n, want_n) << offset << " + " << n;
    ASSERT_EQ(got.substr(0, got_n), want.substr(0, want_n)) << offset << " + " << n;
  };
  for (uint64_t offset : {0ul, 1ul, 100ul, 4095ul, 4096ul, 4097ul, 8000ul, 12288ul, 13000ul,
                          13064ul, 13065ul, 20000ul}) {
    for (size_t n : {0ul, 1ul, 16ul, 4095ul, 4096ul, 4097ul, 9000ul, 20000ul}) check(offset, n);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) check((i * 977 + t * 131) % data.size(), 1 + (i * 389) % 9000);
    });
  }
  for (auto& t : threads) t.join();
  // An Env without such reads says so (the SSD tier then reads through the cache).
  MemEnv mem;
  EXPECT_EQ(mem.NewDirectRandomAccessFile(path).status().code(), StatusCode::kFailedPrecondition);
}

// A mapped reader gives what pread gives: the same bytes, cut at the file's end, also for a
// file that grew after the open (the SSD tier reads the file it appends to) and for reads past
// the mapping (which go through pread); and in place (MappedBytes) the bytes that are all in
// the file and the mapping.
TEST_F(EnvTest, MappedReadsGiveTheBytesOfBufferedReads) {
  const std::string path = JoinPath(dir_, "records.dat");
  std::string data(3 * 4096 + 777, '\0');
  uint32_t x = 54321;
  for (char& c : data) c = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  auto writer = env_->NewWritableFile(path);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Append(std::string_view(data).substr(0, 5000)).ok());
  ASSERT_TRUE((*writer)->Flush().ok());
  constexpr uint64_t kMapBytes = 16384;  // the file grows to 13 065 bytes, read up to 20 000
  auto mapped = env_->NewMappedRandomAccessFile(path, kMapBytes);
  if (!mapped.ok()) {
    ASSERT_EQ(mapped.status().code(), StatusCode::kFailedPrecondition)
        << mapped.status().ToString();
    GTEST_SKIP() << "this file system maps no files: " << mapped.status().ToString();
  }
  (*mapped)->AdviseRandomReads();
  EXPECT_EQ((*mapped)->size(), 5000u);
  auto check = [&](const RandomAccessFile& buffered, uint64_t offset, size_t n) {
    std::string want(n, '\1'), got(n, '\2');
    size_t want_n = 0, got_n = 0;
    ASSERT_TRUE(buffered.Read(offset, n, want.data(), &want_n).ok());
    Status s = (*mapped)->Read(offset, n, got.data(), &got_n);
    ASSERT_TRUE(s.ok()) << s.ToString() << " at " << offset << " + " << n;
    ASSERT_EQ(got_n, want_n) << offset << " + " << n;
    ASSERT_EQ(got.substr(0, got_n), want.substr(0, want_n)) << offset << " + " << n;
    // In place (MappedBytes): the same bytes where all n are in the file and the mapping;
    // nowhere else, and never from a buffered reader.
    const char* at = (*mapped)->MappedBytes(offset, n);
    if (n > 0 && want_n == n && offset + n <= kMapBytes) {
      ASSERT_NE(at, nullptr) << offset << " + " << n;
      ASSERT_EQ(std::string_view(at, n), want) << offset << " + " << n;
    } else {
      ASSERT_EQ(at, nullptr) << offset << " + " << n;
    }
    ASSERT_EQ(buffered.MappedBytes(offset, n), nullptr);
  };
  const std::vector<uint64_t> offsets = {0,     1,     100,   4095,  4096,  4097,
                                         4999,  5000,  8000,  12288, 13000, 13064,
                                         13065, 16383, 16384, 16385, 20000};
  const std::vector<size_t> sizes = {0, 1, 16, 4095, 4096, 4097, 9000, 20000};
  {
    auto buffered = env_->NewRandomAccessFile(path);
    ASSERT_TRUE(buffered.ok());
    for (uint64_t offset : offsets) {
      for (size_t n : sizes) check(**buffered, offset, n);  // 5 000 bytes in the file
    }
  }
  ASSERT_TRUE((*writer)->Append(std::string_view(data).substr(5000)).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  auto buffered = env_->NewRandomAccessFile(path);
  ASSERT_TRUE(buffered.ok());
  for (uint64_t offset : offsets) {
    for (size_t n : sizes) check(**buffered, offset, n);  // grown to 13 065
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        check(**buffered, (i * 977 + t * 131) % data.size(), 1 + (i * 389) % 9000);
      }
    });
  }
  for (auto& t : threads) t.join();
  // A file larger than the bytes asked is mapped whole.
  auto whole = env_->NewMappedRandomAccessFile(path, 4096);
  ASSERT_TRUE(whole.ok());
  std::string all(data.size() + 10, '\0');
  size_t got = 0;
  ASSERT_TRUE((*whole)->Read(0, all.size(), all.data(), &got).ok());
  EXPECT_EQ(got, data.size());
  EXPECT_EQ(all.substr(0, got), data);
  MemEnv mem;
  EXPECT_EQ(mem.NewMappedRandomAccessFile(path, kMapBytes).status().code(),
            StatusCode::kFailedPrecondition);
}

// A mapped reader lets go of the pages its reads touched (the SSD tier's switch from mappings
// to pread): they leave the resident set, and the next reads map them again, the same bytes.
TEST_F(EnvTest, AMappingLetsGoOfItsPagesAndReadsThemAgain) {
  constexpr size_t kBytes = 32 << 20;
  const std::string path = JoinPath(dir_, "released.dat");
  std::string data(kBytes, '\0');
  for (size_t i = 0; i < kBytes; i += 4096) data[i] = static_cast<char>(i >> 12);
  auto writer = env_->NewWritableFile(path);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Append(data).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  auto mapped = env_->NewMappedRandomAccessFile(path, kBytes);
  if (!mapped.ok())
    GTEST_SKIP() << "this file system maps no files: " << mapped.status().ToString();
  auto read_all = [&] {
    char c = 0;
    size_t got = 0;
    for (size_t i = 0; i < kBytes; i += 4096) {
      ASSERT_TRUE((*mapped)->Read(i, 1, &c, &got).ok());
      ASSERT_EQ(c, data[i]) << i;
    }
  };
  const uint64_t before = CurrentResidentSet().files;
  read_all();
  const uint64_t touched = CurrentResidentSet().files;
  EXPECT_GE(touched, before + kBytes * 9 / 10);
  (*mapped)->ReleaseMappedPages();
  EXPECT_LE(CurrentResidentSet().files, touched - kBytes * 9 / 10);
  read_all();
  EXPECT_GE(CurrentResidentSet().files, before + kBytes * 9 / 10);
  // Elsewhere a no-op.
  auto buffered = env_->NewRandomAccessFile(path);
  ASSERT_TRUE(buffered.ok());
  (*buffered)->ReleaseMappedPages();
}

}  // namespace
}  // namespace ctrbox
