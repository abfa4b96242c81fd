// Batching across requests (docs/serve.md, "Batching"): the rows of small requests that
// arrive while the cores are busy predicting are predicted together in one call, so that the
// MLP's weights are read once for all of them. Predictions are row-wise
// (model/ctr_model.h, set_rowwise_predictions), so a row's probability is the same bits alone
// or batched: batching changes the speed, not the answers.
//
// Batch when busy: at most `lanes` small predictions (of requests under max_rows rows; larger
// ones run at once, alone, and take no lane) run at once. A request that finds
// a lane free and no batch waiting is predicted at once, alone: batching adds no latency to a
// server that is not busy. Otherwise it joins the batch that waits for a lane (while the batch
// has room: max_rows), or opens one and leads it: the leader waits for a lane (at most
// max_micros, then it runs anyway), predicts the batch on its thread and hands each member its
// probabilities.
//
// Thread safety: Predict may be called from any thread at once.
#ifndef CTRBOX_SERVE_BATCHER_H_
#define CTRBOX_SERVE_BATCHER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "io/batch.h"
#include "serve/infer.h"
#include "serve/served_version.h"
#include "util/mutex.h"
#include "util/status.h"
#include "util/thread_annotations.h"

namespace ctrbox {

struct BatcherOptions {
  int64_t max_micros = 0;  // a batch's longest wait for a lane (0: no batching)
  uint32_t max_rows = 16;  // a batch's most rows; a request of as many is predicted alone
  int lanes = 0;           // predictions at once (0: half the machine's cores, at least 1)
};

// What Predict did for one request (for the metrics).
struct BatchedAs {
  uint32_t batch_rows = 0;      // rows of the batch it was predicted in
  uint32_t batch_requests = 0;  // requests of that batch
  bool led = false;             // this request's worker predicted the batch
};

class Batcher {
 public:
  explicit Batcher(BatcherOptions o);

  // Predicts `rows` (the request's, keys as read) with version v, alone or with the requests
  // of the same version batched with it; *out gets this request's probabilities. `predictor`
  // is the calling worker's (used when this request leads or runs alone).
  Status Predict(const std::shared_ptr<const ServedVersion>& v, Batch* rows,
                 std::vector<float>* out, Predictor* predictor, BatchedAs* as);
  // The lanes taken now (small predictions running).
  int LanesBusy();

 private:
  struct Member {
    Batch* rows;
    std::vector<float>* out;
  };
  // A batch; its fields are guarded by the batcher's mu_.
  struct Group {
    explicit Group(Mutex* mu) : cv(mu) {}
    std::shared_ptr<const ServedVersion> v;
    std::vector<Member> members;
    size_t rows = 0;
    bool done = false;
    Status status;
    CondVar cv;  // the members wait for done
  };
  // Runs `predict` in a lane (taken by the caller: running_ counts it) and frees the lane.
  // Releases mu_ while predict runs.
  Status RunInLane(const std::function<Status()>& predict) REQUIRES(mu_);

  const BatcherOptions o_;
  Mutex mu_;
  CondVar lane_free_{&mu_};
  int running_ GUARDED_BY(mu_) = 0;  // predictions running (lanes taken)
  std::shared_ptr<Group> open_
      GUARDED_BY(mu_);  // the batch waiting for a lane that requests may join
};

}  // namespace ctrbox

#endif  // CTRBOX_SERVE_BATCHER_H_
