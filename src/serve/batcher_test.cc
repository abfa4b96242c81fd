#include "serve/batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <latch>
#include <thread>

#include "ckpt/model_files.h"
#include "ckpt/serving_files.h"
#include "util/random.h"

namespace ctrbox {
namespace {

constexpr Schema kSchema{4, 2};

// A version of a small model: its dense parameters from `seed`, rows for keys 0..199 of
// every slot (a fifth without an embedding), the rest absent.
std::shared_ptr<const ServedVersion> MakeVersion(uint64_t seed, uint64_t number) {
  auto v = std::make_shared<ServedVersion>();
  v->version = number;
  v->name = "v-" + std::to_string(number);
  v->spec.schema = kSchema;
  v->spec.model.embedding_dim = 16;
  v->spec.model.mlp = {256, 128};
  v->spec.table.seed = seed;
  CtrModel model(kSchema, v->spec.model, v->spec.sparse_optimizer, v->spec.dense_optimizer, seed);
  v->dense_payload = DenseParamsPayload(model);
  v->layout = ServingLayout(model.value_layout(), 0, 0.0f);
  Random rng(seed);
  RowBlock rows(v->layout);
  rows.Resize(200);
  for (size_t i = 0; i < 200; ++i) {
    rows.ClearRow(i, i);
    if (i % 5 == 0) continue;
    rows.flags(i) |= kFlagHasEmb;
    for (uint32_t d = 0; d < v->layout.dim; ++d) {
      rows.emb(i)[d] = static_cast<float>(rng.Below(2001)) / 1000.0f - 1.0f;
    }
  }
  ServedRows::Builder b(v->layout, false);
  b.Add(rows);
  v->base_rows = b.Finish();
  v->keys = 200;
  return v;
}

// A request of n rows: keys 0..249 (some absent), dense values.
Batch Request(size_t n, uint64_t seed) {
  Random rng(seed);
  Batch b;
  b.Reset(kSchema);
  BatchBuilder bb(&b);
  for (size_t r = 0; r < n; ++r) {
    bb.BeginRow(0.0f);
    for (uint32_t j = 0; j < kSchema.num_dense; ++j) {
      bb.SetDense(j, static_cast<float>(rng.Below(100)));
    }
    for (uint32_t s = 0; s < kSchema.num_slots; ++s) bb.AddKey(s, rng.Below(250));
    bb.EndRow();
  }
  return b;
}

std::vector<float> Alone(const std::shared_ptr<const ServedVersion>& v, const Batch& rows) {
  Predictor p;
  Batch copy = rows;
  std::vector<float> out;
  EXPECT_TRUE(p.Predict(v, &copy, &out).ok());
  return out;
}

// Concurrent requests of 1-40 rows on two versions, one prediction at a time (so that the
// others batch): each one's probabilities are the bits of its rows predicted alone with its
// version, and batches of several requests did form.
TEST(BatcherTest, BatchedRequestsGetTheBitsOfTheirRowsPredictedAlone) {
  const std::vector<std::shared_ptr<const ServedVersion>> versions = {MakeVersion(3, 1),
                                                                      MakeVersion(4, 2)};
  constexpr int kThreads = 8, kRequests = 30;
  std::vector<std::vector<Batch>> requests(kThreads);
  std::vector<std::vector<std::vector<float>>> want(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kRequests; ++i) {
      Random rng(t * 1000 + i);
      requests[t].push_back(Request(1 + rng.Below(40), t * 1000 + i + 7));
      want[t].push_back(Alone(versions[(t + i) % 2], requests[t].back()));
    }
  }
  Batcher batcher({/*max_micros=*/100000, /*max_rows=*/128, /*lanes=*/1});
  std::atomic<int> mismatches{0}, shared{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Predictor predictor;
      for (int i = 0; i < kRequests; ++i) {
        Batch rows = requests[t][i];
        std::vector<float> out;
        BatchedAs as;
        if (!batcher.Predict(versions[(t + i) % 2], &rows, &out, &predictor, &as).ok()) {
          ++failures;
          continue;
        }
        if (as.batch_requests > 1) ++shared;
        if (out.size() != want[t][i].size() ||
            std::memcmp(out.data(), want[t][i].data(), out.size() * sizeof(float)) != 0) {
          ++mismatches;
        }
        EXPECT_LE(as.batch_rows, 128u);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  // At least one batch of several requests formed (a batch of k counts k). How many depends
  // on the scheduling: on a loaded 2-core CI machine 6 of 240 requests shared a batch once,
  // under the former bound of 8. That batches form whenever the lane is busy is the next
  // test's, with the lane held on purpose.
  EXPECT_GE(shared.load(), 2) << "requests were not batched together";
}

// Requests that come while every lane is busy wait for one together, as one batch; a batch
// waits at most max_micros; a request that finds a lane free is predicted at once.
TEST(BatcherTest, RequestsBatchWhileTheLanesAreBusyAndWaitAtMostTheWindow) {
  using Clock = std::chrono::steady_clock;
  const auto v = MakeVersion(3, 1);
  // A request that holds the one lane a while: rows enough for 500 ms alone on this machine.
  Batch big;
  for (size_t n = 50000;; n *= 2) {
    big = Request(n, 9);
    const auto t0 = Clock::now();
    Alone(v, big);
    if (Clock::now() - t0 >= std::chrono::milliseconds(500) || n >= 6'400'000) break;
  }
  for (int64_t micros : {int64_t{30'000'000}, int64_t{150'000}}) {
    SCOPED_TRACE(micros);
    Batcher batcher({micros, 1000000, /*lanes=*/1});
    Clock::time_point big_begin, big_end, small_end[2];
    std::atomic<bool> holding{true}, holding_at_end[2];
    BatchedAs as[2];
    std::vector<float> out[2];
    std::thread holder([&] {
      Predictor p;
      Batch rows = big;
      std::vector<float> o;
      BatchedAs a;
      big_begin = Clock::now();
      ASSERT_TRUE(batcher.Predict(v, &rows, &o, &p, &a).ok());
      holding = false;
      big_end = Clock::now();
    });
    std::latch go(1);  // the two small requests come together, once the holder has the lane
    std::vector<std::thread> smalls;
    for (int i = 0; i < 2; ++i) {
      smalls.emplace_back([&, i] {
        Predictor p;
        Batch rows = Request(3 + i, 20 + i);
        go.wait();
        ASSERT_TRUE(batcher.Predict(v, &rows, &out[i], &p, &as[i]).ok());
        holding_at_end[i] = holding.load();
        small_end[i] = Clock::now();
      });
    }
    while (batcher.LanesBusy() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    go.count_down();
    for (auto& t : smalls) t.join();
    holder.join();
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(out[i], Alone(v, Request(3 + i, 20 + i)));
      EXPECT_EQ(as[i].batch_requests, 2u);
      EXPECT_EQ(as[i].batch_rows, 7u);
      if (micros > 1'000'000) {
        // Waited for the slot: done near the holder's end (its thread reads the clock a moment
        // after it frees the slot), not in its first half.
        EXPECT_GE(small_end[i] - big_begin, (big_end - big_begin) / 2);
      } else {
        EXPECT_TRUE(holding_at_end[i]);  // the window ended first: done while the slot was held
      }
    }
    // Nothing running: at once, alone, whatever the window.
    Predictor p;
    Batch rows = Request(5, 1);
    std::vector<float> o;
    BatchedAs a;
    const auto t0 = Clock::now();
    ASSERT_TRUE(batcher.Predict(v, &rows, &o, &p, &a).ok());
    EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(500));
    EXPECT_EQ(a.batch_requests, 1u);
  }
}

// Without batching (max_micros 0), or for a request of max_rows or more, each request is its
// own batch and takes no slot.
TEST(BatcherTest, NoWindowOrALargeRequestIsPredictedAlone) {
  const auto v = MakeVersion(5, 1);
  for (auto [micros, n] : {std::pair<int64_t, size_t>{0, 5}, {100000, 64}}) {
    Batcher batcher({micros, 64, 1});
    Predictor predictor;
    Batch rows = Request(n, 2);
    std::vector<float> out;
    BatchedAs as;
    ASSERT_TRUE(batcher.Predict(v, &rows, &out, &predictor, &as).ok());
    EXPECT_EQ(as.batch_requests, 1u);
    EXPECT_EQ(out, Alone(v, Request(n, 2)));
  }
}

}  // namespace
}  // namespace ctrbox
