#include "serve/batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
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

// Concurrent requests of 1-40 rows on two versions, batched with a long window: each one's
// probabilities are the bits of its rows predicted alone with its version, and batches of
// several requests did form.
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
  Batcher batcher({/*max_micros=*/5000, /*max_rows=*/128});
  std::atomic<int> mismatches{0}, shared{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Predictor predictor;
      for (int i = 0; i < kRequests; ++i) {
        batcher.Arriving();
        std::this_thread::sleep_for(std::chrono::microseconds(50 * (i % 4)));  // "parsing"
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
  EXPECT_GT(shared.load(), kThreads * kRequests / 4) << "requests were not batched together";
}

// A request with nobody on the way is predicted at once, whatever the window; one with a
// request on its way waits for it (here until that one gives up), never past the window.
TEST(BatcherTest, ALeaderWaitsOnlyForRequestsOnTheirWay) {
  const auto v = MakeVersion(3, 1);
  Batcher batcher({/*max_micros=*/2'000'000, /*max_rows=*/256});
  Predictor predictor;
  Batch rows = Request(3, 1);
  std::vector<float> out;
  BatchedAs as;
  auto t0 = std::chrono::steady_clock::now();
  batcher.Arriving();
  ASSERT_TRUE(batcher.Predict(v, &rows, &out, &predictor, &as).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  EXPECT_EQ(as.batch_requests, 1u);
  EXPECT_TRUE(as.led);

  batcher.Arriving();  // this request
  batcher.Arriving();  // another, that fails before it reaches Predict
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    batcher.Gone();
  });
  t0 = std::chrono::steady_clock::now();
  rows = Request(3, 1);
  ASSERT_TRUE(batcher.Predict(v, &rows, &out, &predictor, &as).ok());
  const auto waited = std::chrono::steady_clock::now() - t0;
  other.join();
  EXPECT_GE(waited, std::chrono::milliseconds(90));
  EXPECT_LT(waited, std::chrono::milliseconds(1500));
  EXPECT_EQ(out, Alone(v, Request(3, 1)));
}

// Without a window (0), or for a request of max_rows or more, each request is its own batch.
TEST(BatcherTest, NoWindowOrALargeRequestIsPredictedAlone) {
  const auto v = MakeVersion(5, 1);
  for (auto [micros, n] : {std::pair<int64_t, size_t>{0, 5}, {100000, 64}}) {
    Batcher batcher({micros, 64});
    Predictor predictor;
    batcher.Arriving();
    batcher.Arriving();  // one more on its way: a window would wait for it
    Batch rows = Request(n, 2);
    std::vector<float> out;
    BatchedAs as;
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(batcher.Predict(v, &rows, &out, &predictor, &as).ok());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(80));
    EXPECT_EQ(as.batch_requests, 1u);
    EXPECT_EQ(out, Alone(v, Request(n, 2)));
    batcher.Gone();
  }
}

}  // namespace
}  // namespace ctrbox
