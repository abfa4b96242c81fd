// Every operator's file (the registry's includes: op_list.h lists them), and the row function
// dispatch the CPU kernels, the device layers' host emulation and their CUDA kernel share.
//
// Internal to src/feature.
#ifndef CTRBOX_FEATURE_OPS_ALL_H_
#define CTRBOX_FEATURE_OPS_ALL_H_

#include "feature/fixed_ops.h"
#include "feature/op_list.h"
#include "feature/ops/bucketize.h"
#include "feature/ops/cast.h"
#include "feature/ops/clip.h"
#include "feature/ops/cross.h"
#include "feature/ops/dedupe.h"
#include "feature/ops/fill_null.h"
#include "feature/ops/filter.h"
#include "feature/ops/gather.h"
#include "feature/ops/hash.h"
#include "feature/ops/join.h"
#include "feature/ops/json_field.h"
#include "feature/ops/last_n.h"
#include "feature/ops/log.h"
#include "feature/ops/normalize.h"
#include "feature/ops/parse_time.h"
#include "feature/ops/split.h"
#include "feature/ops/time_part.h"

namespace ctrbox {

// Row r of the fixed operator `op` (an operator the GPU never runs does nothing).
CTRBOX_HD inline void FixedRow(const FixedOp& op, const FixedIo& io, uint32_t r) {
  switch (static_cast<OpKind>(op.kind)) {
#define CTRBOX_FIXED_ROW(Name, name) \
  case OpKind::k##Name:              \
    ops::Name##Op::Row(op, io, r);   \
    return;
    CTRBOX_FEATURE_OPS(CTRBOX_FIXED_ROW)
#undef CTRBOX_FIXED_ROW
  }
}

}  // namespace ctrbox

#endif  // CTRBOX_FEATURE_OPS_ALL_H_
