#include "pipeline/data.h"

#include <algorithm>
#include <vector>

#include "io/synth.h"
#include "metrics/metrics.h"

namespace ctrbox {
namespace {

SynthOptions SynthFor(const GeneratedData& gen, bool test) {
  SynthOptions o;
  o.format = gen.layout;
  o.seed = test ? gen.seed + 1 : gen.seed;
  o.vocab_scale = gen.vocab_scale;
  o.zipf = gen.zipf;
  return o;
}

}  // namespace

StatusOr<std::unique_ptr<BatchReader>> OpenData(Env* env, const DataOptions& data,
                                                const GeneratedData& gen, bool test) {
  if (!IsGenerated(data)) return OpenReader(env, data);
  return NewSynthReader(SynthFor(gen, test), test ? gen.test_rows : gen.rows, data.threads, 16384,
                        gen.share);
}

double OracleAuc(const GeneratedData& gen) {
  SynthGenerator g(SynthFor(gen, /*test=*/true));
  MetricAccumulator m;
  Batch b;
  std::vector<double> probs;
  for (uint64_t r = 0; r < gen.test_rows; r += 65536) {
    probs.clear();
    g.GenerateBatch(r, std::min(gen.test_rows, r + 65536), &b, &probs);
    for (size_t i = 0; i < b.rows(); ++i) m.Add(b.labels[i], probs[i]);
  }
  return m.Summary().auc;
}

}  // namespace ctrbox
