// split: a string's pieces between separators, empty ones left out (docs/features.md,
// "Operators"). Makes a list column whose items point into the input string.
#ifndef CTRBOX_FEATURE_OPS_SPLIT_H_
#define CTRBOX_FEATURE_OPS_SPLIT_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include <algorithm>
#include <string_view>

#include "feature/op_spec.h"
#endif

namespace ctrbox::ops {

struct SplitOp : HostOnlyOp {};

#ifndef __CUDACC__
// Pieces of s split at sep, empty ones left out: calls f(piece) for each.
template <class F>
void ForPieces(std::string_view s, std::string_view sep, F f) {
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(sep, i);
    if (j == std::string_view::npos) j = s.size();
    if (j > i) f(s.substr(i, j - i));
    i = j + sep.size();
  }
}

// The last `limit` pieces of each string row (all of them: UINT32_MAX): count, one allocation
// for the block, fill.
inline void PieceRows(const OpRows& x, uint32_t limit) {
  const std::string_view sep = x.op.sep;
  uint64_t total = 0;
  for (uint32_t r = x.begin; r < x.end; ++r) {
    uint32_t n = 0;
    if (x.in.valid[r]) ForPieces(x.in.strs()[r].view(), sep, [&](std::string_view) { ++n; });
    x.out.lists()[r].n = std::min(n, limit);
    total += x.out.lists()[r].n;
  }
  Str* items = x.arena->Alloc<Str>(std::max<uint64_t>(total, 1), x.lane);
  uint64_t at = 0;
  for (uint32_t r = x.begin; r < x.end; ++r) {
    StrSpan& span = x.out.lists()[r];
    x.out.valid[r] = span.n > 0;
    if (span.n == 0) {
      span.p = nullptr;
      continue;
    }
    span.p = items + at;
    uint32_t all = 0;
    if (limit != UINT32_MAX) {
      ForPieces(x.in.strs()[r].view(), sep, [&](std::string_view) { ++all; });
    }
    const uint32_t skip = limit != UINT32_MAX ? all - span.n : 0;
    uint32_t i = 0, w = 0;
    ForPieces(x.in.strs()[r].view(), sep, [&](std::string_view p) {
      if (i++ >= skip) items[at + w++] = {p.data(), static_cast<uint32_t>(p.size())};
    });
    at += span.n;
  }
}

// split's and last_n's `sep` (required by split).
inline Status ParseSep(OpParse& p, bool required) {
  if (p.Has("sep")) {
    ASSIGN_OR_RETURN(p.op().sep, p.Scalar("sep"));
    if (p.op().sep.empty()) return p.Error("sep", "sep is empty");
  } else if (required) {
    return p.Error(nullptr, "split needs `sep`");
  }
  return Status::OK();
}

inline OpSpec SplitSpec() {
  OpSpec s;
  s.params = {"input", "sep"};
  s.parse = [](OpParse& p) -> Status {
    RETURN_IF_ERROR(p.Inputs("input"));
    return ParseSep(p, /*required=*/true);
  };
  s.type = [](const OpTyping& t) -> StatusOr<ColType> {
    if (t.in[0] != ColType::kString) return t.Bad(0, "string");
    return ColType::kList;
  };
  s.rows = [](const OpRows& x) { PieceRows(x, UINT32_MAX); };
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_SPLIT_H_
