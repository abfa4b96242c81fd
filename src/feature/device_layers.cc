#include "feature/device_layers.h"

#include <cstring>

#include "feature/device_layers_impl.h"
#include "gpu/exec.h"

namespace ctrbox {

// fixed_ops.h repeats these enums' values for code built without graph.h: they must agree.
static_assert(fixed::kFillNull == static_cast<uint8_t>(OpKind::kFillNull) &&
              fixed::kCast == static_cast<uint8_t>(OpKind::kCast) &&
              fixed::kFilter == static_cast<uint8_t>(OpKind::kFilter) &&
              fixed::kBucketize == static_cast<uint8_t>(OpKind::kBucketize) &&
              fixed::kTimePart == static_cast<uint8_t>(OpKind::kTimePart) &&
              fixed::kLog == static_cast<uint8_t>(OpKind::kLog) &&
              fixed::kClip == static_cast<uint8_t>(OpKind::kClip) &&
              fixed::kNormalize == static_cast<uint8_t>(OpKind::kNormalize));
static_assert(fixed::kInt == static_cast<uint8_t>(ColType::kInt) &&
              fixed::kFloat == static_cast<uint8_t>(ColType::kFloat) &&
              fixed::kMask == static_cast<uint8_t>(ColType::kMask));
static_assert(fixed::kEq == static_cast<uint8_t>(Cmp::kEq) &&
              fixed::kNe == static_cast<uint8_t>(Cmp::kNe) &&
              fixed::kLt == static_cast<uint8_t>(Cmp::kLt) &&
              fixed::kLe == static_cast<uint8_t>(Cmp::kLe) &&
              fixed::kGt == static_cast<uint8_t>(Cmp::kGt) &&
              fixed::kGe == static_cast<uint8_t>(Cmp::kGe) &&
              fixed::kIn == static_cast<uint8_t>(Cmp::kIn) &&
              fixed::kNotNull == static_cast<uint8_t>(Cmp::kNotNull));
static_assert(fixed::kMinute == static_cast<uint8_t>(TimePart::kMinute) &&
              fixed::kHour == static_cast<uint8_t>(TimePart::kHour) &&
              fixed::kWeekday == static_cast<uint8_t>(TimePart::kWeekday) &&
              fixed::kDay == static_cast<uint8_t>(TimePart::kDay) &&
              fixed::kMonth == static_cast<uint8_t>(TimePart::kMonth) &&
              fixed::kYear == static_cast<uint8_t>(TimePart::kYear));

bool IsFixedOp(const FeaturePlan& plan, const OpNode& op) {
  auto numeric = [&](int c) {
    const ColType t = plan.columns[c].type;
    return t == ColType::kInt || t == ColType::kFloat;
  };
  switch (op.kind) {
    case OpKind::kFillNull:
    case OpKind::kCast:
    case OpKind::kFilter:
      return numeric(op.inputs[0]) && (op.kind == OpKind::kFilter || numeric(op.output));
    case OpKind::kBucketize:
    case OpKind::kTimePart:
    case OpKind::kLog:
    case OpKind::kClip:
    case OpKind::kNormalize:
      return true;  // numeric in and out by the graph's type rules
    default:
      return false;
  }
}

FixedOp MakeFixedOp(const FeaturePlan& plan, const OpNode& op, int op_id,
                    std::vector<double>* consts) {
  FixedOp f;
  f.kind = static_cast<uint8_t>(op.kind);
  f.in_type = static_cast<uint8_t>(plan.columns[op.inputs[0]].type);
  f.out_type = static_cast<uint8_t>(plan.columns[op.output].type);
  f.cmp = static_cast<uint8_t>(op.cmp);
  f.part = static_cast<uint8_t>(op.part);
  f.op_id = op_id;
  f.offset = op.utc_offset_seconds;
  if (op.kind == OpKind::kFillNull || op.kind == OpKind::kFilter) {
    f.a = op.value.f;
    f.ci = op.value.i;
  } else {
    f.a = op.a;
    f.b = op.b;
  }
  f.boundaries = static_cast<uint32_t>(consts->size());
  f.nb = static_cast<uint32_t>(op.boundaries.size());
  consts->insert(consts->end(), op.boundaries.begin(), op.boundaries.end());
  f.values = static_cast<uint32_t>(consts->size());
  f.nvalues = static_cast<uint32_t>(op.numbers.size());
  consts->insert(consts->end(), op.numbers.begin(), op.numbers.end());
  return f;
}

std::unique_ptr<DeviceLayers> NewEmulatedDeviceLayers(bool fused) {
  return std::make_unique<ExecDeviceLayers<HostExec>>(std::make_unique<HostExec>(), fused,
                                                      "emulated GPU");
}

#ifndef CTRBOX_WITH_CUDA
StatusOr<std::unique_ptr<DeviceLayers>> NewCudaDeviceLayers(bool) {
  return FailedPreconditionError(
      "features.device: gpu needs ctrbox built with CUDA (nvcc was not found at build time)");
}
#endif

}  // namespace ctrbox
