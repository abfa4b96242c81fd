#include "serve/batcher.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace ctrbox {

namespace {

BatcherOptions WithLanes(BatcherOptions o) {
  if (o.lanes <= 0)
    o.lanes = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2);
  return o;
}

}  // namespace

Batcher::Batcher(BatcherOptions o) : o_(WithLanes(o)) {}

int Batcher::LanesBusy() {
  MutexLock l(&mu_);
  return running_;
}

Status Batcher::RunInLane(const std::function<Status()>& predict) {
  mu_.Unlock();
  Status s = predict();
  mu_.Lock();
  --running_;
  lane_free_.SignalAll();
  return s;
}

Status Batcher::Predict(const std::shared_ptr<const ServedVersion>& v, Batch* rows,
                        std::vector<float>* out, Predictor* predictor, BatchedAs* as) {
  const size_t n = rows->rows();
  auto alone = [&] { return predictor->Predict(v, rows, out); };
  if (o_.max_micros <= 0 || n == 0 || n >= o_.max_rows) {  // never batched, takes no lane
    *as = {static_cast<uint32_t>(n), 1, true};
    return alone();
  }
  MutexLock l(&mu_);
  if (!open_ && running_ < o_.lanes) {  // not busy: at once
    *as = {static_cast<uint32_t>(n), 1, true};
    ++running_;
    return RunInLane(alone);
  }
  if (open_ && open_->v == v && open_->rows + n <= o_.max_rows) {  // join the waiting batch
    const std::shared_ptr<Group> g = open_;
    g->members.push_back({rows, out});
    g->rows += n;
    if (g->rows >= o_.max_rows) open_ = nullptr;  // full: no more joins
    while (!g->done) g->cv.Wait(&mu_);
    *as = {static_cast<uint32_t>(g->rows), static_cast<uint32_t>(g->members.size()), false};
    return g->status;
  }
  // Lead a new batch (one waiting for another version, or without room, keeps its members and
  // its place in the wait for a lane).
  const auto g = std::make_shared<Group>(&mu_);
  g->v = v;
  g->members.push_back({rows, out});
  g->rows = n;
  open_ = g;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(o_.max_micros);
  while (running_ >= o_.lanes && lane_free_.WaitUntil(&mu_, deadline)) {
  }
  if (open_ == g) open_ = nullptr;  // the members are fixed now
  ++running_;
  const Status s = RunInLane([&]() -> Status {
    if (g->members.size() == 1) return alone();
    thread_local Batch all;
    thread_local std::vector<float> p;
    all.Reset(rows->schema);
    for (const Member& m : g->members) all.AppendRows(*m.rows, 0, m.rows->rows());
    RETURN_IF_ERROR(predictor->Predict(v, &all, &p));
    size_t at = 0;
    for (const Member& m : g->members) {
      const size_t k = m.rows->rows();
      m.out->assign(p.begin() + static_cast<ptrdiff_t>(at),
                    p.begin() + static_cast<ptrdiff_t>(at + k));
      at += k;
    }
    return Status::OK();
  });
  g->status = s;
  g->done = true;
  g->cv.SignalAll();
  *as = {static_cast<uint32_t>(g->rows), static_cast<uint32_t>(g->members.size()), true};
  return s;
}

}  // namespace ctrbox
