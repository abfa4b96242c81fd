// The operators of the feature graph that a GPU runs (docs/features.md, "On a GPU"): those
// whose inputs and output are fixed-width numbers — fill_null and cast between int and float,
// numeric filters, bucketize, time_part, log, clip, normalize. Each is one CTRBOX_HD row
// function over raw column pointers, called by the CPU kernels (ops.cc), by the host
// emulation of the device layers and by the CUDA kernel alike: one source, so the three
// compute the same bits (the CUDA build runs with --fmad=false; log1p is the one call whose
// last bit the device's math library may round otherwise).
//
// Internal to src/feature.
#ifndef CTRBOX_FEATURE_FIXED_OPS_H_
#define CTRBOX_FEATURE_FIXED_OPS_H_

#include <cmath>
#include <cstdint>

#include "util/hd.h"

namespace ctrbox {

// An operator flattened for a kernel. Kinds and types are OpKind / ColType values.
struct FixedOp {
  uint8_t kind = 0;
  uint8_t in_type = 0;      // ColType of the input: int or float (mask for not_null: any)
  uint8_t out_type = 0;     // ColType of the output
  uint8_t cmp = 0;          // Cmp
  uint8_t part = 0;         // TimePart
  int32_t op_id = 0;        // marked in errors as op_id + 1
  int32_t in = 0, out = 0;  // the layer's column slots
  double a = 0, b = 0;      // clip, normalize; fill_null / filter constant as a double
  int64_t ci = 0;           // fill_null constant as an int
  int64_t offset = 0;       // time_part utc offset (seconds)
  uint32_t nb = 0;          // bucketize: boundaries
  uint32_t boundaries = 0;  // ... from this index of the layer's boundary buffer
  uint32_t nvalues = 0;     // filter `in`: values
  uint32_t values = 0;      // ... from this index of the boundary buffer
};

// The op kinds, as OpKind's values (graph.h), for code compiled without it.
namespace fixed {
constexpr uint8_t kFillNull = 0, kCast = 1, kFilter = 3, kBucketize = 9, kTimePart = 12, kLog = 13,
                  kClip = 14, kNormalize = 15;
constexpr uint8_t kInt = 0, kFloat = 1, kMask = 6;  // ColType
constexpr uint8_t kEq = 0, kNe = 1, kLt = 2, kLe = 3, kGt = 4, kGe = 5, kIn = 6, kNotNull = 7;
constexpr uint8_t kMinute = 0, kHour = 1, kWeekday = 2, kDay = 3, kMonth = 4, kYear = 5;

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

// Row r of `op`: reads the input's validity and 8-byte cell, writes the output's.
CTRBOX_HD inline void FixedRow(const FixedOp& op, const uint8_t* in_valid, const void* in_cells,
                               uint8_t* out_valid, void* out_cells, uint32_t* errors,
                               const double* consts, uint32_t r) {
  using namespace fixed;
  int64_t* oi = static_cast<int64_t*>(out_cells);
  double* of = static_cast<double*>(out_cells);
  const bool valid = in_valid[r] != 0;
  const double x = !valid ? 0.0
                   : op.in_type == kInt
                       ? static_cast<double>(static_cast<const int64_t*>(in_cells)[r])
                       : static_cast<const double*>(in_cells)[r];
  auto set_null = [&] {
    out_valid[r] = 0;
    oi[r] = 0;
  };
  switch (op.kind) {
    case kFillNull:
      out_valid[r] = 1;
      if (op.in_type == kInt) {
        oi[r] = valid ? static_cast<const int64_t*>(in_cells)[r] : op.ci;
      } else {
        of[r] = valid ? x : op.a;
      }
      return;
    case kCast:
      if (!valid) return set_null();
      out_valid[r] = 1;
      if (op.in_type == op.out_type) {
        oi[r] = static_cast<const int64_t*>(in_cells)[r];  // the same 8 bytes
      } else if (op.out_type == kFloat) {
        of[r] = x;
      } else {
        const double t = trunc(x);
        if (t >= -9.2e18 && t <= 9.2e18) {
          oi[r] = static_cast<int64_t>(t);
        } else {
          set_null();
          MarkError(errors, r, op.op_id);
        }
      }
      return;
    case kFilter: {
      bool keep;
      if (op.cmp == kNotNull) {
        keep = valid;
      } else if (!valid) {
        keep = op.cmp == kNe;
      } else if (op.cmp == kIn) {
        keep = false;
        for (uint32_t k = 0; k < op.nvalues; ++k) keep |= x == consts[op.values + k];
      } else {
        const int s = x < op.a ? -1 : (x > op.a ? 1 : 0);
        keep = op.cmp == kEq   ? s == 0
               : op.cmp == kNe ? s != 0
               : op.cmp == kLt ? s < 0
               : op.cmp == kLe ? s <= 0
               : op.cmp == kGt ? s > 0
                               : s >= 0;
      }
      out_valid[r] = 1;
      oi[r] = keep;
      return;
    }
    case kBucketize: {
      if (!valid) return set_null();
      // upper_bound: the boundaries <= x.
      uint32_t lo = 0, hi = op.nb;
      while (lo < hi) {
        const uint32_t mid = (lo + hi) / 2;
        if (consts[op.boundaries + mid] <= x) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      out_valid[r] = 1;
      oi[r] = lo;
      return;
    }
    case kTimePart: {
      if (!valid) return set_null();
      const int64_t v = static_cast<const int64_t*>(in_cells)[r];
      if (v < -(int64_t{1} << 40) || v > (int64_t{1} << 40)) {  // beyond ±34,000 years
        set_null();
        MarkError(errors, r, op.op_id);
        return;
      }
      const int64_t s = v + op.offset;
      const int64_t days = FloorDiv(s, 86400);
      const int64_t secs = s - days * 86400;
      int64_t value;
      if (op.part == kMinute) {
        value = (secs / 60) % 60;
      } else if (op.part == kHour) {
        value = secs / 3600;
      } else if (op.part == kWeekday) {  // 0 = Monday; 1970-01-01 was a Thursday
        value = ((days + 3) % 7 + 7) % 7;
      } else {
        int64_t y;
        int m, d;
        CivilFromDays(days, &y, &m, &d);
        value = op.part == kDay ? d : op.part == kMonth ? m : y;
      }
      out_valid[r] = 1;
      oi[r] = value;
      return;
    }
    case kLog:
    case kClip:
    case kNormalize: {
      if (!valid) return set_null();
      double y;
      if (op.kind == kLog) {
        y = log1p(x > 0.0 ? x : 0.0);
      } else if (op.kind == kClip) {
        y = x < op.a ? op.a : (x > op.b ? op.b : x);
      } else {
        y = (x - op.a) / op.b;
      }
      out_valid[r] = 1;
      of[r] = y;
      return;
    }
    default:
      return;
  }
}

}  // namespace ctrbox

#endif  // CTRBOX_FEATURE_FIXED_OPS_H_
