#include "cli/config_grammars.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "util/memory_box.h"
#include "util/parse.h"

namespace ctrbox::config {

// ---- typed setters ----

Setter UInt(std::function<void(JobConfig*, uint64_t)> assign, uint64_t min, uint64_t max) {
  return [=](JobConfig* j, std::string_view v, std::string* expect) {
    uint64_t x;
    if (!ParseUint64(v, &x) || x < min || x > max) {
      *expect = fmt::format("an integer in [{}, {}]", min, max);
      return false;
    }
    assign(j, x);
    return true;
  };
}

Setter Float(std::function<void(JobConfig*, float)> assign, double min, double max) {
  return [=](JobConfig* j, std::string_view v, std::string* expect) {
    double x;
    if (!ParseDouble(v, &x) || x < min || x > max) {
      *expect = fmt::format("a number in [{:g}, {:g}]", min, max);
      return false;
    }
    assign(j, static_cast<float>(x));
    return true;
  };
}

Setter Bool(std::function<void(JobConfig*, bool)> assign) {
  return [=](JobConfig* j, std::string_view v, std::string* expect) {
    bool b;
    if (!ParseBool(v, &b)) {
      *expect = "true or false";
      return false;
    }
    assign(j, b);
    return true;
  };
}

Setter Bytes(std::function<void(JobConfig*, uint64_t)> assign, uint64_t min) {
  return [=](JobConfig* j, std::string_view v, std::string* expect) {
    uint64_t b;
    if (!ParseBytes(v, &b) || b < min) {
      *expect = fmt::format("a size of at least {} bytes (e.g. 4MB)", min);
      return false;
    }
    assign(j, b);
    return true;
  };
}

Setter MemoryBudget() {
  return [](JobConfig* j, std::string_view v, std::string* expect) {
    if (!v.ends_with('%')) {
      uint64_t b;
      if (!ParseBytes(v, &b)) {
        *expect =
            "a size (e.g. 512MB) or a share of the job's memory box, its memory cgroup's limit "
            "or the physical memory (e.g. 45%)";
        return false;
      }
      j->storage.memory_budget = b;
      return true;
    }
    double percent;
    if (!ParseDouble(v.substr(0, v.size() - 1), &percent) || !(percent > 0 && percent <= 100)) {
      *expect = "a share of the memory box above 0% and at most 100% (e.g. 45%), or a size";
      return false;
    }
    const MemoryBox box = FindMemoryBox();
    if (box.limit == 0) {
      *expect = "a size: this machine's memory box is not known (no cgroup limit, no sysconf)";
      return false;
    }
    j->storage.memory_budget =
        static_cast<uint64_t>(static_cast<double>(box.limit) * percent / 100);
    return true;
  };
}

Setter Text(std::function<void(JobConfig*, std::string)> assign) {
  return [=](JobConfig* j, std::string_view v, std::string*) {
    assign(j, std::string(v));
    return true;
  };
}

// A comma-separated list (a YAML sequence arrives joined with commas).
Setter List(std::function<void(JobConfig*, std::vector<std::string>)> assign) {
  return [=](JobConfig* j, std::string_view v, std::string*) {
    std::vector<std::string> items;
    for (std::string_view p : Split(v, ',')) {
      p = Trim(p);
      if (!p.empty()) items.emplace_back(p);
    }
    assign(j, std::move(items));
    return true;
  };
}

Setter Format(std::function<void(JobConfig*, DataFormat)> assign, bool allow_shards) {
  return [=](JobConfig* j, std::string_view v, std::string* expect) {
    DataFormat f;
    if (!ParseDataFormat(v, &f) || (!allow_shards && f == DataFormat::kShards)) {
      *expect = allow_shards ? "criteo, libsvm, libfm, libffm, slots or shards"
                             : "criteo, libsvm, libfm, libffm or slots";
      return false;
    }
    assign(j, f);
    return true;
  };
}

Setter Optimizer(std::function<OptimizerOptions*(JobConfig*)> field, bool sparse) {
  return [=](JobConfig* j, std::string_view v, std::string* expect) {
    OptimizerKind kind;
    if (!ParseOptimizerKind(v, &kind) || (!sparse && kind == OptimizerKind::kRowwiseAdagrad)) {
      *expect = sparse ? "adagrad, rowwise_adagrad, sgd or adam" : "adam, adagrad or sgd";
      return false;
    }
    field(j)->kind = kind;
    return true;
  };
}

Setter Device() {
  return [](JobConfig* j, std::string_view v, std::string* expect) {
    if (v != "cpu" && v != "gpu") {
      *expect = "cpu or gpu";
      return false;
    }
    j->gpu = v == "gpu";
    return true;
  };
}

Setter Epochs() {
  return [](JobConfig* j, std::string_view v, std::string* expect) {
    if (v == "auto") {
      j->train.epochs_auto = true;
      return true;
    }
    uint64_t n = 0;
    if (!ParseUint64(v, &n) || n < 1 || n > 100000) {
      *expect =
          "a number of epochs from 1 to 100000, or auto (until the validation logloss "
          "stops improving)";
      return false;
    }
    j->train.epochs = static_cast<uint32_t>(n);
    j->train.epochs_auto = false;
    return true;
  };
}

Setter DiskProbe() {
  return [](JobConfig* j, std::string_view v, std::string* expect) {
    double s = 0;
    if (v == "auto") {
      j->storage.disk_probe_seconds = -1;
    } else if (v == "off") {
      j->storage.disk_probe_seconds = 0;
    } else if (ParseDouble(v, &s) && s >= 0.05 && s <= 60) {
      j->storage.disk_probe_seconds = s;
    } else {
      *expect = "auto, off, or seconds from 0.05 to 60";
      return false;
    }
    return true;
  };
}

Setter MappedReadsMode() {
  return [](JobConfig* j, std::string_view v, std::string* expect) {
    bool b = false;
    if (v == "auto") {
      j->storage.ssd.mapped_reads = ctrbox::MappedReads::kAuto;
    } else if (ParseBool(v, &b)) {
      j->storage.ssd.mapped_reads = b ? ctrbox::MappedReads::kOn : ctrbox::MappedReads::kOff;
    } else {
      *expect = "true, false or auto";
      return false;
    }
    return true;
  };
}

Setter Gemm() {
  return [](JobConfig* j, std::string_view v, std::string* expect) {
    if (!ParseGemmPrecision(v, &j->gpu_options.precision)) {
      *expect = "fp32, tf32 or bf16";
      return false;
    }
    return true;
  };
}

Setter Scatter() {
  return [](JobConfig* j, std::string_view v, std::string* expect) {
    if (!ParseScatterMode(v, &j->gpu_options.scatter)) {
      *expect = "segment or atomic";
      return false;
    }
    return true;
  };
}

Setter OnLate() {
  return [](JobConfig* j, std::string_view v, std::string* expect) {
    if (!ParseLateRule(v, &j->stream.on_late)) {
      *expect = "skip, fail or wait";
      return false;
    }
    return true;
  };
}

Setter SparseUpdates() {
  return [](JobConfig* j, std::string_view v, std::string* expect) {
    if (v != "owner" && v != "replicated") {
      *expect = "owner or replicated";
      return false;
    }
    j->dist.owner_updates = v == "owner";
    return true;
  };
}

Setter SlotFromSetter() {
  return [](JobConfig* j, std::string_view v, std::string* expect) {
    if (!ParseSlotFrom(v, &j->data.slot_from)) {
      *expect = "one or position";
      return false;
    }
    return true;
  };
}

Setter Rounding() {
  return [](JobConfig* j, std::string_view v, std::string* expect) {
    if (!ParseQuantRounding(v, &j->spec.model.quant.rounding)) {
      *expect = "stochastic or nearest";
      return false;
    }
    return true;
  };
}

Setter Widths(std::vector<uint32_t> ModelOptions::*field) {
  return [field](JobConfig* j, std::string_view v, std::string* expect) {
    std::vector<uint32_t> widths;  // empty: no hidden layer (a linear model of the inputs)
    if (!Trim(v).empty()) {
      for (std::string_view p : Split(v, ',')) {
        uint64_t w;
        if (!ParseUint64(Trim(p), &w) || w == 0 || w > 65536) {
          *expect = "comma-separated layer widths in [1, 65536], e.g. 512,256,128";
          return false;
        }
        widths.push_back(static_cast<uint32_t>(w));
      }
    }
    j->spec.model.*field = std::move(widths);
    return true;
  };
}

// Groups of numbers: `v`'s groups split by ',', a group's items by `sep`, each item through
// `item` (which appends its numbers to the group). False when an item is malformed.
bool ParseGroups(std::string_view v, char sep,
                 bool (*item)(std::string_view, std::vector<uint32_t>*),
                 std::vector<std::vector<uint32_t>>* groups) {
  groups->clear();
  if (Trim(v).empty()) return true;
  for (std::string_view g : Split(v, ',')) {
    std::vector<uint32_t> group;
    for (std::string_view p : Split(Trim(g), sep)) {
      if (!item(Trim(p), &group)) return false;
    }
    groups->push_back(std::move(group));
  }
  return true;
}

// An index "7" or a range "3-9" (at most `max`), appended to *out; false when malformed.
// A range "a-b" or one index into *out (appended), each below max.
static bool ParseRange(std::string_view p, uint64_t max, std::vector<uint32_t>* out) {
  const size_t dash = p.find('-');
  uint64_t a, b;
  if (dash == std::string_view::npos) {
    if (!ParseUint64(p, &a)) return false;
    b = a;
  } else if (!ParseUint64(Trim(p.substr(0, dash)), &a) ||
             !ParseUint64(Trim(p.substr(dash + 1)), &b) || b < a) {
    return false;
  }
  if (b > max) return false;
  for (uint64_t i = a; i <= b; ++i) out->push_back(static_cast<uint32_t>(i));
  return true;
}

// model.shared_slots: groups of slot indices joined by '+', the groups by ',': "0+5,3+7".
Setter SlotGroups() {
  return [](JobConfig* j, std::string_view v, std::string* expect) {
    std::vector<std::vector<uint32_t>> groups;
    *expect = "groups of slot indices joined by '+', the groups by ',', e.g. 0+5,3+7+9";
    auto slot = [](std::string_view p, std::vector<uint32_t>* group) {
      uint64_t s;
      if (!ParseUint64(p, &s) || s > 1000000) return false;
      group->push_back(static_cast<uint32_t>(s));
      return true;
    };
    if (!ParseGroups(v, '+', slot, &groups)) return false;
    ModelOptions m;
    m.shared_slots = groups;
    if (std::string e = m.SharedSlotsError(0); !e.empty()) {
      *expect = "slot groups (" + e + ")";
      return false;
    }
    j->spec.model.shared_slots = std::move(groups);
    return true;
  };
}

// model.dense_groups: groups of dense feature indices or ranges joined by '+', the groups by
// ',': "0-5,6+8+9-12".
Setter DenseGroups() {
  return [](JobConfig* j, std::string_view v, std::string* expect) {
    *expect =
        "groups of dense feature indices or ranges joined by '+', the groups by ',', e.g. "
        "0-5,6+8+9-12";
    auto range = [](std::string_view p, std::vector<uint32_t>* group) {
      return ParseRange(p, 100000, group);
    };
    std::vector<std::vector<uint32_t>> groups;
    if (!ParseGroups(v, '+', range, &groups)) return false;
    j->spec.model.dense_groups = std::move(groups);
    return true;
  };
}

// model.slot_dims: groups "slots:dim" separated by ',', a group's slots indices or ranges
// joined by '+': "0-9:32,10+12-25:8".
Setter SlotDimGroups() {
  return [](JobConfig* j, std::string_view v, std::string* expect) {
    *expect =
        "groups of slots and their embedding dimension, slots:dim, separated by ','; slots are "
        "indices or ranges joined by '+', e.g. 0-9:32,10+12-25:8";
    std::vector<SlotDims> dims;
    if (!Trim(v).empty()) {
      for (std::string_view g : Split(v, ',')) {
        g = Trim(g);
        const size_t colon = g.rfind(':');
        uint64_t dim;
        if (colon == std::string_view::npos || !ParseUint64(Trim(g.substr(colon + 1)), &dim) ||
            dim == 0 || dim > 4096) {
          return false;
        }
        SlotDims d;
        d.dim = static_cast<uint32_t>(dim);
        for (std::string_view p : Split(Trim(g.substr(0, colon)), '+')) {
          if (!ParseRange(Trim(p), 1000000, &d.slots)) return false;
        }
        dims.push_back(std::move(d));
      }
    }
    ModelOptions m;
    m.slot_dims = dims;
    m.embedding_dim = j->spec.model.embedding_dim;
    if (std::string e = m.SlotDimsError(0); !e.empty()) {
      *expect = "slot dimensions (" + e + ")";
      return false;
    }
    j->spec.model.slot_dims = std::move(dims);
    return true;
  };
}

// model.tower_mlp: widths joined by '-' (or '+', as a YAML list of lists joins them), the
// towers' shapes by ',': "512-256,256-128".
Setter TowerShapes() {
  return [](JobConfig* j, std::string_view v, std::string* expect) {
    *expect =
        "hidden widths in [1, 65536] joined by '-', one shape per tower, the shapes by ',', "
        "e.g. 512-256-128,256-128";
    std::string text(v);
    std::replace(text.begin(), text.end(), '+', '-');
    auto width = [](std::string_view p, std::vector<uint32_t>* shape) {
      uint64_t w;
      if (!ParseUint64(p, &w) || w == 0 || w > 65536) return false;
      shape->push_back(static_cast<uint32_t>(w));
      return true;
    };
    std::vector<std::vector<uint32_t>> shapes;
    if (!ParseGroups(text, '-', width, &shapes)) return false;
    j->spec.model.tower_mlp = std::move(shapes);
    return true;
  };
}

}  // namespace ctrbox::config
