// The row functions' common ground (docs/features.md, "On a GPU"). The operators a GPU runs
// are those whose inputs and output are fixed-width numbers — fill_null and cast between int
// and float, numeric filters, bucketize, time_part, log, clip, normalize. Each has one
// CTRBOX_HD row function over raw column pointers (its `Row`, in its file under ops/), called
// by the CPU kernels (ops.cc), by the host emulation of the device layers and by the CUDA
// kernel alike: one source, so the three compute the same bits (the CUDA build runs with
// --fmad=false; log1p is the one call whose last bit the device's math library may round
// otherwise). Row functions hold no lambdas: nvcc and g++ both compile them (docs/gpu.md, ODR).
//
// Internal to src/feature.
#ifndef CTRBOX_FEATURE_FIXED_OPS_H_
#define CTRBOX_FEATURE_FIXED_OPS_H_

#include <cmath>
#include <cstdint>

#include "feature/graph.h"
#include "util/hd.h"

namespace ctrbox {

// An operator flattened for a kernel. Kinds and types are OpKind / ColType values.
struct FixedOp {
  uint8_t kind = 0;         // OpKind
  uint8_t in_type = 0;      // ColType of the input: int or float (mask for not_null: any)
  uint8_t out_type = 0;     // ColType of the output
  uint8_t cmp = 0;          // Cmp
  uint8_t part = 0;         // TimePart
  int32_t op_id = 0;        // marked in errors as op_id + 1
  int32_t in = 0, out = 0;  // indices into the layer's column pointers
  double a = 0, b = 0;      // clip, normalize; fill_null / filter constant as a double
  int64_t ci = 0;           // fill_null constant as an int
  int64_t offset = 0;       // time_part utc offset (seconds)
  uint32_t nb = 0;          // bucketize: boundaries
  uint32_t boundaries = 0;  // ... from this index of the layer's boundary buffer
  uint32_t nvalues = 0;     // filter `in`: values
  uint32_t values = 0;      // ... from this index of the boundary buffer
};

// Helpers of the row functions.
namespace fixed {

CTRBOX_HD inline int64_t FloorDiv(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
CTRBOX_HD inline void CivilFromDays(int64_t z, int64_t* y, int* m, int* d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  *d = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  *m = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  *y = yoe + era * 400 + (*m <= 2);
}

CTRBOX_HD inline void MarkError(uint32_t* errors, uint32_t r, int32_t op_id) {
  const uint32_t mine = static_cast<uint32_t>(op_id) + 1;
  if (errors[r] == 0 || mine < errors[r]) errors[r] = mine;
}

}  // namespace fixed

// The columns a row function reads and writes: the input's validity and 8-byte cells, the
// output's, the rows' first-error marks and the layer's constants (boundaries, `in` values).
struct FixedIo {
  const uint8_t* in_valid;
  const void* in_cells;
  uint8_t* out_valid;
  void* out_cells;
  uint32_t* errors;
  const double* consts;

  CTRBOX_HD bool valid(uint32_t r) const { return in_valid[r] != 0; }
  CTRBOX_HD int64_t in_int(uint32_t r) const { return static_cast<const int64_t*>(in_cells)[r]; }
  // The input as a double (an int converted; 0 where null).
  CTRBOX_HD double in_number(const FixedOp& op, uint32_t r) const {
    if (!valid(r)) return 0.0;
    return op.in_type == static_cast<uint8_t>(ColType::kInt)
               ? static_cast<double>(in_int(r))
               : static_cast<const double*>(in_cells)[r];
  }
  CTRBOX_HD void set_int(uint32_t r, int64_t v) const {
    out_valid[r] = 1;
    static_cast<int64_t*>(out_cells)[r] = v;
  }
  CTRBOX_HD void set_float(uint32_t r, double v) const {
    out_valid[r] = 1;
    static_cast<double*>(out_cells)[r] = v;
  }
  CTRBOX_HD void set_null(uint32_t r) const {
    out_valid[r] = 0;
    static_cast<int64_t*>(out_cells)[r] = 0;
  }
  CTRBOX_HD void mark_error(const FixedOp& op, uint32_t r) const {
    fixed::MarkError(errors, r, op.op_id);
  }
};

// The row function of an operator the GPU never runs (strings, lists, JSON, joins, hashing).
struct HostOnlyOp {
  CTRBOX_HD static void Row(const FixedOp&, const FixedIo&, uint32_t) {}
};

}  // namespace ctrbox

#endif  // CTRBOX_FEATURE_FIXED_OPS_H_
