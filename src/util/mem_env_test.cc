#include "util/mem_env.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "util/random.h"

namespace ctrbox {
namespace {

std::string Read(Env* env, const std::string& path) {
  std::string s;
  Status st = ReadFileToString(env, path, &s);
  return st.ok() ? s : "<" + std::string(StatusCodeName(st.code())) + ">";
}

// The same random sequence of operations on the POSIX Env and on MemEnv: every result (status
// code, contents, listings) must agree. MemEnv is the reference the crash tests rely on, so it
// must behave like the real file system while nothing crashes.
TEST(MemEnvTest, BehavesLikeThePosixEnv) {
  char tmpl[] = "/tmp/ctrbox_memenv_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  MemEnv mem;
  ASSERT_TRUE(mem.CreateDirs(root).ok());
  Env* envs[2] = {Env::Posix(), &mem};
  Random rng(42);
  const std::vector<std::string> names = {"a", "b", "d/c", "d/e", "f/g"};
  for (int step = 0; step < 3000; ++step) {
    const std::string p = JoinPath(root, names[rng.Below(names.size())]);
    const std::string q = JoinPath(root, names[rng.Below(names.size())]);
    const int op = static_cast<int>(rng.Below(9));
    const std::string text(rng.Below(40), static_cast<char>('a' + rng.Below(26)));
    const uint64_t offset = rng.Below(8);
    std::string got[2];
    for (int e = 0; e < 2; ++e) {
      Env* env = envs[e];
      std::string& r = got[e];
      switch (op) {
        case 0:
        case 1: {  // write (truncate) or append, sometimes synced
          auto f = op == 0 ? env->NewWritableFile(p) : env->NewAppendableFile(p);
          r = std::string(StatusCodeName(f.status().code()));
          if (!f.ok()) break;
          r += (*f)->Append(text).ok() ? "+" : "-";
          if (text.size() % 2) r += (*f)->Sync().ok() ? "s" : "!";
          r += (*f)->Close().ok() ? "c" : "!";
          break;
        }
        case 2:
          r = Read(env, p);
          break;
        case 3:
          r = StatusCodeName(env->RenameFile(p, q).code());
          break;
        case 4:
          r = StatusCodeName(env->DeleteFile(p).code());
          break;
        case 5:
          r = StatusCodeName(env->CreateDirs(DirName(p)).code());
          break;
        case 6: {
          auto c = env->GetChildren(DirName(p));
          r = StatusCodeName(c.status().code());
          if (c.ok()) {
            for (const auto& n : *c) r += " " + n;
          }
          break;
        }
        case 7: {
          auto sz = env->GetFileSize(p);
          r = sz.ok() ? std::to_string(*sz) : std::string(StatusCodeName(sz.status().code()));
          r += env->FileExists(p) ? " exists" : " absent";
          break;
        }
        default: {  // random-access read of a range
          auto f = env->NewRandomAccessFile(p);
          r = StatusCodeName(f.status().code());
          if (!f.ok()) break;
          char buf[64];
          size_t n = 0;
          Status s = (*f)->Read(offset, 20, buf, &n);
          r += std::string(StatusCodeName(s.code())) + std::string(buf, n) + " " +
               std::to_string((*f)->size());
          break;
        }
      }
    }
    ASSERT_EQ(got[1], got[0]) << "step " << step << " op " << op << " " << p << " " << q;
  }
  (void)std::system(("rm -rf " + root).c_str());
}

TEST(MemEnvTest, CrashKeepsOnlyWhatWasSynced) {
  MemEnv env;
  ASSERT_TRUE(env.CreateDirs("/db").ok());
  // Synced data in a synced directory entry survives; later unsynced appends do not.
  {
    auto f = std::move(env.NewWritableFile("/db/log").value());
    ASSERT_TRUE(f->Append("committed").ok());
    ASSERT_TRUE(f->Sync().ok());
    ASSERT_TRUE(env.SyncDir("/db").ok());
    ASSERT_TRUE(f->Append(" and more").ok());
    ASSERT_TRUE(f->Close().ok());
  }
  // An entry synced before its data: an empty file.
  {
    auto f = std::move(env.NewWritableFile("/db/empty").value());
    ASSERT_TRUE(env.SyncDir("/db").ok());
    ASSERT_TRUE(f->Append("lost").ok());
  }
  // A synced file whose entry was never synced disappears.
  {
    auto f = std::move(env.NewWritableFile("/db/new").value());
    ASSERT_TRUE(f->Append("x").ok());
    ASSERT_TRUE(f->Sync().ok());
  }
  EXPECT_EQ(Read(&env, "/db/log"), "committed and more");
  env.SimulateCrash();
  EXPECT_EQ(Read(&env, "/db/log"), "committed");
  EXPECT_FALSE(env.FileExists("/db/new"));
  EXPECT_EQ(Read(&env, "/db/empty"), "");
  // A deletion and a rename are undone unless the directory is synced.
  ASSERT_TRUE(env.DeleteFile("/db/log").ok());
  ASSERT_TRUE(env.RenameFile("/db/empty", "/db/moved").ok());
  env.SimulateCrash();
  EXPECT_EQ(Read(&env, "/db/log"), "committed");
  EXPECT_TRUE(env.FileExists("/db/empty"));
  EXPECT_FALSE(env.FileExists("/db/moved"));
  ASSERT_TRUE(env.RenameFile("/db/empty", "/db/moved").ok());
  ASSERT_TRUE(env.SyncDir("/db").ok());
  env.SimulateCrash();
  EXPECT_TRUE(env.FileExists("/db/moved"));
  EXPECT_FALSE(env.FileExists("/db/empty"));
}

TEST(MemEnvTest, WriteFileAtomicLeavesOldOrNewAtEveryCrashPoint) {
  // The atomic-replace protocol under a crash after each of its I/O calls, and under every
  // call failing: the target holds exactly the old or the new contents, never a mix.
  for (uint64_t n = 1; n <= 6; ++n) {
    for (bool fail : {false, true}) {
      MemEnv env;
      ASSERT_TRUE(env.CreateDirs("/m").ok());
      ASSERT_TRUE(WriteFileAtomic(&env, "/m/MANIFEST", "old version").ok());
      if (fail) env.InjectFault(FaultOp::kAny, n, MemEnv::Eio("injected"));
      const uint64_t before = env.Calls(FaultOp::kAny);
      Status s = WriteFileAtomic(&env, "/m/MANIFEST", "new version, longer");
      const uint64_t calls = env.Calls(FaultOp::kAny) - before;
      env.ClearFaults();  // a fault past the protocol's calls must not hit the check below
      if (fail && n <= calls) {
        EXPECT_FALSE(s.ok()) << n;
      }
      env.SimulateCrash();
      const std::string got = Read(&env, "/m/MANIFEST");
      EXPECT_TRUE(got == "old version" || got == "new version, longer") << n << " " << got;
      if (!fail) {
        EXPECT_EQ(got, "new version, longer");
      }
    }
  }
}

TEST(MemEnvTest, InjectedFaultsFireOnTheNthCall) {
  MemEnv env;
  ASSERT_TRUE(env.CreateDirs("/d").ok());
  auto f = std::move(env.NewWritableFile("/d/f").value());
  env.InjectFault(FaultOp::kWrite, 3, MemEnv::NoSpace("/d/f"));
  EXPECT_TRUE(f->Append("1").ok());
  EXPECT_TRUE(f->Append("2").ok());
  Status s = f->Append("3");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("No space left"), std::string::npos);
  EXPECT_TRUE(f->Append("4").ok());         // one-shot
  EXPECT_EQ(*env.Contents("/d/f"), "124");  // the failed append wrote nothing
  EXPECT_EQ(env.FaultsFired(), 1u);

  env.InjectFault(FaultOp::kRead, 2, MemEnv::Eio("/d/f"), /*sticky=*/true);
  auto r = std::move(env.NewRandomAccessFile("/d/f").value());
  char buf[4];
  size_t n = 0;
  EXPECT_TRUE(r->Read(0, 4, buf, &n).ok());
  EXPECT_EQ(r->Read(0, 4, buf, &n).code(), StatusCode::kIOError);
  EXPECT_EQ(r->Read(0, 4, buf, &n).code(), StatusCode::kIOError);  // sticky
  env.ClearFaults();
  EXPECT_TRUE(r->Read(0, 4, buf, &n).ok());
  EXPECT_EQ(env.Calls(FaultOp::kRead), 4u);
  EXPECT_EQ(env.Calls(FaultOp::kWrite), 4u);
}

TEST(MemEnvTest, AFailedSyncIsNeverMadeGoodByRetrying) {
  MemEnv env;
  ASSERT_TRUE(env.CreateDirs("/d").ok());
  auto f = std::move(env.NewWritableFile("/d/f").value());
  ASSERT_TRUE(env.SyncDir("/d").ok());
  ASSERT_TRUE(f->Append("first").ok());
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_TRUE(f->Append(" second").ok());
  env.InjectFault(FaultOp::kSync, 1, MemEnv::Eio("/d/f"));
  EXPECT_EQ(f->Sync().code(), StatusCode::kIOError);
  // The retry reports success, as Linux does once it has dropped the dirty pages ...
  EXPECT_TRUE(f->Sync().ok());
  env.SimulateCrash();
  // ... but the data after the last good sync is gone.
  EXPECT_EQ(Read(&env, "/d/f"), "first");
}

TEST(MemEnvTest, FlipBitCorruptsTheStoredBytes) {
  MemEnv env;
  ASSERT_TRUE(env.CreateDirs("/d").ok());
  ASSERT_TRUE(WriteFileAtomic(&env, "/d/f", "AB").ok());
  ASSERT_TRUE(env.FlipBit("/d/f", 9).ok());  // bit 1 of 'B' (0x42 -> 0x40)
  EXPECT_EQ(Read(&env, "/d/f"), "A@");
  env.SimulateCrash();  // the flip is in the durable bytes too
  EXPECT_EQ(Read(&env, "/d/f"), "A@");
  EXPECT_EQ(env.FlipBit("/d/f", 16).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(env.FlipBit("/d/none", 0).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ctrbox
