// The feature graph's layers on a GPU (docs/features.md, "On a GPU"), FeatureBox §4: in each
// layer the fixed-width operators (fixed_ops.h) run on the device as one fused launch — the
// paper's meta-kernel — and the others (strings, JSON, joins, hashing) on the CPU; columns a
// device operator reads are uploaded once per chunk and stay resident for later layers, and
// its outputs come back for the CPU operators and the assembly. The same code runs on the
// CUDA executor (cuda_layers.cu, built with CTRBOX_CUDA) and on a host emulation of it, so
// the emulation tests it on machines without a GPU.
//
// Thread safety: a DeviceLayers is used by one thread at a time (the extractor keeps one per
// reader worker in use).
#ifndef CTRBOX_FEATURE_DEVICE_LAYERS_H_
#define CTRBOX_FEATURE_DEVICE_LAYERS_H_

#include <memory>
#include <string>
#include <vector>

#include "feature/column.h"
#include "feature/fixed_ops.h"
#include "feature/graph.h"
#include "util/status.h"

namespace ctrbox {

// Whether `op` is one the device runs: numeric inputs and output, no strings or lists.
bool IsFixedOp(const FeaturePlan& plan, const OpNode& op);
// `op` flattened; its boundaries / `in` values from consts[at...] (appended to *consts).
FixedOp MakeFixedOp(const FeaturePlan& plan, const OpNode& op, int op_id,
                    std::vector<double>* consts);

class DeviceLayers {
 public:
  virtual ~DeviceLayers() = default;
  // A new chunk of `rows` rows: no column is resident any more.
  virtual void BeginChunk(uint32_t rows) = 0;
  // Runs the operators `ops` (fixed, of one layer; their outputs allocated in the table) on
  // the device, and marks their row errors into table->errors. Device errors (a failed
  // launch, no memory) are returned.
  virtual Status RunLayer(const FeaturePlan& plan, const std::vector<int>& ops,
                          ColumnTable* table) = 0;
  // Launches so far (a fused layer is one; unfused, one per operator).
  virtual uint64_t launches() const = 0;
  virtual std::string Describe() const = 0;
};

// The host emulation: device memory is host memory, a launch runs its kernel over the rows on
// the calling thread. fused: one launch per layer (else one per operator).
std::unique_ptr<DeviceLayers> NewEmulatedDeviceLayers(bool fused);
// The CUDA executor on GPU 0 (FailedPrecondition, with the reason, without CUDA or a GPU).
StatusOr<std::unique_ptr<DeviceLayers>> NewCudaDeviceLayers(bool fused);

}  // namespace ctrbox

#endif  // CTRBOX_FEATURE_DEVICE_LAYERS_H_
