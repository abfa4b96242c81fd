// DeviceLayers written once against an executor (exec/exec.h: HostExec for the host emulation
// in device_layers.cc, CudaExec in cuda_layers.cu). Internal to src/feature.
#ifndef CTRBOX_FEATURE_DEVICE_LAYERS_IMPL_H_
#define CTRBOX_FEATURE_DEVICE_LAYERS_IMPL_H_

#include <memory>
#include <vector>

#include "feature/device_layers.h"
#include "feature/ops/all.h"
#include "util/hd.h"

namespace ctrbox {

template <class Exec>
class ExecDeviceLayers final : public DeviceLayers {
  template <class T>
  using Buf = typename Exec::template Buffer<T>;

 public:
  ExecDeviceLayers(std::unique_ptr<Exec> exec, bool fused, std::string name)
      : exec_(std::move(exec)), fused_(fused), name_(std::move(name)) {}

  void BeginChunk(uint32_t rows) override {
    rows_ = rows;
    for (auto& c : cols_) {
      if (c) c->resident = false;
    }
  }

  Status RunLayer(const FeaturePlan& plan, const std::vector<int>& ops,
                  ColumnTable* table) override {
    if (ops.empty() || rows_ == 0) return exec_->status();
    exec_->Recycle();  // the last layer's uploads are done: their staging is free
    if (cols_.size() < plan.columns.size()) cols_.resize(plan.columns.size());
    // The layer's operators flattened, their constants, and their columns on the device.
    std::vector<FixedOp> flat;
    std::vector<double> consts;
    for (int id : ops) flat.push_back(MakeFixedOp(plan, plan.ops[id], id, &consts));
    std::vector<uint8_t*> valid;
    std::vector<void*> cells;
    auto pointer_index = [&](int column, bool upload) -> int {
      DeviceColumn& d = Column(column);
      if (upload && !d.resident) {
        exec_->Upload(&d.valid, table->cols[column].valid, rows_);
        exec_->Upload(&d.cells, static_cast<const int64_t*>(table->cols[column].cells), rows_);
        d.resident = true;
      } else if (!upload) {
        exec_->Reserve(&d.valid, rows_);
        exec_->Reserve(&d.cells, rows_);
        d.resident = true;  // made here: resident once the layer ran
      }
      valid.push_back(d.valid.data());
      cells.push_back(d.cells.data());
      return static_cast<int>(valid.size()) - 1;
    };
    for (size_t k = 0; k < flat.size(); ++k) {
      const OpNode& op = plan.ops[ops[k]];
      flat[k].in = pointer_index(op.inputs[0], /*upload=*/true);
      flat[k].out = pointer_index(op.output, /*upload=*/false);
    }
    exec_->Upload(&ops_buf_, flat.data(), flat.size());
    if (consts.empty()) consts.push_back(0);  // a buffer to point at
    exec_->Upload(&consts_buf_, consts.data(), consts.size());
    exec_->Upload(&valid_buf_, valid.data(), valid.size());
    exec_->Upload(&cells_buf_, cells.data(), cells.size());
    exec_->Upload(&errors_, table->errors.data(), rows_);
    const FixedOp* o = ops_buf_.data();
    const double* c = consts_buf_.data();
    uint8_t* const* v = valid_buf_.data();
    void* const* cl = cells_buf_.data();
    uint32_t* err = errors_.data();
    const uint32_t n_ops = static_cast<uint32_t>(flat.size());
    if (fused_) {
      // The meta-kernel: each row runs every operator of the layer.
      exec_->ForEach(rows_, [=] CTRBOX_HD(size_t i) {
        const uint32_t r = static_cast<uint32_t>(i);
        for (uint32_t k = 0; k < n_ops; ++k) {
          const FixedOp& op = o[k];
          FixedRow(op, FixedIo{v[op.in], cl[op.in], v[op.out], cl[op.out], err, c}, r);
        }
      });
      ++launches_;
    } else {
      for (uint32_t k = 0; k < n_ops; ++k) {
        exec_->ForEach(rows_, [=] CTRBOX_HD(size_t i) {
          const FixedOp& op = o[k];
          FixedRow(op, FixedIo{v[op.in], cl[op.in], v[op.out], cl[op.out], err, c},
                   static_cast<uint32_t>(i));
        });
        ++launches_;
      }
    }
    // The outputs back, for the CPU operators and the assembly.
    for (size_t k = 0; k < flat.size(); ++k) {
      const int out = plan.ops[ops[k]].output;
      DeviceColumn& d = Column(out);
      exec_->Download(table->cols[out].valid, d.valid.data(), rows_);
      exec_->Download(static_cast<int64_t*>(table->cols[out].cells), d.cells.data(), rows_);
    }
    exec_->Download(table->errors.data(), errors_.data(), rows_);
    const Status s = exec_->status();
    if (!s.ok()) return Status(s.code(), "features on the GPU: " + s.message());
    return s;
  }

  uint64_t launches() const override { return launches_; }
  std::string Describe() const override {
    return name_ + (fused_ ? " (one launch per layer)" : " (one launch per operator)");
  }

 private:
  struct DeviceColumn {
    Buf<uint8_t> valid;
    Buf<int64_t> cells;  // 8-byte cells: int64 or double
    bool resident = false;
  };
  DeviceColumn& Column(int c) {
    if (!cols_[c]) cols_[c] = std::make_unique<DeviceColumn>();
    return *cols_[c];
  }

  std::unique_ptr<Exec> exec_;
  const bool fused_;
  const std::string name_;
  uint32_t rows_ = 0;
  uint64_t launches_ = 0;
  std::vector<std::unique_ptr<DeviceColumn>> cols_;
  Buf<FixedOp> ops_buf_;
  Buf<double> consts_buf_;
  Buf<uint8_t*> valid_buf_;
  Buf<void*> cells_buf_;
  Buf<uint32_t> errors_;
};

}  // namespace ctrbox

#endif  // CTRBOX_FEATURE_DEVICE_LAYERS_IMPL_H_
