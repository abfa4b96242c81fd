// ModelSpec: everything that defines a model's shape and update rules; stored in the model
// directory's MANIFEST so eval, predict and continued training rebuild the same model.
#ifndef CTRBOX_CKPT_MODEL_SPEC_H_
#define CTRBOX_CKPT_MODEL_SPEC_H_

#include <nlohmann/json.hpp>
#include <string>

#include "io/batch.h"
#include "model/ctr_model.h"
#include "model/optimizer.h"
#include "table/accessor.h"
#include "util/status.h"

namespace ctrbox {

struct ModelSpec {
  Schema schema;
  ModelOptions model;
  OptimizerOptions sparse_optimizer;
  OptimizerOptions dense_optimizer;
  AccessorOptions table;

  nlohmann::json ToJson() const;
  static StatusOr<ModelSpec> FromJson(const nlohmann::json& j);
  // The first key whose value differs from `other` ("model.embedding_dim"), or "" if none.
  std::string FirstDifference(const ModelSpec& other) const;
  // The first difference that makes a model saved with this spec unusable under `other`:
  // the schema, the model's shape and inputs, the optimizer kinds (their state layout).
  // Hyperparameters (learning rates, betas, the table's thresholds, seeds) may change
  // between runs that continue one model. "" if compatible.
  std::string FirstIncompatibility(const ModelSpec& other) const;
  // "KEY = OLD there, NEW now" for a key FirstDifference returned: what a message shows.
  std::string DescribeDifference(const ModelSpec& other, const std::string& key) const;
};

}  // namespace ctrbox

#endif  // CTRBOX_CKPT_MODEL_SPEC_H_
