// What a served model looks like to clients (docs/serve.md, "Protocol"): its inputs and
// outputs, as the protocol's model metadata and as Triton's model configuration.
#ifndef CTRBOX_SERVE_DESCRIBE_H_
#define CTRBOX_SERVE_DESCRIBE_H_

#include <nlohmann/json.hpp>
#include <string>

#include "serve/grpc_server.h"
#include "serve/served_version.h"

namespace ctrbox {

// The model `name` at version v: inputs records (BYTES [-1]), keys (INT64 [-1, slots]), dense
// (FP32 [-1, dense], when the model has dense features) and present (BOOL [-1, slots]);
// outputs probability (FP32 [-1]) and, through a feature graph, scored (BOOL [-1]).
ModelDescription DescribeModel(const std::string& name, const ServedVersion& v, bool through_graph);

// The protocol's model metadata (GET v2/models/{name}), with ctrbox's parameters.
nlohmann::json MetadataJson(const ModelDescription& d, const ServedVersion& v, bool through_graph);

// The model configuration extension (GET v2/models/{name}/config) in Triton's model-config
// form: every input optional (records, or keys with present and dense); no batch dimension of
// its own (max_batch_size 0: the first dimension of every tensor is the request's rows).
nlohmann::json ConfigJson(const ModelDescription& d, const ServedVersion& v);

}  // namespace ctrbox

#endif  // CTRBOX_SERVE_DESCRIBE_H_
