#include "ckpt/model_spec.h"

#include <fmt/format.h>

#include <map>

#include "util/json_text.h"

namespace ctrbox {
namespace {

nlohmann::json OptimizerJson(const OptimizerOptions& o) {
  nlohmann::json j = {{"kind", OptimizerKindName(o.kind)},
                      {"lr", o.lr},
                      {"epsilon", o.epsilon},
                      {"beta1", o.beta1},
                      {"beta2", o.beta2}};
  // Written only when set, so that the specs of float32 state read as before.
  if (o.state_bits != 0) j["state_bits"] = o.state_bits;
  return j;
}

OptimizerOptions OptimizerFromJson(const nlohmann::json& j) {
  OptimizerOptions o;
  if (!ParseOptimizerKind(j.at("kind").get<std::string>(), &o.kind)) {
    throw nlohmann::json::other_error::create(501, "unknown optimizer kind", &j);
  }
  o.lr = j.at("lr").get<float>();
  o.epsilon = j.at("epsilon").get<float>();
  o.beta1 = j.at("beta1").get<float>();
  o.beta2 = j.at("beta2").get<float>();
  o.state_bits = j.value("state_bits", 0u);
  if (o.state_bits != 0 && o.state_bits != 16) {
    throw nlohmann::json::other_error::create(501, "state_bits must be 0 or 16", &j);
  }
  return o;
}

// Flattens a JSON object into dotted keys.
void Flatten(const nlohmann::json& j, const std::string& prefix,
             std::vector<std::pair<std::string, nlohmann::json>>* out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      Flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
    }
  } else {
    out->emplace_back(prefix, j);
  }
}

}  // namespace

nlohmann::json ModelSpec::ToJson() const {
  const AccessorOptions& t = table;
  nlohmann::json j = {
      {"schema", {{"num_slots", schema.num_slots}, {"num_dense", schema.num_dense}}},
      {"model",
       {{"embedding_dim", model.embedding_dim},
        {"mlp", model.mlp},
        {"wide", model.wide},
        {"dense_log1p", model.dense_log1p},
        {"quant",
         {{"bits", model.quant.bits},
          {"range", model.quant.range},
          {"rounding", QuantRoundingName(model.quant.rounding)}}}}},
      {"sparse_optimizer", OptimizerJson(sparse_optimizer)},
      {"dense_optimizer", OptimizerJson(dense_optimizer)},
      {"table",
       {{"nonclk_coeff", t.nonclk_coeff},
        {"click_coeff", t.click_coeff},
        {"embedx_threshold", t.embedx_threshold},
        {"init_range", t.init_range},
        {"seed", t.seed},
        {"decay", t.decay},
        {"delete_threshold", t.delete_threshold},
        {"delete_after_unseen_passes", t.delete_after_unseen_passes}}},
  };
  // Written only when set, so that the specs of models without them read as before.
  if (model.fm) j["model"]["fm"] = true;
  if (model.cross_layers > 0) j["model"]["cross_layers"] = model.cross_layers;
  if (model.cross_rank > 0) j["model"]["cross_rank"] = model.cross_rank;
  if (model.cross_experts > 0) j["model"]["cross_experts"] = model.cross_experts;
  if (model.dot) j["model"]["dot"] = true;
  if (!model.bottom_mlp.empty()) j["model"]["bottom_mlp"] = model.bottom_mlp;
  if (!model.shared_slots.empty()) j["model"]["shared_slots"] = model.shared_slots;
  if (model.HasTowers()) j["model"]["towers"] = model.towers;
  if (!model.dense_groups.empty()) j["model"]["dense_groups"] = model.dense_groups;
  if (!model.tower_mlp.empty()) j["model"]["tower_mlp"] = model.tower_mlp;
  if (!model.slot_dims.empty()) {
    nlohmann::json dims = nlohmann::json::array();
    for (const SlotDims& g : model.slot_dims) dims.push_back({{"slots", g.slots}, {"dim", g.dim}});
    j["model"]["slot_dims"] = dims;
  }
  // Written only when set, so that the specs of lossless models read as before.
  if (model.hashing.enabled()) {
    j["model"]["hashing"] = {{"method", HashingMethodName(model.hashing.method)},
                             {"bins", model.hashing.bins}};
  }
  return j;
}

StatusOr<ModelSpec> ModelSpec::FromJson(const nlohmann::json& j) {
  try {
    ModelSpec s;
    s.schema.num_slots = j.at("schema").at("num_slots").get<uint32_t>();
    s.schema.num_dense = j.at("schema").at("num_dense").get<uint32_t>();
    const auto& m = j.at("model");
    s.model.embedding_dim = m.at("embedding_dim").get<uint32_t>();
    s.model.mlp = m.at("mlp").get<std::vector<uint32_t>>();
    s.model.wide = m.at("wide").get<bool>();
    s.model.dense_log1p = m.at("dense_log1p").get<bool>();
    if (m.contains("quant")) {  // absent in manifests written before quantization: float32
      const auto& q = m.at("quant");
      s.model.quant.bits = q.at("bits").get<uint32_t>();
      s.model.quant.range = q.at("range").get<float>();
      if (!ParseQuantRounding(q.at("rounding").get<std::string>(), &s.model.quant.rounding)) {
        return CorruptionError("model spec: unknown model.quant.rounding");
      }
      if (std::string_view e = QuantOptionsError(s.model.quant); !e.empty()) {
        return CorruptionError("model spec: " + std::string(e));
      }
    }
    if (m.contains("hashing")) {  // absent: lossless ids
      const auto& h = m.at("hashing");
      if (!ParseHashingMethod(h.at("method").get<std::string>(), &s.model.hashing.method) ||
          !s.model.hashing.enabled()) {
        return CorruptionError("model spec: unknown model.hashing.method");
      }
      s.model.hashing.bins = h.at("bins").get<uint64_t>();
      if (s.model.hashing.bins == 0) return CorruptionError("model spec: model.hashing.bins is 0");
    }
    s.model.fm = m.value("fm", false);  // absent in manifests from before the interactions
    s.model.cross_layers = m.value("cross_layers", 0u);
    s.model.cross_rank = m.value("cross_rank", 0u);
    s.model.cross_experts = m.value("cross_experts", 0u);  // absent: one W_l per layer
    if (s.model.cross_experts > 64 ||
        (s.model.cross_experts > 0 && (s.model.cross_rank == 0 || s.model.cross_layers == 0))) {
      return CorruptionError(
          "model spec: model.cross_experts needs model.cross_rank and model.cross_layers, and "
          "is at most 64");
    }
    s.model.dot = m.value("dot", false);
    s.model.bottom_mlp = m.value("bottom_mlp", std::vector<uint32_t>{});
    s.model.shared_slots =
        m.value("shared_slots", std::vector<std::vector<uint32_t>>{});  // absent: none
    if (std::string e = s.model.SharedSlotsError(s.schema.num_slots); !e.empty()) {
      return CorruptionError("model spec: " + e);
    }
    s.model.towers = m.value("towers", 0u);  // absent: the single MLP
    s.model.dense_groups = m.value("dense_groups", std::vector<std::vector<uint32_t>>{});
    s.model.tower_mlp = m.value("tower_mlp", std::vector<std::vector<uint32_t>>{});
    for (const auto& shape : s.model.tower_mlp) {
      for (uint32_t w : shape) {
        if (w == 0 || w > 65536) return CorruptionError("model spec: a model.tower_mlp width");
      }
    }
    if (std::string e = TowersError(s.model, s.schema.num_dense); !e.empty()) {
      return CorruptionError("model spec: " + e);
    }
    if (m.contains("slot_dims")) {  // absent: every slot of model.embedding_dim
      for (const auto& g : m.at("slot_dims")) {
        s.model.slot_dims.push_back(
            SlotDims{g.at("slots").get<std::vector<uint32_t>>(), g.at("dim").get<uint32_t>()});
      }
    }
    if (std::string e = s.model.SlotDimsError(s.schema.num_slots); !e.empty()) {
      return CorruptionError("model spec: " + e);
    }
    if (!s.model.bottom_mlp.empty() && s.model.bottom_mlp.back() != s.model.embedding_dim) {
      return CorruptionError("model spec: model.bottom_mlp must end at model.embedding_dim");
    }
    if (s.model.cross_layers > 16) return CorruptionError("model spec: model.cross_layers > 16");
    s.sparse_optimizer = OptimizerFromJson(j.at("sparse_optimizer"));
    s.dense_optimizer = OptimizerFromJson(j.at("dense_optimizer"));
    const auto& t = j.at("table");
    s.table.nonclk_coeff = t.at("nonclk_coeff").get<float>();
    s.table.click_coeff = t.at("click_coeff").get<float>();
    s.table.embedx_threshold = t.at("embedx_threshold").get<float>();
    s.table.init_range = t.at("init_range").get<float>();
    s.table.seed = t.at("seed").get<uint64_t>();
    s.table.decay = t.at("decay").get<float>();
    s.table.delete_threshold = t.at("delete_threshold").get<float>();
    s.table.delete_after_unseen_passes = t.at("delete_after_unseen_passes").get<uint32_t>();
    if (s.schema.num_slots == 0 || s.model.embedding_dim == 0) {
      return CorruptionError("model spec has zero slots or embedding dimension");
    }
    return s;
  } catch (const nlohmann::json::exception& e) {
    return CorruptionError(std::string("model spec: ") + e.what());
  }
}

std::string ModelSpec::FirstDifference(const ModelSpec& other) const {
  // Keys written only when set (model.hashing, model.fm, ...) are absent from one side: the
  // first key, in order, whose value differs or that only one side has.
  std::vector<std::pair<std::string, nlohmann::json>> a, b;
  Flatten(ToJson(), "", &a);
  Flatten(other.ToJson(), "", &b);
  std::map<std::string, std::pair<const nlohmann::json*, const nlohmann::json*>> keys;
  for (const auto& [k, v] : a) keys[k].first = &v;
  for (const auto& [k, v] : b) keys[k].second = &v;
  for (const auto& [k, v] : keys) {
    if (v.first == nullptr || v.second == nullptr || *v.first != *v.second) return k;
  }
  return "";
}

std::string ModelSpec::FirstIncompatibility(const ModelSpec& other) const {
  std::string diff = FirstDifference(other);
  // The rounding of future updates may change; the stored codes' bits and range may not.
  const bool structural = diff.empty() || diff == "spec" || diff.rfind("schema.", 0) == 0 ||
                          (diff.rfind("model.", 0) == 0 && diff != "model.quant.rounding") ||
                          diff.ends_with(".kind") || diff.ends_with(".state_bits");
  if (structural) return diff;
  // A hyperparameter differs; look for a structural difference further on.
  ModelSpec a = *this, b = other;
  a.model.quant.rounding = b.model.quant.rounding;
  a.sparse_optimizer = OptimizerOptions{sparse_optimizer.kind};
  b.sparse_optimizer = OptimizerOptions{other.sparse_optimizer.kind};
  a.sparse_optimizer.state_bits = sparse_optimizer.state_bits;  // the stored layout
  b.sparse_optimizer.state_bits = other.sparse_optimizer.state_bits;
  a.dense_optimizer = OptimizerOptions{dense_optimizer.kind};
  b.dense_optimizer = OptimizerOptions{other.dense_optimizer.kind};
  a.table = b.table = AccessorOptions{};
  return a.FirstDifference(b);
}

std::string ModelSpec::DescribeDifference(const ModelSpec& other, const std::string& key) const {
  auto value_of = [&key](const ModelSpec& spec) -> std::string {
    std::vector<std::pair<std::string, nlohmann::json>> flat;
    Flatten(spec.ToJson(), "", &flat);
    for (const auto& [k, v] : flat) {
      if (k == key) return JsonText(v);
    }
    return "(none)";
  };
  return fmt::format("{} = {} there, {} now", key, value_of(*this), value_of(other));
}

}  // namespace ctrbox
