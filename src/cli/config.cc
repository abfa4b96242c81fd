#include "cli/config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>

#include "feature/graph.h"
#include "util/parse.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

using Setter = std::function<bool(JobConfig*, std::string_view, std::string*)>;

struct Key {
  const char* name;
  const char* default_text;
  const char* help;
  Setter set;  // returns false and fills the expectation on a bad value
};

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
      *expect = allow_shards ? "criteo, libsvm, libfm, slots or shards"
                             : "criteo, libsvm, libfm or slots";
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

Setter Rounding() {
  return [](JobConfig* j, std::string_view v, std::string* expect) {
    if (!ParseQuantRounding(v, &j->spec.model.quant.rounding)) {
      *expect = "stochastic or nearest";
      return false;
    }
    return true;
  };
}

Setter Widths(std::vector<uint32_t> ModelOptions::*field = &ModelOptions::mlp) {
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
bool ParseRange(std::string_view p, uint64_t max, std::vector<uint32_t>* out) {
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

constexpr uint64_t kMaxU32 = std::numeric_limits<uint32_t>::max();

const std::vector<Key>& Keys() {
  static const std::vector<Key> keys = {
      // data
      {"data.paths", "(none: generated data)", "input files or directories (also --data)",
       List([](JobConfig* j, auto v) { j->data.paths = std::move(v); })},
      {"data.command", "(none)",
       "a shell command whose standard output is the (text) training data, instead of data.paths",
       Text([](JobConfig* j, std::string v) { j->data.command = std::move(v); })},
      {"data.format", "criteo", "criteo | libsvm | libfm | slots | shards (also --format)",
       Format([](JobConfig* j, DataFormat f) { j->data.format = f; }, true)},
      {"data.num_slots", "0", "slots per row for the libfm and slots formats (required there)",
       UInt([](JobConfig* j, uint64_t v) { j->data.num_slots = static_cast<uint32_t>(v); }, 1,
            100000)},
      {"data.num_dense", "0", "dense values per row for the slots format",
       UInt([](JobConfig* j, uint64_t v) { j->data.num_dense = static_cast<uint32_t>(v); }, 0,
            100000)},
      {"data.eval_paths", "(none)", "train: data to evaluate on after training (also --eval-data)",
       List([](JobConfig* j, auto v) { j->eval_paths = std::move(v); })},
      {"data.max_error_rate", "0.01", "the job stops once malformed records exceed this fraction",
       Float([](JobConfig* j, float v) { j->data.bad_input.max_error_rate = v; }, 0, 1)},
      {"data.max_line_bytes", "1MB", "longer lines are malformed (overlong_line)",
       Bytes([](JobConfig* j, uint64_t v) { j->data.max_line_bytes = v; }, 64)},
      {"data.chunk_bytes", "4MB", "text is read and parsed in chunks of this size",
       Bytes([](JobConfig* j, uint64_t v) { j->data.chunk_bytes = v; }, 4096)},
      {"data.reader_threads", "number of CPUs",
       "threads parsing (or decoding, or generating) input",
       UInt([](JobConfig* j, uint64_t v) { j->data.threads = static_cast<int>(v); }, 1, 256)},
      {"data.gen.rows", "500000", "generated training rows (when no data paths are given)",
       UInt([](JobConfig* j, uint64_t v) { j->generated.rows = v; }, 1, uint64_t{1} << 40)},
      {"data.gen.test_rows", "100000", "generated held-out rows (seed data.gen.seed + 1)",
       UInt([](JobConfig* j, uint64_t v) { j->generated.test_rows = v; }, 1, uint64_t{1} << 40)},
      {"data.gen.seed", "11", "seed of the generated training rows",
       UInt([](JobConfig* j, uint64_t v) { j->generated.seed = v; }, 0, ~uint64_t{0} - 1)},
      {"data.gen.vocab_scale", "1", "multiply every generated slot's vocabulary (scale tests)",
       Float([](JobConfig* j, float v) { j->generated.vocab_scale = v; }, 1e-3, 1e6)},
      {"data.gen.zipf", "1.15",
       "Zipf exponent of the generated ids (> 1; flatter: more distinct keys)",
       Float([](JobConfig* j, float v) { j->generated.zipf = v; }, 1.0001, 10)},
      {"data.gen.format", "criteo", "layout of the generated rows: criteo | slots | libsvm | libfm",
       Format([](JobConfig* j, DataFormat f) { j->generated.layout = f; }, false)},
      // model
      {"model.embedding_dim", "16", "embedding dimension of every slot",
       UInt(
           [](JobConfig* j, uint64_t v) { j->spec.model.embedding_dim = static_cast<uint32_t>(v); },
           1, 1024)},
      {"model.mlp", "512,256,128", "hidden layer widths of the MLP tower (ReLU)", Widths()},
      {"model.wide", "false", "add the wide (LR) part: the sum of the keys' wide weights",
       Bool([](JobConfig* j, bool v) { j->spec.model.wide = v; })},
      {"model.dense_log1p", "true", "dense features enter as log(1 + max(x, 0))",
       Bool([](JobConfig* j, bool v) { j->spec.model.dense_log1p = v; })},
      // interactions, composable with the MLP and the wide part (docs/model.md, "Architectures")
      {"model.fm", "false",
       "add DeepFM's second-order term (pairwise dot products of the slots' embeddings, summed) "
       "to the logit",
       Bool([](JobConfig* j, bool v) { j->spec.model.fm = v; })},
      {"model.cross_layers", "0",
       "DCN-v2 cross layers x_{l+1} = x0 * (x_l W_l + b_l) + x_l between the input and the MLP",
       UInt([](JobConfig* j, uint64_t v) { j->spec.model.cross_layers = static_cast<uint32_t>(v); },
            0, 16)},
      {"model.cross_rank", "0",
       "rank r of the cross layers' W_l = U_l V_l^T (DCN-v2's low-rank form; 0: full W0 x W0)",
       UInt([](JobConfig* j, uint64_t v) { j->spec.model.cross_rank = static_cast<uint32_t>(v); },
            0, 4096)},
      {"model.cross_experts", "0",
       "DCN-v2's mixture of low-rank experts: this many experts per cross layer, each "
       "x0 * (relu(relu(x_l V) C) U + b) of rank model.cross_rank, mixed by a softmax gate of x_l "
       "(0: one W_l per layer)",
       UInt(
           [](JobConfig* j, uint64_t v) { j->spec.model.cross_experts = static_cast<uint32_t>(v); },
           0, 64)},
      {"model.bottom_mlp", "",
       "DLRM's bottom MLP: ReLU layer widths turning the dense features into z, the last as wide "
       "as model.embedding_dim; z replaces them in the input and joins model.dot's products",
       Widths(&ModelOptions::bottom_mlp)},
      {"model.shared_slots", "",
       "groups of slots that share one embedding table (equal raw ids in them are one key): "
       "slot indices joined by '+', groups by ',', e.g. 0+5,3+7",
       SlotGroups()},
      {"model.slot_dims", "",
       "per-slot embedding dimensions: slots:dim groups separated by ',' (slots as indices or "
       "ranges joined by '+'), e.g. 0-9:32,10-25:8; other slots keep model.embedding_dim, and "
       "the slots of one dimension form one table",
       SlotDimGroups()},
      {"model.towers", "0",
       "AIBox's joint learning: this many MLP towers of model.mlp's widths instead of one, each "
       "reading the input plus the first and last hidden layers of the towers before it; one "
       "output unit over their last hidden layers (0 or 1: the single MLP)",
       UInt([](JobConfig* j, uint64_t v) { j->spec.model.towers = static_cast<uint32_t>(v); }, 0,
            16)},
      {"model.tower_mlp", "",
       "with model.towers: each tower's own hidden widths instead of model.mlp's, one shape per "
       "tower: widths joined by '-' (or '+'), shapes by ',', e.g. 512-256-128,256-128",
       TowerShapes()},
      {"model.dense_groups", "",
       "with model.towers: each tower's own dense features, one group per tower (the others "
       "feed every tower): indices or ranges joined by '+', groups by ',', e.g. 0-5,6-12",
       DenseGroups()},
      {"model.dot", "false",
       "append DLRM's pairwise dot products of the slots' embeddings to the MLP's input",
       Bool([](JobConfig* j, bool v) { j->spec.model.dot = v; })},
      // lossy hashing of the keys, the baseline lossless ids are measured against
      {"features.hashing.method", "none",
       "hash keys into a smaller space: none (lossless) | modulo (K keys) | op_osrp (2K keys)",
       [](JobConfig* j, std::string_view v, std::string* expect) {
         *expect = "none, modulo or op_osrp";
         return ParseHashingMethod(v, &j->spec.model.hashing.method);
       }},
      {"features.hashing.bins", "0", "K, the bins of features.hashing (required with a method)",
       UInt([](JobConfig* j, uint64_t v) { j->spec.model.hashing.bins = v; }, 1,
            uint64_t{1} << 61)},
      // optimizers
      {"optimizer.sparse.type", "adagrad",
       "sparse optimizer: adagrad | rowwise_adagrad (one state value per row: smaller rows) | "
       "sgd | adam",
       Optimizer([](JobConfig* j) { return &j->spec.sparse_optimizer; }, true)},
      {"optimizer.sparse.state_bits", "0",
       "stored bits of each embedding optimizer-state value: 0 (float32) or 16 (bfloat16, "
       "rounded stochastically after every update; adagrad and rowwise_adagrad; "
       "docs/quantization.md)",
       UInt([](JobConfig* j,
               uint64_t v) { j->spec.sparse_optimizer.state_bits = static_cast<uint32_t>(v); },
            0, 16)},
      {"optimizer.sparse.lr", "0.05", "sparse learning rate",
       Float([](JobConfig* j, float v) { j->spec.sparse_optimizer.lr = v; }, 0, 1e6)},
      {"optimizer.sparse.epsilon", "1e-10 (adagrad, rowwise_adagrad), 1e-8 (adam)",
       "sparse optimizer epsilon",
       Float([](JobConfig* j, float v) { j->spec.sparse_optimizer.epsilon = v; }, 0, 1)},
      {"optimizer.sparse.beta1", "0.9", "sparse adam beta1",
       Float([](JobConfig* j, float v) { j->spec.sparse_optimizer.beta1 = v; }, 0, 0.999999)},
      {"optimizer.sparse.beta2", "0.999", "sparse adam beta2",
       Float([](JobConfig* j, float v) { j->spec.sparse_optimizer.beta2 = v; }, 0, 0.999999)},
      {"optimizer.dense.type", "adam", "dense optimizer: adam | adagrad | sgd",
       Optimizer([](JobConfig* j) { return &j->spec.dense_optimizer; }, false)},
      {"optimizer.dense.lr", "0.001", "dense learning rate",
       Float([](JobConfig* j, float v) { j->spec.dense_optimizer.lr = v; }, 0, 1e6)},
      {"optimizer.dense.epsilon", "1e-8 (adam), 1e-10 (adagrad)", "dense optimizer epsilon",
       Float([](JobConfig* j, float v) { j->spec.dense_optimizer.epsilon = v; }, 0, 1)},
      {"optimizer.dense.beta1", "0.9", "dense adam beta1",
       Float([](JobConfig* j, float v) { j->spec.dense_optimizer.beta1 = v; }, 0, 0.999999)},
      {"optimizer.dense.beta2", "0.999", "dense adam beta2",
       Float([](JobConfig* j, float v) { j->spec.dense_optimizer.beta2 = v; }, 0, 0.999999)},
      // table
      {"table.shard_bits", "6", "the in-memory table has 2^shard_bits shards",
       UInt([](JobConfig* j, uint64_t v) { j->storage.shard_bits = static_cast<uint32_t>(v); }, 0,
            12)},
      {"table.embedx_threshold", "0",
       "create a key's embedding once its show/click score reaches this",
       Float([](JobConfig* j, float v) { j->spec.table.embedx_threshold = v; }, 0, 1e9)},
      {"table.nonclk_coeff", "0.1", "score = (show - click) * nonclk_coeff + click * click_coeff",
       Float([](JobConfig* j, float v) { j->spec.table.nonclk_coeff = v; }, 0, 1e6)},
      {"table.click_coeff", "1", "see table.nonclk_coeff",
       Float([](JobConfig* j, float v) { j->spec.table.click_coeff = v; }, 0, 1e6)},
      {"table.init_range", "0.01", "new embeddings are uniform in [-init_range, init_range]",
       Float([](JobConfig* j, float v) { j->spec.table.init_range = v; }, 0, 100)},
      {"table.decay", "0.98", "show and click are multiplied by this at each shrink",
       Float([](JobConfig* j, float v) { j->spec.table.decay = v; }, 0, 1)},
      {"table.delete_threshold", "0", "shrink deletes keys whose score falls below this",
       Float([](JobConfig* j, float v) { j->spec.table.delete_threshold = v; }, 0, 1e9)},
      {"table.delete_after_unseen_passes", "0",
       "shrink deletes keys unseen for more passes (0: never)",
       UInt([](JobConfig* j,
               uint64_t v) { j->spec.table.delete_after_unseen_passes = static_cast<uint32_t>(v); },
            0, 65535)},
      {"table.shrink_every_passes", "0",
       "run shrink after every N passes of pipeline.pass_examples (0: never)",
       UInt([](JobConfig* j,
               uint64_t v) { j->train.shrink_every_passes = static_cast<uint32_t>(v); },
            0, kMaxU32)},
      // storage (docs/storage.md)
      {"storage.ssd_dir", "(none: all rows in memory)",
       "directory of the SSD parameter files; with it the table keeps storage.memory_budget in "
       "memory",
       Text([](JobConfig* j, std::string v) { j->storage.ssd.dir = std::move(v); })},
      {"storage.memory_budget", "0 (unlimited; required with storage.ssd_dir)",
       "bytes of sparse-table memory (cache, group index, Bloom filters), e.g. 512MB; needs "
       "storage.ssd_dir",
       Bytes([](JobConfig* j, uint64_t v) { j->storage.memory_budget = v; }, 0)},
      {"storage.keep_store", "false",
       "train: close the SSD store cleanly at the end (for inspect --store) instead of deleting it",
       Bool([](JobConfig* j, bool v) { j->storage.keep_store = v; })},
      {"storage.disk_budget", "0 (unlimited)", "bytes the parameter files may take",
       Bytes([](JobConfig* j, uint64_t v) { j->storage.ssd.disk_budget = v; }, 0)},
      {"storage.group_bits", "log2(memory_budget / 960)",
       "2^group_bits key groups (one SSD record and one index entry each)",
       UInt([](JobConfig* j, uint64_t v) { j->storage.ssd.group_bits = static_cast<uint32_t>(v); },
            1, 30)},
      {"storage.file_bytes", "64MB", "size at which a parameter file is sealed",
       Bytes([](JobConfig* j, uint64_t v) { j->storage.ssd.file_bytes = v; }, 4096)},
      {"storage.quant.bits", "0 (float32)",
       "store embeddings as b-bit integer codes (2..16; 8 and 16 are the paper's; "
       "docs/quantization.md); every sparse update is rounded onto the grid",
       UInt([](JobConfig* j, uint64_t v) { j->spec.model.quant.bits = static_cast<uint32_t>(v); },
            0, 16)},
      {"storage.quant.range", "1",
       "w: codes cover [-w, w] in 2^bits - 1 steps; values outside "
       "are clipped",
       Float([](JobConfig* j, float v) { j->spec.model.quant.range = v; }, 1e-6, 1e6)},
      {"storage.quant.rounding", "stochastic",
       "stochastic (StocQ: floor(x/step + u), u uniform, unbiased) | nearest (FixQ)", Rounding()},
      {"storage.io_threads", "4", "parallel record reads per pull",
       UInt([](JobConfig* j, uint64_t v) { j->storage.io_threads = static_cast<int>(v); }, 1, 256)},
      {"storage.evict_threads", "2", "slots the background worker writes back in parallel",
       UInt([](JobConfig* j, uint64_t v) { j->storage.evict_threads = static_cast<int>(v); }, 1,
            64)},
      {"storage.bloom_share", "0.1",
       "the share of storage.memory_budget the SSD files' Bloom filters may take (a new file's "
       "filter gets fewer bits per key, or none, to stay within)",
       Float([](JobConfig* j, float v) { j->storage.bloom_share = v; }, 0.001, 0.5)},
      {"storage.bloom_bits_per_key", "8", "Bloom filter bits per key (8: ~2 % false positives)",
       UInt([](JobConfig* j,
               uint64_t v) { j->storage.ssd.bloom_bits_per_key = static_cast<int>(v); },
            1, 32)},
      {"storage.delta_share", "0.2",
       "a group's delta record is merged into its base once it would hold more than this share "
       "of the base's rows (lower: fewer rows carried per write-back, more merges)",
       Float([](JobConfig* j, float v) { j->storage.delta_share = v; }, 0.01, 4)},
      {"storage.evict_start", "0.9", "eviction starts above this share of the memory budget",
       Float([](JobConfig* j, float v) { j->storage.evict_start = v; }, 0.05, 1)},
      {"storage.evict_stop", "0.8", "... and stops below this share",
       Float([](JobConfig* j, float v) { j->storage.evict_stop = v; }, 0.01, 1)},
      {"storage.compact_stale", "0.5", "compact files whose stale share exceeds this",
       Float([](JobConfig* j, float v) { j->storage.compact_stale = v; }, 0.01, 0.99)},
      // checkpoints (docs/checkpoints.md)
      {"ckpt.dir", "(none: no checkpoints)",
       "directory of the train job's checkpoints; `train --resume` continues from the newest",
       Text([](JobConfig* j, std::string v) { j->ckpt.dir = std::move(v); })},
      {"ckpt.every_passes", "1",
       "a checkpoint after every this many passes of pipeline.pass_examples (0: only at the end)",
       UInt([](JobConfig* j, uint64_t v) { j->ckpt.every_passes = static_cast<uint32_t>(v); }, 0,
            1u << 30)},
      {"ckpt.base_every", "8",
       "at least every this many checkpoints is a base (all rows); the others are deltas",
       UInt([](JobConfig* j, uint64_t v) { j->ckpt.base_every = static_cast<uint32_t>(v); }, 1,
            1u << 30)},
      {"ckpt.keep", "2", "the newest checkpoints kept (with the base and deltas they need)",
       UInt([](JobConfig* j, uint64_t v) { j->ckpt.keep = static_cast<uint32_t>(v); }, 1,
            1u << 30)},
      // train
      {"train.threads", "number of CPUs", "trainer threads",
       UInt([](JobConfig* j, uint64_t v) { j->train.threads = static_cast<int>(v); }, 1, 1024)},
      {"train.seed", "1", "seed of the MLP and embedding initialisation",
       UInt([](JobConfig* j, uint64_t v) { j->train.seed = v; }, 0, ~uint64_t{0} - 1)},
      {"train.deterministic", "false",
       "require bit-identical runs; the CPU trainer always is, device: gpu needs "
       "gpu.scatter=segment "
       "(docs/model.md)",
       Bool([](JobConfig* j, bool v) { j->train.deterministic = v; })},
      {"train.batch_size", "2048", "examples per minibatch",
       UInt([](JobConfig* j, uint64_t v) { j->train.batch_size = static_cast<uint32_t>(v); }, 1,
            1 << 20)},
      {"train.epochs", "1", "passes over the data (1: online learning, each example seen once)",
       UInt([](JobConfig* j, uint64_t v) { j->train.epochs = static_cast<uint32_t>(v); }, 1,
            100000)},
      {"train.metrics_path", "<model-dir>/metrics.jsonl", "JSON-lines metrics log",
       Text([](JobConfig* j, std::string v) { j->train.metrics_path = std::move(v); })},
      {"train.progress_seconds", "2", "seconds between progress updates",
       Float([](JobConfig* j, float v) { j->train.progress_seconds = v; }, 0, 1e9)},
      {"train.dry_run", "false",
       "run every stage as training would but compute nothing (no gradients, no model saved): "
       "examples_per_s is the input pipeline's feed rate",
       Bool([](JobConfig* j, bool v) { j->train.dry_run = v; })},
      // device
      {"device", "cpu", "where the train stage runs: cpu | gpu (docs/gpu.md)", Device()},
      {"gpu.count", "1",
       "GPUs the pass's working table is partitioned over (key mod count); more than the "
       "machine has share GPUs round robin",
       UInt([](JobConfig* j, uint64_t v) { j->gpu_options.gpus = static_cast<uint32_t>(v); }, 1,
            1024)},
      {"gpu.gemm", "fp32", "MLP GEMM precision: fp32 | tf32 | bf16 (tensor cores, fp32 sums)",
       Gemm()},
      {"gpu.scatter", "segment",
       "per-key gradient sums: segment (fixed order, deterministic) | atomic (float atomics)",
       Scatter()},
      {"gpu.emulate", "false",
       "run the GPU train step on CPU threads (no GPU needed; slow; for tests and debugging)",
       Bool([](JobConfig* j, bool v) { j->gpu_options.emulate = v; })},
      {"gpu.pass_memory", "0 (auto: half of GPU 0's memory; no limit with gpu.emulate)",
       "GPU memory the staged passes may take together (queue_depth + 2 of them): the read "
       "stage closes a pass before its bytes pass its share (docs/gpu.md, \"Pass sizing\")",
       Bytes([](JobConfig* j, uint64_t v) { j->gpu_options.pass_memory = v; }, 0)},
      // pipeline
      {"pipeline.pass_examples", "262144",
       "examples per pass (the unit of pull / train / push, shrinking and checkpoints); with "
       "pass sizing by memory, cut further between minibatches",
       UInt([](JobConfig* j, uint64_t v) { j->pipeline.pass_examples = v; }, 1, uint64_t{1} << 32)},
      {"pipeline.pass_memory", "0 (auto: storage.memory_budget / 4, at least 64MB)",
       "with passes sized by memory: the bytes the passes alive at once (3 x queue_depth + 4) "
       "may hold in examples, working sets and working tables; a pass closes before it would "
       "pass it (docs/storage.md, \"Pass memory\")",
       Bytes([](JobConfig* j, uint64_t v) { j->pipeline.pass_memory = v; }, 0)},
      {"pipeline.size_by_memory", "true",
       "with storage.memory_budget: close a pass before the rows that the passes in flight pin "
       "together would exceed 60 % of the budget (docs/storage.md, \"Pass sizing\")",
       Bool([](JobConfig* j, bool v) { j->pipeline.size_by_memory = v; })},
      {"dist.timeout_seconds", "600",
       "a job of several ranks: an exchange waiting this long for the other ranks stops the "
       "job, naming the wait (docs/distributed.md)",
       Float([](JobConfig* j, float v) { j->dist.timeout_seconds = v; }, 0.1, 1e7)},
      {"dist.sparse_updates", "owner",
       "a job of several ranks: owner (a key's owner applies its updates and sends each rank "
       "the changed rows its next minibatch uses) | replicated (every rank holding a key "
       "applies every update of it; not with device: gpu); the same model, owner sends fewer "
       "bytes as ranks grow (docs/distributed.md, \"Owner updates\")",
       SparseUpdates()},
      {"pipeline.enabled", "true",
       "overlap read, pull, train and push on consecutive passes (false: one after the other; "
       "docs/pipeline.md)",
       Bool([](JobConfig* j, bool v) { j->pipeline.enabled = v; })},
      {"pipeline.queue_depth", "1", "passes each queue between two stages holds",
       UInt([](JobConfig* j, uint64_t v) { j->pipeline.queue_depth = static_cast<uint32_t>(v); }, 1,
            64)},
      {"pipeline.read_threads", "number of CPUs",
       "threads of the read stage (working sets and the pass table; data.reader_threads decode)",
       UInt([](JobConfig* j, uint64_t v) { j->pipeline.read_threads = static_cast<int>(v); }, 1,
            256)},
      {"pipeline.pull_threads", "number of CPUs", "threads of the pull stage",
       UInt([](JobConfig* j, uint64_t v) { j->pipeline.pull_threads = static_cast<int>(v); }, 1,
            256)},
      {"pipeline.push_threads", "number of CPUs", "threads of the push stage",
       UInt([](JobConfig* j, uint64_t v) { j->pipeline.push_threads = static_cast<int>(v); }, 1,
            256)},
  };
  return keys;
}

// Flattens a YAML node into (dotted key, value, line) triples.
Status Flatten(const YAML::Node& node, const std::string& prefix, const std::string& path,
               std::vector<std::tuple<std::string, std::string, int>>* out) {
  const int line = node.Mark().line + 1;
  if (node.IsMap()) {
    std::map<std::string, int> seen;  // key -> its line: a key given twice is refused
    for (const auto& kv : node) {
      const std::string k = kv.first.as<std::string>();
      const std::string full = prefix.empty() ? k : prefix + "." + k;
      const int key_line = kv.first.Mark().line + 1;
      auto [it, added] = seen.emplace(k, key_line);
      if (!added) {
        return InvalidArgumentError(fmt::format("{}:{}: {} is given twice (first on line {})", path,
                                                key_line, full, it->second));
      }
      if (kv.second.IsNull()) {
        return InvalidArgumentError(
            fmt::format("{}:{}: {} has no value (write one, or leave the key out for its default)",
                        path, key_line, full));
      }
      RETURN_IF_ERROR(Flatten(kv.second, full, path, out));
    }
  } else if (node.IsSequence()) {
    // Items joined by ','; an item that is itself a list of values (a group of
    // model.shared_slots or model.dense_groups: [[0, 5], [3, 7]]) by '+'.
    std::string joined;
    for (const auto& item : node) {
      std::string text;
      if (item.IsSequence()) {
        bool scalars = true;
        for (const auto& member : item) scalars = scalars && member.IsScalar();
        for (const auto& member : item) {
          if (scalars) text += (text.empty() ? "" : "+") + member.as<std::string>();
        }
      } else if (item.IsScalar()) {
        text = item.as<std::string>();
      }
      if (text.empty()) {
        return InvalidArgumentError(fmt::format(
            "{}:{}: {}: expected a list of values (or of groups of values)", path, line, prefix));
      }
      if (!joined.empty()) joined += ",";
      joined += text;
    }
    out->emplace_back(prefix, joined, line);
  } else if (node.IsScalar()) {
    out->emplace_back(prefix, node.as<std::string>(), line);
  } else if (!node.IsNull() || prefix.empty()) {
    if (!prefix.empty()) out->emplace_back(prefix, "", line);
  }
  return Status::OK();
}

}  // namespace

JobConfigBuilder::JobConfigBuilder() {
  // Threads follow the machine: every stage's pool gets the CPUs (with device: gpu the host's
  // cores belong to the stages that feed it).
  job_.train.threads = NumCpus();
  job_.data.threads = NumCpus();
  job_.pipeline.read_threads = NumCpus();
  job_.pipeline.pull_threads = NumCpus();
  job_.pipeline.push_threads = NumCpus();
  job_.spec.dense_optimizer.kind = OptimizerKind::kAdam;
  job_.spec.dense_optimizer.lr = 1e-3f;
}

Status JobConfigBuilder::Set(std::string_view key, std::string_view value,
                             std::string_view origin) {
  for (const Key& k : Keys()) {
    if (key != k.name) continue;
    std::string expect;
    if (!k.set(&job_, Trim(value), &expect)) {
      return InvalidArgumentError(
          fmt::format("{}: bad value '{}' for {}: expected {}", origin, value, key, expect));
    }
    set_keys_.insert(std::string(key));
    return Status::OK();
  }
  return InvalidArgumentError(
      fmt::format("{}: unknown configuration key '{}' (`ctrbox config` lists them)", origin, key));
}

StatusOr<JobConfig> BuildJobConfig(const JobSources& sources) {
  JobConfigBuilder b;
  if (!sources.config_path.empty()) RETURN_IF_ERROR(b.LoadYaml(sources.config_path));
  if (!sources.features_text.empty()) {
    try {
      ASSIGN_OR_RETURN(b.job().features,
                       ParseFeatures(YAML::Load(sources.features_text), sources.features_origin));
    } catch (const YAML::Exception& e) {
      return InvalidArgumentError(
          fmt::format("{}:{}: features: {}", sources.features_origin, e.mark.line + 1, e.msg));
    }
  }
  for (const std::string& s : sources.sets) RETURN_IF_ERROR(b.ApplySet(s));
  for (const JobSources::Entry& e : sources.keys) RETURN_IF_ERROR(b.Set(e.key, e.value, e.origin));
  if (!sources.format.empty()) RETURN_IF_ERROR(b.Set("data.format", sources.format, "--format"));
  if (!sources.data.empty()) b.job().data.paths = sources.data;
  if (!sources.eval_data.empty()) b.job().eval_paths = sources.eval_data;
  if (!sources.model_dir.empty()) b.job().model_dir = sources.model_dir;
  b.job().fresh = sources.fresh;
  b.job().resume = sources.resume;
  return b.Finish();
}

Status JobConfigBuilder::ApplySet(std::string_view assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return InvalidArgumentError(fmt::format("--set {}: expected key=value", assignment));
  }
  return Set(Trim(assignment.substr(0, eq)), assignment.substr(eq + 1), "--set");
}

Status JobConfigBuilder::LoadYaml(const std::string& path) {
  // Read as a whole first, so a directory, a FIFO or an unreadable file is named here rather
  // than thrown from inside the YAML parser.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return NotFoundError(fmt::format("cannot read job file {}: no such file", path));
  }
  if (!std::filesystem::is_regular_file(status)) {
    return InvalidArgumentError(
        fmt::format("job file {} is {}, not a file", path,
                    std::filesystem::is_directory(status) ? "a directory" : "not a regular file"));
  }
  std::string text;
  RETURN_IF_ERROR(ReadFileToString(Env::Posix(), path, &text));
  YAML::Node root;
  try {
    std::vector<YAML::Node> docs = YAML::LoadAll(text);
    if (docs.size() > 1) {
      return InvalidArgumentError(
          fmt::format("{}:{}: a second YAML document ('---'); a job file is one map of settings",
                      path, docs[1].Mark().line + 1));
    }
    if (!docs.empty()) root = docs[0];
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(fmt::format("{}:{}: {}", path, e.mark.line + 1, e.msg));
  }
  if (!root.IsMap() && !root.IsNull()) {
    return InvalidArgumentError(path + ": a job file is a map of settings");
  }
  // The feature graph is structured (docs/features.md): parsed whole, not flattened into keys
  // (features.hashing stays a plain key).
  try {
    if (root.IsMap() && root["features"] && HasFeatureGraph(root["features"])) {
      YAML::Node features = root["features"];
      ASSIGN_OR_RETURN(job_.features, ParseFeatures(features, path));
      for (const char* k :
           {"main", "views", "ops", "label", "slots", "dense", "schedule", "device"}) {
        features.remove(k);
      }
      if (features.size() == 0) root.remove("features");
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(fmt::format("{}:{}: {}", path, e.mark.line + 1, e.msg));
  }
  std::vector<std::tuple<std::string, std::string, int>> entries;
  try {
    RETURN_IF_ERROR(Flatten(root, "", path, &entries));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(fmt::format("{}:{}: {}", path, e.mark.line + 1, e.msg));
  }
  for (const auto& [key, value, line] : entries) {
    RETURN_IF_ERROR(Set(key, value, fmt::format("{}:{}", path, line)));
  }
  return Status::OK();
}

StatusOr<JobConfig> JobConfigBuilder::Finish() {
  // Defaults that depend on other keys. The settings are validated where the job starts
  // (JobConfig::Validate, TieredOptions::Validate), not here.
  TieredOptions& st = job_.storage;
  if (!st.ssd.dir.empty() && !was_set("storage.group_bits")) {
    // The group index takes at most 7.5 % of the budget (72 bytes per group; sizeof(GroupEntry)).
    uint32_t bits = 0;
    while ((uint64_t{1} << (bits + 1)) * 960 <= st.memory_budget) ++bits;
    st.ssd.group_bits = std::clamp<uint32_t>(bits, std::max<uint32_t>(10, st.shard_bits), 28);
  }
  auto default_epsilon = [](OptimizerOptions* o) {
    o->epsilon = o->kind == OptimizerKind::kAdagrad || o->kind == OptimizerKind::kRowwiseAdagrad
                     ? 1e-10f
                     : 1e-8f;
  };
  if (!was_set("optimizer.sparse.epsilon")) default_epsilon(&job_.spec.sparse_optimizer);
  if (!was_set("optimizer.dense.epsilon")) default_epsilon(&job_.spec.dense_optimizer);
  return job_;
}

std::string ConfigReference() {
  auto cell = [](std::string_view text) {  // a Markdown table cell: escape the pipes
    std::string out;
    for (char c : text) {
      if (c == '|') out += '\\';
      out += c;
    }
    return out;
  };
  std::string s = "| key | default | meaning |\n|---|---|---|\n";
  for (const Key& k : Keys()) {
    s += fmt::format("| `{}` | {} | {} |\n", k.name, cell(k.default_text), cell(k.help));
  }
  return s;
}

}  // namespace ctrbox
