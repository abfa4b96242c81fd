// `ctrbox gen --format views` (docs/features.md): a multi-view raw log with a planted model —
// an impression log (CSV, a JSON context column with nested members, a recent-clicks
// sequence, basic feature ids, duplicated impressions, bot traffic), a user table (CSV, with
// missing ages and quoted multi-valued interests) and an ad table (JSON lines) — with the job
// YAML that extracts the features the planted model uses, and the planted model's AUC on the
// test rows the job keeps.
#ifndef CTRBOX_FEATURE_VIEW_GEN_H_
#define CTRBOX_FEATURE_VIEW_GEN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "util/env.h"
#include "util/status.h"

namespace ctrbox {

struct ViewGenOptions {
  uint64_t rows = 100000;      // impressions.csv
  uint64_t test_rows = 20000;  // impressions_test.csv
  uint64_t seed = 1;
  uint32_t users = 20000;
  uint32_t ads = 10000;
};

struct ViewGenResult {
  std::vector<std::string> files;  // written, in dir
  uint64_t bytes = 0;
  double ctr = 0;         // of the test rows the job keeps
  double oracle_auc = 0;  // the planted model's AUC on them
  uint64_t kept_test_rows = 0;
};

// Writes the views, job.yaml and oracle.json into `dir` (created if missing). The job names
// the files by absolute path.
StatusOr<ViewGenResult> GenerateViews(Env* env, const std::string& dir,
                                      const ViewGenOptions& options);

}  // namespace ctrbox

#endif  // CTRBOX_FEATURE_VIEW_GEN_H_
