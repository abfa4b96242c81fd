// Every definition of GpuStep (gpu/step.h): included by the two files that instantiate it,
// gpu/trainer.cc (HostExec) and gpu/cuda_trainer.cu (CudaExec).
#ifndef CTRBOX_GPU_STEP_IMPL_H_
#define CTRBOX_GPU_STEP_IMPL_H_

#include "gpu/step.h"
#include "gpu/step_backward.h"
#include "gpu/step_canonical.h"
#include "gpu/step_dense.h"
#include "gpu/step_exchange.h"
#include "gpu/step_forward.h"
#include "gpu/step_sparse.h"
#include "gpu/step_stage.h"
#include "gpu/step_train.h"

#endif  // CTRBOX_GPU_STEP_IMPL_H_
