// CtrModel's helpers shared by its source files (model/ctr_model.h declares the class; its
// code by concern: model_options.cc the options' checks, ctr_model.cc construction and
// buffers, ctr_model_interactions.cc the interactions, towers and bottom MLP on a row block,
// ctr_model_step.cc the minibatch's forward, backward and dense tiles, ctr_model_updates.cc
// the sparse updates, the distributed step and prediction). Include only from those files.
#ifndef CTRBOX_MODEL_CTR_MODEL_INTERNAL_H_
#define CTRBOX_MODEL_CTR_MODEL_INTERNAL_H_

#include <algorithm>
#include <cmath>

#include "model/ctr_model.h"

namespace ctrbox::model_internal {

inline float Sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// Binary cross-entropy from the logit, stable for large |z|.
inline double LogLoss(float z, float y) {
  double zd = z;
  return std::max(zd, 0.0) - zd * y + std::log1p(std::exp(-std::fabs(zd)));
}

}  // namespace ctrbox::model_internal

#endif  // CTRBOX_MODEL_CTR_MODEL_INTERNAL_H_
