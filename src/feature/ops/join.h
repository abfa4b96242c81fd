// join: each row's match in a side view, by the view's key (docs/features.md, "Views and
// joins"). Makes the matched row's index (-1: none); the graph adds a gather per column of the
// view, named `<as>.<column>` (ops/gather.h).
#ifndef CTRBOX_FEATURE_OPS_JOIN_H_
#define CTRBOX_FEATURE_OPS_JOIN_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include <fmt/format.h>

#include "feature/op_spec.h"
#endif

namespace ctrbox::ops {

struct JoinOp : HostOnlyOp {};

#ifndef __CUDACC__
inline OpSpec JoinSpec() {
  OpSpec s;
  s.params = {"view", "on", "as"};
  s.named = false;
  s.one_input = false;
  s.parse = [](OpParse& p) -> Status {
    ASSIGN_OR_RETURN(std::string view, p.Scalar("view"));
    p.op().name = view;  // resolved against the views by the graph
    RETURN_IF_ERROR(p.Inputs("on"));
    if (p.Has("as")) {
      ASSIGN_OR_RETURN(p.alias, p.Scalar("as"));
      if (p.alias.empty() || p.alias.find('.') != std::string::npos) {
        return p.Error("as", "as: must be non-empty, without '.'");
      }
    }
    return Status::OK();
  };
  s.type = [](const OpTyping& t) -> StatusOr<ColType> {
    const SideView& v = t.plan.views[t.op.view];
    for (size_t k = 0; k < t.in.size(); ++k) {
      const ColType want = v.layout.columns[v.key[k]].type;
      if (t.in[k] != want) {
        return t.Error(fmt::format("join {}: '{}' is {}, but the view's key column '{}' is {}",
                                   v.name, t.names[k], ColTypeName(t.in[k]),
                                   v.layout.columns[v.key[k]].name, ColTypeName(want)));
      }
    }
    return ColType::kInt;
  };
  s.rows = [](const OpRows& x) {
    for (uint32_t r = x.begin; r < x.end; ++r) {
      x.out.valid[r] = 1;
      x.out.ints()[r] = x.sides[x.op.view]->Find(*x.t, x.op.inputs, r);
    }
  };
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_JOIN_H_
