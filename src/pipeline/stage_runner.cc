#include "pipeline/stage_runner.h"

#include <algorithm>
#include <memory>
#include <thread>

#include "util/bounded_queue.h"
#include "util/mutex.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

bool Stopping(const std::atomic<bool>* stop) {
  return stop != nullptr && stop->load(std::memory_order_relaxed);
}

// A read that gave up because of Ctrl-C (data.cancel: a pipe that stalled): the pass it was
// reading is dropped, as a pass read but not trained is.
bool ReadWasInterrupted(const Status& s, const std::atomic<bool>* stop) {
  return s.code() == StatusCode::kCancelled && Stopping(stop);
}

// The stages one after the other, pass by pass, on the caller's thread.
Status RunSequential(PassStages* stages, const std::atomic<bool>* stop, StageRunResult* result) {
  while (true) {
    if (Stopping(stop)) {
      result->interrupted = true;
      return Status::OK();
    }
    StatusOr<PassPtr> read = stages->Read(stages->train_pool());
    if (ReadWasInterrupted(read.status(), stop)) {
      result->interrupted = true;
      return Status::OK();
    }
    ASSIGN_OR_RETURN(PassPtr pass, std::move(read));
    if (!pass) return Status::OK();
    RETURN_IF_ERROR(stages->Pull(pass.get(), stages->train_pool()));
    RETURN_IF_ERROR(stages->Train(pass.get(), nullptr));
    RETURN_IF_ERROR(stages->Push(pass.get(), stages->train_pool()));
    result->totals.Add(pass->clock);
  }
}

// One thread per stage (train on the caller's), bounded queues between them.
class PipelinedRun {
 public:
  PipelinedRun(PassStages* stages, const PipelineOptions& options, const std::atomic<bool>* stop)
      : stages_(stages), options_(options), stop_(stop) {
    for (auto& q : queues_) q = std::make_unique<BoundedQueue<PassPtr>>(options.queue_depth);
  }

  Status Run(StageRunResult* result) {
    std::thread read([&] { ReadLoop(); });
    std::thread pull([&] { PullLoop(); });
    std::thread push([&] { PushLoop(); });
    TrainLoop();
    read.join();
    pull.join();
    push.join();
    result->totals = clocks_;
    result->interrupted = interrupted_.load();
    MutexLock l(&error_mu_);
    return first_error_;
  }

 private:
  BoundedQueue<PassPtr>& QueueAfter(StageId stage) { return *queues_[static_cast<int>(stage)]; }

  // The first error of any stage: closes every queue, discards the passes in them (their
  // pins are released) and cancels the shrink barrier, so every stage returns promptly. In a
  // job of several ranks it aborts the others at once: a stage of this rank or of another may
  // be waiting in an exchange that a stopped stage will never join (MPI: the job ends here).
  void Fail(const Status& s) {
    bool first = false;
    {
      MutexLock l(&error_mu_);
      if (first_error_.ok()) {
        first_error_ = s;
        first = true;
      }
    }
    if (first) stages_->AbortRanks(s);
    failed_.store(true);
    for (auto& q : queues_) q->Close();
    stages_->CancelBarrier();
    for (auto& q : queues_) {
      PassPtr dropped;
      while (q->Pop(&dropped)) dropped.reset();
    }
  }

  // Hands a finished pass to the next stage, timing the stall. Returns false if closed.
  bool Handoff(StageId stage, PassPtr pass) {
    Stopwatch clock;
    const bool ok = QueueAfter(stage).Push(std::move(pass), [&](PassPtr& p) {
      p->clock[stage].stalled += clock.Seconds();
      p->handed_on.Reset();
    });
    clocks_[stage].stalled += clock.Seconds();
    return ok;
  }

  // Takes the next pass for a stage, timing the wait (the pass's idle time; a stage's total
  // idle time is what its busy and stalled time leave of the run). Returns false when the
  // input ended or the job failed.
  bool Take(StageId stage, PassPtr* pass) {
    Stopwatch clock;
    const StageId before = static_cast<StageId>(static_cast<int>(stage) - 1);
    const bool ok = QueueAfter(before).Pop(pass);
    if (ok) {
      (*pass)->clock[stage].idle = clock.Seconds();
      // Handed on without a queue: the stage before waited for this take, holding the pass.
      if (options_.queue_depth == 0) (*pass)->clock[before].stalled += (*pass)->handed_on.Seconds();
    }
    return ok && !failed_.load();
  }

  // A pass read or pulled but not trained when Ctrl-C came: discarded, its pins released.
  bool DiscardIfStopping(PassPtr* pass) {
    if (!Stopping(stop_)) return false;
    interrupted_.store(true);
    pass->reset();
    return true;
  }

  void ReadLoop() {
    SetThreadName("ctrbox-read");
    EnterBackground();  // before its pool: the pool's threads inherit it
    ThreadPool pool(options_.read_threads, "ctrbox-read");
    while (!failed_.load()) {
      if (Stopping(stop_)) {
        interrupted_.store(true);
        break;
      }
      StatusOr<PassPtr> pass = stages_->Read(&pool);
      if (ReadWasInterrupted(pass.status(), stop_)) {
        interrupted_.store(true);
        break;
      }
      if (!pass.ok()) {
        Fail(pass.status());
        break;
      }
      if (!*pass) break;
      clocks_[StageId::kRead].busy += (*pass)->clock[StageId::kRead].busy;
      if (!Handoff(StageId::kRead, std::move(*pass))) break;
    }
    QueueAfter(StageId::kRead).Close();
  }

  void PullLoop() {
    SetThreadName("ctrbox-pull");
    EnterBackground();
    ThreadPool pool(options_.pull_threads, "ctrbox-pull");
    PassPtr pass;
    while (Take(StageId::kPull, &pass)) {
      if (DiscardIfStopping(&pass)) continue;
      Status s = stages_->Pull(pass.get(), &pool);
      clocks_[StageId::kPull].busy += pass->clock[StageId::kPull].busy;
      clocks_[StageId::kPull].stalled += pass->clock[StageId::kPull].stalled;
      // Ctrl-C while waiting at the shrink barrier.
      if (s.code() == StatusCode::kCancelled && DiscardIfStopping(&pass)) continue;
      if (!s.ok()) {
        Fail(s);
        break;
      }
      if (!Handoff(StageId::kPull, std::move(pass))) break;
    }
    pass.reset();
    QueueAfter(StageId::kPull).Close();
  }

  // The train stage, on the caller's thread.
  void TrainLoop() {
    PassPtr pass;
    while (Take(StageId::kTrain, &pass)) {
      if (DiscardIfStopping(&pass)) continue;
      Status s = stages_->Train(pass.get(), &failed_);
      if (!s.ok()) {
        if (!failed_.load()) Fail(s);  // else: another stage failed first
        break;
      }
      clocks_[StageId::kTrain].busy += pass->clock[StageId::kTrain].busy;
      if (!Handoff(StageId::kTrain, std::move(pass))) break;
    }
    pass.reset();
    QueueAfter(StageId::kTrain).Close();
  }

  // Every trained pass is pushed, also after Ctrl-C; nothing after an error.
  void PushLoop() {
    SetThreadName("ctrbox-push");
    EnterBackground();
    ThreadPool pool(options_.push_threads, "ctrbox-push");
    PassPtr pass;
    while (Take(StageId::kPush, &pass)) {
      Status s = stages_->Push(pass.get(), &pool);
      clocks_[StageId::kPush].busy += pass->clock[StageId::kPush].busy;
      if (!s.ok()) {
        Fail(s);
        break;
      }
      pass.reset();
    }
    pass.reset();
  }

  PassStages* const stages_;
  const PipelineOptions options_;
  const std::atomic<bool>* const stop_;
  // queues_[s]: from stage s to stage s + 1.
  std::unique_ptr<BoundedQueue<PassPtr>> queues_[kNumStages - 1];
  // Each stage's thread writes its own clock; read after the threads are joined.
  StageClocks clocks_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> interrupted_{false};
  Mutex error_mu_;
  Status first_error_ GUARDED_BY(error_mu_);
};

}  // namespace

StatusOr<StageRunResult> RunStages(PassStages* stages, const PipelineOptions& options,
                                   const std::atomic<bool>* stop) {
  StageRunResult result;
  stages->Start();
  if (options.enabled) {
    PipelinedRun run(stages, options, stop);
    RETURN_IF_ERROR(run.Run(&result));
  } else {
    RETURN_IF_ERROR(RunSequential(stages, stop, &result));
  }
  result.seconds = stages->Seconds();
  for (StageId s : kStages) {
    StageClock& c = result.totals[s];
    c.idle = std::max(0.0, result.seconds - c.busy - c.stalled);
  }
  return result;
}

}  // namespace ctrbox
