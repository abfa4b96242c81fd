// The workers that answer a server's POST requests (http_server.h): a fixed set of threads,
// a task queue, and a dispatch that hands a task to the worker that went idle last. Under a
// light load the same one or two workers take every request, so their thread-local state (a
// model's dense parameters, parse buffers) stays in cache; with a first-come pool the tasks
// spread over every worker and each request pays for cold caches (measured: 12 % of
// throughput at 4 connections on 2 cores, docs/serve.md "Connections").
#ifndef CTRBOX_SERVE_WORKER_POOL_H_
#define CTRBOX_SERVE_WORKER_POOL_H_

#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "util/mutex.h"
#include "util/thread_annotations.h"

namespace ctrbox {

// Thread safety: Post from any thread; Join once, from a thread that is not a worker.
class WorkerPool {
 public:
  // REQUIRES: workers >= 1.
  explicit WorkerPool(int workers);
  ~WorkerPool();  // Joins.
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs task on a worker: the idle one that went idle last, else the first to finish its
  // task (tasks queued are taken in order).
  void Post(std::function<void()> task);
  // Runs the tasks posted before it, then stops the workers.
  void Join();
  // How many workers wait for a task now (a gauge: tests wait on it instead of sleeping).
  size_t idle() const;

 private:
  struct Worker {
    explicit Worker(Mutex* mu) : cv(mu) {}
    CondVar cv;
    std::function<void()> task;  // handed over by Post (guarded by the pool's mu_)
  };
  void Loop(Worker* self);

  mutable Mutex mu_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);  // tasks no idle worker took
  std::vector<Worker*> idle_ GUARDED_BY(mu_);                // the last to go idle at the back
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
};

}  // namespace ctrbox

#endif  // CTRBOX_SERVE_WORKER_POOL_H_
