#include "feature/ops.h"

#include <fmt/format.h>

#include <algorithm>

#include "feature/device_layers.h"
#include "feature/op_spec.h"
#include "feature/ops/all.h"

namespace ctrbox {

BadKind ErrorKind(const OpNode& op) { return SpecOf(op.kind).bad_kind; }

std::string ErrorDetail(const FeaturePlan& plan, const OpNode& op, const ColumnTable& t,
                        uint32_t row) {
  if (const OpSpec& spec = SpecOf(op.kind); spec.why != nullptr) {
    return spec.why(plan, op, t, row);
  }
  std::string in;
  for (int c : op.inputs) in += (in.empty() ? "" : ", ") + plan.columns[c].name;
  return fmt::format("operator {} ({}) could not compute the row from {}", op.name,
                     OpKindName(op.kind), in);
}

void AllocateOutput(const FeaturePlan& plan, const OpNode& op, uint32_t rows, Arena* arena,
                    ColumnTable* table) {
  Column& c = table->cols[op.output];
  c.type = plan.columns[op.output].type;
  c.valid = arena->Alloc<uint8_t>(std::max<uint32_t>(rows, 1));
  c.cells = arena->Allocate(std::max<size_t>(rows, 1) * CellBytes(c.type));
}

void RunOpRows(const FeaturePlan& plan, int op_id, const SideTables& sides, uint32_t begin,
               uint32_t end, Arena* arena, int lane, ColumnTable* t) {
  const OpNode& op = plan.ops[op_id];
  Column& out = t->cols[op.output];
  const Column& in = t->cols[op.inputs.empty() ? op.output : op.inputs[0]];
  if (IsFixedOp(plan, op)) {  // the row function the device layers run too (ops/<name>.h)
    thread_local std::vector<double> consts;
    consts.clear();
    const FixedOp f = MakeFixedOp(plan, op, op_id, &consts);
    const FixedIo io{in.valid, in.cells, out.valid, out.cells, t->errors.data(), consts.data()};
    for (uint32_t r = begin; r < end; ++r) FixedRow(f, io, r);
    return;
  }
  SpecOf(op.kind).rows(OpRows{plan, op_id, op, sides, begin, end, arena, lane, t, out, in});
}

void RunSequential(const FeaturePlan& plan, const SideTables& sides, Arena* arena,
                   ColumnTable* table) {
  for (int id : plan.topo) {
    AllocateOutput(plan, plan.ops[id], table->rows, arena, table);
    RunOpRows(plan, id, sides, 0, table->rows, arena, 0, table);
  }
}

}  // namespace ctrbox
