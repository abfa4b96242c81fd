// Clang thread-safety annotations (-Wthread-safety), in the style of leveldb's
// port/thread_annotations.h: they state which lock guards a field and which locks a function
// needs, and a clang build checks every access (scripts/thread_safety; CI runs it). Other
// compilers see nothing. Use them with util/mutex.h's Mutex, MutexLock and CondVar: the
// standard library's mutexes carry no annotations.
#ifndef CTRBOX_UTIL_THREAD_ANNOTATIONS_H_
#define CTRBOX_UTIL_THREAD_ANNOTATIONS_H_

#if defined(__clang__)
#define CTRBOX_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define CTRBOX_THREAD_ANNOTATION(x)
#endif

// A type that is a lock (a mutex): "mutex" in clang's messages.
#define CAPABILITY(x) CTRBOX_THREAD_ANNOTATION(capability(x))
#define LOCKABLE CTRBOX_THREAD_ANNOTATION(lockable)
// An RAII type that holds a lock for its lifetime.
#define SCOPED_CAPABILITY CTRBOX_THREAD_ANNOTATION(scoped_lockable)

// A field read and written only with the lock held.
#define GUARDED_BY(x) CTRBOX_THREAD_ANNOTATION(guarded_by(x))
// A pointer field whose pointee is read and written only with the lock held.
#define PT_GUARDED_BY(x) CTRBOX_THREAD_ANNOTATION(pt_guarded_by(x))

// Lock order: this lock is taken before / after the named ones.
#define ACQUIRED_BEFORE(...) CTRBOX_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) CTRBOX_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))

// The caller must hold the locks (exclusively / at least shared).
#define REQUIRES(...) CTRBOX_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) CTRBOX_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define EXCLUSIVE_LOCKS_REQUIRED(...) \
  CTRBOX_THREAD_ANNOTATION(exclusive_locks_required(__VA_ARGS__))
#define SHARED_LOCKS_REQUIRED(...) CTRBOX_THREAD_ANNOTATION(shared_locks_required(__VA_ARGS__))
// The caller must not hold the locks (the function takes them).
#define EXCLUDES(...) CTRBOX_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define LOCKS_EXCLUDED(...) CTRBOX_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// The function takes / releases the locks (this object's when none is named).
#define ACQUIRE(...) CTRBOX_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) CTRBOX_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) CTRBOX_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) CTRBOX_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) CTRBOX_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) CTRBOX_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// The function checks at run time that the lock is held, and tells the analysis so.
#define ASSERT_CAPABILITY(x) CTRBOX_THREAD_ANNOTATION(assert_capability(x))
// The function returns a reference to the named lock.
#define RETURN_CAPABILITY(x) CTRBOX_THREAD_ANNOTATION(lock_returned(x))

// Turns the analysis off for one function: only where the locking is correct for a reason
// the analysis cannot follow, stated beside it.
#define NO_THREAD_SAFETY_ANALYSIS CTRBOX_THREAD_ANNOTATION(no_thread_safety_analysis)

#endif  // CTRBOX_UTIL_THREAD_ANNOTATIONS_H_
