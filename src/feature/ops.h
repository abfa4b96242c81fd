// The operator kernels of the feature graph (docs/features.md, "Operators": each operator's
// rows are its file's under ops/) and the executors that run a layer of them over row blocks
// (docs/features.md, "Scheduling").
//
// A kernel computes rows [begin, end) of its operator's output column from the same rows of
// its inputs; row r's result depends only on row r, so any split of the rows into blocks, on
// any threads, gives the same column. A row the operator cannot compute (a string that is not
// a number, malformed JSON) is marked in table->errors.
//
// Internal to src/feature.
#ifndef CTRBOX_FEATURE_OPS_H_
#define CTRBOX_FEATURE_OPS_H_

#include <memory>
#include <vector>

#include "feature/column.h"
#include "feature/graph.h"
#include "feature/op_spec.h"
#include "feature/side_table.h"
#include "io/bad_input.h"
#include "util/thread_pool.h"

namespace ctrbox {

// Rows per block of a fused layer (a GPU's thread block).
constexpr uint32_t kRowBlock = 256;

// Allocates op's output column for `rows` rows (lane 0).
void AllocateOutput(const FeaturePlan& plan, const OpNode& op, uint32_t rows, Arena* arena,
                    ColumnTable* table);
// Rows [begin, end) of operator `op_id`, allocating from `lane`.
void RunOpRows(const FeaturePlan& plan, int op_id, const SideTables& sides, uint32_t begin,
               uint32_t end, Arena* arena, int lane, ColumnTable* table);
// The kind under which a row that `op` marked is counted, and what its message says.
BadKind ErrorKind(const OpNode& op);
std::string ErrorDetail(const FeaturePlan& plan, const OpNode& op, const ColumnTable& t,
                        uint32_t row);

// Executors of a fused layer: ForBlocks(n, f) calls f(block, lane) for each block in [0, n).
class InlineExec {
 public:
  int lanes() const { return 1; }
  template <class F>
  void ForBlocks(size_t n, F f) {
    for (size_t b = 0; b < n; ++b) f(b, 0);
  }
};
class PoolExec {
 public:
  explicit PoolExec(ThreadPool* pool) : pool_(pool) {}
  int lanes() const { return pool_->num_threads(); }
  template <class F>
  void ForBlocks(size_t n, F f) {
    pool_->ParallelFor(n, [&](size_t b, int t) { f(b, t); });
  }

 private:
  ThreadPool* pool_;
};

// Runs every operator of `plan` over the table: layer by layer, each layer one fused loop over
// row blocks through `exec` (layered), or one operator at a time in topological order over
// all rows (sequential). Both give the same columns bit for bit.
template <class Exec>
void RunLayers(const FeaturePlan& plan, const SideTables& sides, Exec* exec, Arena* arena,
               ColumnTable* table) {
  arena->EnsureLanes(exec->lanes());
  const uint32_t rows = table->rows;
  const size_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  for (const std::vector<int>& layer : plan.layers) {
    for (int id : layer) AllocateOutput(plan, plan.ops[id], rows, arena, table);
    exec->ForBlocks(blocks, [&](size_t b, int lane) {
      const uint32_t begin = static_cast<uint32_t>(b * kRowBlock);
      const uint32_t end = std::min<uint32_t>(rows, begin + kRowBlock);
      for (int id : layer) RunOpRows(plan, id, sides, begin, end, arena, lane, table);
    });
  }
}
void RunSequential(const FeaturePlan& plan, const SideTables& sides, Arena* arena,
                   ColumnTable* table);

}  // namespace ctrbox

#endif  // CTRBOX_FEATURE_OPS_H_
