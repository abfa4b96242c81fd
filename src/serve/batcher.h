// Batching across requests (docs/serve.md, "Batching"): the rows of small requests that
// arrive together are predicted in one call, so that the MLP's weights are read once for all
// of them. Predictions are row-wise (model/ctr_model.h, set_rowwise_predictions), so a row's
// probability is the same bits alone or batched: batching changes the speed, not the answers.
//
// Leader and followers: a request that finds no open batch of its version opens one and leads
// it. The leader waits, at most max_micros, while other requests are on their way (being read
// and parsed: Arriving() was called for them and they have not reached Predict yet); requests
// that reach Predict meanwhile join its batch while it has room (max_rows). Then the leader
// predicts the batch on its thread and hands each member its probabilities. A request alone
// (nobody on the way) is predicted at once: batching adds no latency to a lone request.
//
// Thread safety: every method may be called from any thread at once.
#ifndef CTRBOX_SERVE_BATCHER_H_
#define CTRBOX_SERVE_BATCHER_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "io/batch.h"
#include "serve/infer.h"
#include "serve/served_version.h"
#include "util/status.h"

namespace ctrbox {

struct BatcherOptions {
  int64_t max_micros = 0;   // 0: no batching (each request predicted by its own worker)
  uint32_t max_rows = 256;  // a batch's most rows; a request of more is predicted alone
};

// What Predict did for one request (for the metrics).
struct BatchedAs {
  uint32_t batch_rows = 0;      // rows of the batch it was predicted in
  uint32_t batch_requests = 0;  // requests of that batch
  bool led = false;             // this request's worker predicted the batch
};

class Batcher {
 public:
  explicit Batcher(BatcherOptions o) : o_(o) {}

  // A request has started (its body is being read and parsed): a leader may wait for it.
  void Arriving();
  // A request that had Arriving() will not reach Predict (it failed before).
  void Gone();
  // Predicts `rows` (the request's, keys as read) with version v, with the requests of the
  // same version that join it; *out gets this request's probabilities. `predictor` is the
  // calling worker's (used when this request leads). REQUIRES: Arriving() was called for it.
  Status Predict(const std::shared_ptr<const ServedVersion>& v, Batch* rows,
                 std::vector<float>* out, Predictor* predictor, BatchedAs* as);

 private:
  struct Member {
    Batch* rows;
    std::vector<float>* out;
  };
  struct Group {
    std::shared_ptr<const ServedVersion> v;
    std::vector<Member> members;
    size_t rows = 0;
    bool closed = false, done = false;
    Status status;
    std::condition_variable cv;  // the leader waits for members, the members for done
  };

  const BatcherOptions o_;
  std::mutex mu_;
  int64_t on_the_way_ = 0;       // Arriving() not yet at Predict
  std::shared_ptr<Group> open_;  // the batch requests may join, if any
};

}  // namespace ctrbox

#endif  // CTRBOX_SERVE_BATCHER_H_
