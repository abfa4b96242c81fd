#include "serve/batcher.h"

#include <chrono>

namespace ctrbox {

void Batcher::Arriving() {
  std::lock_guard<std::mutex> l(mu_);
  ++on_the_way_;
}

void Batcher::Gone() {
  std::lock_guard<std::mutex> l(mu_);
  --on_the_way_;
  if (open_) open_->cv.notify_all();  // its leader may be waiting for this one
}

Status Batcher::Predict(const std::shared_ptr<const ServedVersion>& v, Batch* rows,
                        std::vector<float>* out, Predictor* predictor, BatchedAs* as) {
  const size_t n = rows->rows();
  std::unique_lock<std::mutex> l(mu_);
  --on_the_way_;
  if (o_.max_micros <= 0 || n == 0 || n >= o_.max_rows) {  // alone
    if (open_) open_->cv.notify_all();
    l.unlock();
    *as = {static_cast<uint32_t>(n), 1, true};
    return predictor->Predict(v, rows, out);
  }
  if (open_ && open_->v == v && open_->rows + n <= o_.max_rows) {  // join
    const std::shared_ptr<Group> g = open_;
    g->members.push_back({rows, out});
    g->rows += n;
    if (g->rows >= o_.max_rows) {
      g->closed = true;
      open_ = nullptr;
    }
    g->cv.notify_all();
    g->cv.wait(l, [&] { return g->done; });
    *as = {static_cast<uint32_t>(g->rows), static_cast<uint32_t>(g->members.size()), false};
    return g->status;
  }
  // Lead a new batch (one open for another version, or without room, goes as it is).
  if (open_) {
    open_->closed = true;
    open_->cv.notify_all();
  }
  const auto g = std::make_shared<Group>();
  g->v = v;
  g->members.push_back({rows, out});
  g->rows = n;
  open_ = g;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(o_.max_micros);
  while (!g->closed && on_the_way_ > 0 && std::chrono::steady_clock::now() < deadline) {
    g->cv.wait_until(l, deadline);
  }
  g->closed = true;
  if (open_ == g) open_ = nullptr;
  l.unlock();

  // The members are fixed now: predict them together, each row as it would be alone.
  Status s;
  if (g->members.size() == 1) {
    s = predictor->Predict(v, rows, out);
  } else {
    thread_local Batch all;
    thread_local std::vector<float> p;
    all.Reset(rows->schema);
    for (const Member& m : g->members) all.AppendRows(*m.rows, 0, m.rows->rows());
    s = predictor->Predict(v, &all, &p);
    if (s.ok()) {
      size_t at = 0;
      for (const Member& m : g->members) {
        const size_t k = m.rows->rows();
        m.out->assign(p.begin() + static_cast<ptrdiff_t>(at),
                      p.begin() + static_cast<ptrdiff_t>(at + k));
        at += k;
      }
    }
  }
  l.lock();
  g->status = s;
  g->done = true;
  g->cv.notify_all();
  *as = {static_cast<uint32_t>(g->rows), static_cast<uint32_t>(g->members.size()), true};
  return s;
}

}  // namespace ctrbox
