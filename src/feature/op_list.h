// The feature graph's operators: the registry (docs/features.md, "Operators"). Each operator
// is one file, src/feature/ops/<name>.h — its YAML parameters and their parse, its type rule,
// its CPU rows and, where it has one, its row function for the GPU — plus its line here and
// its #include in ops/all.h. The order here is OpKind's.
//
// X(Name, yaml_name): Name##Op is the operator's row struct and Name##Spec() its spec
// (namespace ctrbox::ops); yaml_name is how a job file writes it (`op: yaml_name`).
#ifndef CTRBOX_FEATURE_OP_LIST_H_
#define CTRBOX_FEATURE_OP_LIST_H_

#define CTRBOX_FEATURE_OPS(X) \
  X(FillNull, fill_null)      \
  X(Cast, cast)               \
  X(JsonField, json_field)    \
  X(Filter, filter)           \
  X(Dedupe, dedupe)           \
  X(Join, join)               \
  X(Gather, gather)           \
  X(Hash, hash)               \
  X(Cross, cross)             \
  X(Bucketize, bucketize)     \
  X(Split, split)             \
  X(LastN, last_n)            \
  X(TimePart, time_part)      \
  X(ParseTime, parse_time)    \
  X(Log, log)                 \
  X(Clip, clip)               \
  X(Normalize, normalize)

#endif  // CTRBOX_FEATURE_OP_LIST_H_
