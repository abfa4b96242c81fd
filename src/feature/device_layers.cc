#include "feature/device_layers.h"

#include <cstring>

#include "exec/exec.h"
#include "feature/device_layers_impl.h"
#include "feature/op_spec.h"

namespace ctrbox {

bool IsFixedOp(const FeaturePlan& plan, const OpNode& op) {
  const OpSpec& spec = SpecOf(op.kind);
  return spec.fixed != nullptr && spec.fixed(plan, op);
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
  f.a = op.a;
  f.b = op.b;
  if (const OpSpec& spec = SpecOf(op.kind); spec.flatten != nullptr) spec.flatten(op, &f);
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
