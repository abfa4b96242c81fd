// ModelOptions' checks of model.slot_dims and the towers (model/ctr_model.h).
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "model/ctr_model.h"

namespace ctrbox {

std::string ModelOptions::SlotDimsError(uint32_t num_slots) const {
  if (slot_dims.empty()) return "";
  std::vector<bool> seen;
  for (const SlotDims& g : slot_dims) {
    if (g.dim == 0 || g.dim > 4096) {
      return fmt::format("model.slot_dims: a dimension must be in [1, 4096], not {}", g.dim);
    }
    if (g.slots.empty()) return "model.slot_dims: a group names no slot";
    for (uint32_t s : g.slots) {
      if (num_slots > 0 && s >= num_slots) {
        return fmt::format("model.slot_dims names slot {} but the data has {} slots (0 to {})", s,
                           num_slots, num_slots - 1);
      }
      if (seen.size() <= s) seen.resize(s + 1);
      if (seen[s]) return fmt::format("model.slot_dims names slot {} twice", s);
      seen[s] = true;
    }
  }
  const size_t tables = TableDims().size();
  if (tables > kMaxTables) {
    return fmt::format("model.slot_dims gives {} dimensions (with model.embedding_dim); at most {}",
                       tables, kMaxTables);
  }
  if (tables > 1 && (fm || dot)) {
    return fmt::format(
        "{} needs one embedding dimension for every slot, but model.slot_dims gives {} (with "
        "model.embedding_dim's, which counts even when slot_dims names every slot: to give "
        "every slot one width, set model.embedding_dim instead)",
        fm ? "model.fm" : "model.dot", tables);
  }
  for (const auto& group : shared_slots) {
    for (uint32_t s : group) {
      if (SlotTable(s) != SlotTable(group.front())) {
        return fmt::format(
            "model.shared_slots groups slots {} and {}, which share their keys, "
            "but model.slot_dims gives them dimensions {} and {}",
            group.front(), s, SlotDim(group.front()), SlotDim(s));
      }
    }
  }
  return "";
}

std::string TowersError(const ModelOptions& m, int64_t num_dense) {
  if (m.towers > 16) return fmt::format("model.towers is at most 16, not {}", m.towers);
  if (!m.tower_mlp.empty()) {
    if (m.tower_mlp.size() != m.towers) {
      return fmt::format("model.tower_mlp has {} shapes but model.towers is {}: one per tower",
                         m.tower_mlp.size(), m.towers);
    }
    for (const auto& shape : m.tower_mlp) {
      if (shape.empty()) return "every shape of model.tower_mlp needs a hidden layer";
    }
  } else if (m.HasTowers() && m.mlp.empty()) {
    return "model.towers needs hidden layers in model.mlp (every tower is an MLP of its widths)";
  }
  if (m.dense_groups.empty()) return "";
  if (!m.HasTowers()) {
    return "model.dense_groups is set but model.towers is not 2 or more (it would be ignored)";
  }
  if (m.dense_groups.size() != m.towers) {
    return fmt::format("model.dense_groups has {} groups but model.towers is {}: one per tower",
                       m.dense_groups.size(), m.towers);
  }
  if (!m.bottom_mlp.empty()) {
    return "model.dense_groups cannot be combined with model.bottom_mlp: the bottom MLP turns "
           "every dense feature into z, so no tower keeps dense columns of its own";
  }
  if (num_dense == 0) {
    return "model.dense_groups is set but the data has no dense features (the groups' columns)";
  }
  std::vector<bool> seen;
  for (const auto& group : m.dense_groups) {
    if (group.empty()) return "a group of model.dense_groups is empty";
    for (uint32_t d : group) {
      if (num_dense != kUnknownDense && d >= num_dense) {
        return fmt::format(
            "model.dense_groups names dense feature {} but the data has {} (0 to {})", d, num_dense,
            num_dense - 1);
      }
      if (seen.size() <= d) seen.resize(d + 1);
      if (seen[d]) return fmt::format("model.dense_groups names dense feature {} twice", d);
      seen[d] = true;
    }
  }
  return "";
}
}  // namespace ctrbox
