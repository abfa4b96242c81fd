// Mutex, SharedMutex, MutexLock, ReaderLock, WriterLock and CondVar: the standard library's
// locks with clang thread-safety annotations (util/thread_annotations.h), so that fields
// marked GUARDED_BY and functions marked REQUIRES are checked at compile time (leveldb's
// port::Mutex and MutexLock, abseil's absl::Mutex).
//
// Thread safety: these are the synchronisation primitives; every method is safe to call
// concurrently as its contract says (Unlock only by the holder).
#ifndef CTRBOX_UTIL_MUTEX_H_
#define CTRBOX_UTIL_MUTEX_H_

#include <cassert>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#include "util/thread_annotations.h"

namespace ctrbox {

class CondVar;

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis the caller holds the lock (not checked at run time: std::mutex has no
  // owner query). For callbacks the analysis cannot follow.
  void AssertHeld() ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// A reader-writer lock.
class CAPABILITY("mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  void LockShared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a Mutex for its lifetime.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Holds a SharedMutex exclusively for its lifetime.
class SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~WriterLock() RELEASE() { mu_->Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex* const mu_;
};

// Holds a SharedMutex shared for its lifetime.
class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex* mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_->LockShared(); }
  ~ReaderLock() RELEASE() { mu_->UnlockShared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex* const mu_;
};

// A condition variable bound to one Mutex. Each wait names that mutex, so the analysis checks
// that the caller holds it; it is released while the caller sleeps and held again when the
// wait returns. Callers re-check their condition in a loop (wake-ups may be spurious), which
// also keeps their reads of guarded fields in code the analysis sees.
class CondVar {
 public:
  explicit CondVar(Mutex* mu) : mu_(mu) {}
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // REQUIRES: mu is the mutex this condition variable was made with.
  void Wait(Mutex* mu) REQUIRES(mu) {
    assert(mu == mu_);
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // Waits until signalled or `timeout` passes.
  template <typename Rep, typename Period>
  void WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout) REQUIRES(mu) {
    assert(mu == mu_);
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait_for(lock, timeout);
    lock.release();
  }
  // Waits until signalled or `deadline`; returns false if the deadline passed.
  bool WaitUntil(Mutex* mu, std::chrono::steady_clock::time_point deadline) REQUIRES(mu) {
    assert(mu == mu_);
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool signalled = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return signalled;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  Mutex* const mu_;
  std::condition_variable cv_;
};

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_MUTEX_H_
