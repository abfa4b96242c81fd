#include "jobs/data.h"

#include <fmt/format.h>

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

StatusOr<nlohmann::json> DataFileRecord(Env* env, const std::string& path) {
  nlohmann::json entry = {{"path", path}, {"bytes", nullptr}};  // "-": nothing to compare
  if (path == "-") return entry;
  ASSIGN_OR_RETURN(uint64_t size, env->GetFileSize(path));
  ASSIGN_OR_RETURN(uint64_t fingerprint, DataFileFingerprint(env, path));
  entry["bytes"] = size;
  entry["fingerprint"] = fmt::format("{:016x}", fingerprint);
  return entry;
}

StatusOr<std::unique_ptr<BatchReader>> OpenData(Env* env, const DataOptions& data,
                                                const GeneratedData& gen, bool test) {
  if (data.opener || !IsGenerated(data)) return OpenReader(env, data);
  SynthOptions synth = SynthFor(gen, test);
  synth.key_slots = data.key_slots;
  return NewSynthReader(synth, test ? gen.test_rows : gen.rows, data.threads, 16384, gen.share);
}

Status AttachFeatures(Env* env, JobConfig* job) {
  if (job->features == nullptr || job->extractor != nullptr) return Status::OK();
  Extractor::Options o;
  o.chunk_bytes = job->data.chunk_bytes;
  o.max_line_bytes = job->data.max_line_bytes;
  o.bad_input = job->data.bad_input;
  o.schedule = job->features->layered ? Schedule::kLayered : Schedule::kSequential;
  o.key_slots = job->data.key_slots;
  o.id_column = job->id_column;
  if (job->features->gpu) {
    if (!job->features->layered) {
      return InvalidArgumentError(
          "features.device: gpu runs the layered schedule; set features.schedule: layered (the "
          "default)");
    }
    o.device = FeatureDevice::kCuda;
  }
  DataOptions main = job->data;
  if (main.paths.empty() && main.command.empty()) main.paths = job->eval_paths;
  if (main.paths.empty() && main.command.empty()) {
    return InvalidArgumentError(
        "features: the job has a feature graph but no main view: set data.paths (or "
        "data.command) to the main view's files");
  }
  ASSIGN_OR_RETURN(job->extractor, Extractor::Open(env, job->features, main, o));
  std::shared_ptr<Extractor> x = job->extractor;
  job->data.opener = [x](Env* e, const DataOptions& d) { return OpenFeatureReader(e, d, x); };
  return Status::OK();
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
