#include "feature/ops.h"

#include <simdjson.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>

#include "feature/device_layers.h"
#include "util/hash.h"
#include "util/parse.h"

namespace ctrbox {

namespace {

void MarkError(ColumnTable* t, uint32_t r, int op_id) {
  uint32_t& e = t->errors[r];
  const uint32_t mine = static_cast<uint32_t>(op_id) + 1;
  if (e == 0 || mine < e) e = mine;
}

void SetNull(Column& c, uint32_t r) {
  c.valid[r] = 0;
  std::memset(static_cast<char*>(c.cells) + r * CellBytes(c.type), 0, CellBytes(c.type));
}

// XXH3 of item i of row r, seeded: strings by their bytes, numbers by their 8 little-endian
// bytes (a float by its bit pattern), keys by theirs.
uint64_t ItemHash(const Column& c, uint32_t r, uint32_t i, uint64_t seed) {
  switch (c.type) {
    case ColType::kInt:
    case ColType::kMask: {
      const int64_t v = c.ints()[r];
      return XXH3_64bits_withSeed(&v, 8, seed);
    }
    case ColType::kFloat: {
      const uint64_t v = std::bit_cast<uint64_t>(c.floats()[r]);
      return XXH3_64bits_withSeed(&v, 8, seed);
    }
    case ColType::kString:
      return XXH3_64bits_withSeed(c.strs()[r].p, c.strs()[r].n, seed);
    case ColType::kKeys:
    case ColType::kHashed: {
      const uint64_t v = c.keys()[r].p[i];
      return XXH3_64bits_withSeed(&v, 8, seed);
    }
    case ColType::kList: {
      const Str& s = c.lists()[r].p[i];
      return XXH3_64bits_withSeed(s.p, s.n, seed);
    }
    case ColType::kTag:
      return XXH3_64bits_withSeed(&c.tags()[r], sizeof(Hash128), seed);
  }
  return 0;
}

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

struct JsonScratch {
  simdjson::ondemand::parser parser;
  std::string buf;
};
JsonScratch& Json() {
  thread_local JsonScratch s;
  return s;
}

// json_field on one string: 1 found (cell set), 0 null (missing member or another type), -1
// malformed JSON.
int JsonField(const OpNode& op, Str in, Arena* arena, int lane, void* cell) {
  JsonScratch& js = Json();
  js.buf.assign(in.p, in.n);
  js.buf.resize(in.n + simdjson::SIMDJSON_PADDING, ' ');
  simdjson::ondemand::document doc;
  if (js.parser.iterate(js.buf.data(), in.n, js.buf.size()).get(doc) != simdjson::SUCCESS)
    return -1;
  simdjson::ondemand::value v;
  {
    simdjson::ondemand::object obj;
    auto e = doc.get_object().get(obj);
    if (e == simdjson::INCORRECT_TYPE) return 0;
    if (e != simdjson::SUCCESS) return -1;
    e = obj.find_field_unordered(op.path[0]).get(v);
    if (e == simdjson::NO_SUCH_FIELD) return 0;
    if (e != simdjson::SUCCESS) return -1;
  }
  for (size_t k = 1; k < op.path.size(); ++k) {
    simdjson::ondemand::object obj;
    auto e = v.get_object().get(obj);
    if (e == simdjson::INCORRECT_TYPE) return 0;
    if (e != simdjson::SUCCESS) return -1;
    e = obj.find_field_unordered(op.path[k]).get(v);
    if (e == simdjson::NO_SUCH_FIELD) return 0;
    if (e != simdjson::SUCCESS) return -1;
  }
  simdjson::ondemand::json_type t;
  if (v.type().get(t) != simdjson::SUCCESS) return -1;
  using JT = simdjson::ondemand::json_type;
  if (t == JT::null) return 0;
  switch (op.to) {
    case ColType::kInt: {
      if (t != JT::number) return 0;
      auto e = v.get_int64().get(*static_cast<int64_t*>(cell));
      if (e == simdjson::SUCCESS) return 1;
      return e == simdjson::INCORRECT_TYPE || e == simdjson::NUMBER_OUT_OF_RANGE ? 0 : -1;
    }
    case ColType::kFloat: {
      if (t != JT::number) return 0;
      return v.get_double().get(*static_cast<double*>(cell)) == simdjson::SUCCESS ? 1 : -1;
    }
    default: {
      std::string_view s;
      if (t == JT::string) {
        if (v.get_string().get(s) != simdjson::SUCCESS) return -1;
      } else if (t == JT::object) {
        simdjson::ondemand::object o;
        if (v.get_object().get(o) != simdjson::SUCCESS ||
            o.raw_json().get(s) != simdjson::SUCCESS) {
          return -1;
        }
      } else if (t == JT::array) {
        simdjson::ondemand::array a;
        if (v.get_array().get(a) != simdjson::SUCCESS || a.raw_json().get(s) != simdjson::SUCCESS) {
          return -1;
        }
      } else {
        s = v.raw_json_token();
        while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) {
          s.remove_suffix(1);
        }
        if (t == JT::boolean) {
          bool b;
          if (v.get_bool().get(b) != simdjson::SUCCESS) return -1;
        }
      }
      *static_cast<Str*>(cell) = arena->Copy(s, lane);
      return 1;
    }
  }
}

bool Compare(Cmp cmp, int c) {  // c: <0, 0, >0 of value vs constant
  switch (cmp) {
    case Cmp::kEq:
      return c == 0;
    case Cmp::kNe:
      return c != 0;
    case Cmp::kLt:
      return c < 0;
    case Cmp::kLe:
      return c <= 0;
    case Cmp::kGt:
      return c > 0;
    case Cmp::kGe:
      return c >= 0;
    default:
      return false;
  }
}

int Sign(std::string_view a, std::string_view b) {
  const int c = a.compare(b);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

}  // namespace

uint32_t ItemCount(const Column& c, uint32_t r) {
  if (!c.valid[r]) return 0;
  switch (c.type) {
    case ColType::kKeys:
    case ColType::kHashed:
      return c.keys()[r].n;
    case ColType::kList:
      return c.lists()[r].n;
    default:
      return 1;
  }
}

BadKind ErrorKind(const OpNode& op) {
  switch (op.kind) {
    case OpKind::kJsonField:
      return BadKind::kBadJson;
    case OpKind::kCross:
      return BadKind::kBadSlot;
    default:
      return BadKind::kBadNumber;
  }
}

void AllocateOutput(const FeaturePlan& plan, const OpNode& op, uint32_t rows, Arena* arena,
                    ColumnTable* table) {
  Column& c = table->cols[op.output];
  c.type = plan.columns[op.output].type;
  c.valid = arena->Alloc<uint8_t>(std::max<uint32_t>(rows, 1));
  c.cells = arena->Allocate(std::max<size_t>(rows, 1) * CellBytes(c.type));
}

void RunOpRows(const FeaturePlan& plan, int op_id, const SideTables& sides, uint32_t begin,
               uint32_t end, Arena* arena, int lane, ColumnTable* t) {
  const OpNode& op = plan.ops[op_id];
  Column& out = t->cols[op.output];
  const Column& in = t->cols[op.inputs.empty() ? op.output : op.inputs[0]];
  if (IsFixedOp(plan, op)) {  // the row function the device layers run too (fixed_ops.h)
    thread_local std::vector<double> consts;
    consts.clear();
    const FixedOp f = MakeFixedOp(plan, op, op_id, &consts);
    for (uint32_t r = begin; r < end; ++r) {
      FixedRow(f, in.valid, in.cells, out.valid, out.cells, t->errors.data(), consts.data(), r);
    }
    return;
  }
  switch (op.kind) {
    // Past IsFixedOp: only the operators that meet strings are left in these three.
    case OpKind::kFillNull:  // a string column
      for (uint32_t r = begin; r < end; ++r) {
        out.valid[r] = 1;
        out.strs()[r] = in.valid[r]
                            ? in.strs()[r]
                            : Str{op.value.s.data(), static_cast<uint32_t>(op.value.s.size())};
      }
      return;
    case OpKind::kCast:
      for (uint32_t r = begin; r < end; ++r) {
        if (!in.valid[r]) {
          SetNull(out, r);
          continue;
        }
        out.valid[r] = 1;
        bool ok = true;
        if (in.type == out.type) {  // string to string
          out.strs()[r] = in.strs()[r];
        } else if (out.type == ColType::kFloat) {  // from a string
          ok = ParseDouble(in.strs()[r].view(), &out.floats()[r]) && std::isfinite(out.floats()[r]);
        } else if (out.type == ColType::kInt) {  // from a string
          ok = ParseInt64(in.strs()[r].view(), &out.ints()[r]);
        } else {  // a number to a string
          char buf[64];
          std::to_chars_result res = in.type == ColType::kInt
                                         ? std::to_chars(buf, buf + sizeof(buf), in.ints()[r])
                                         : std::to_chars(buf, buf + sizeof(buf), in.floats()[r]);
          out.strs()[r] = arena->Copy(std::string_view(buf, res.ptr - buf), lane);
        }
        if (!ok) {
          SetNull(out, r);
          MarkError(t, r, op_id);
        }
      }
      return;
    case OpKind::kJsonField:
      for (uint32_t r = begin; r < end; ++r) {
        if (!in.valid[r]) {
          SetNull(out, r);
          continue;
        }
        void* cell = static_cast<char*>(out.cells) + r * CellBytes(out.type);
        const int found = JsonField(op, in.strs()[r], arena, lane, cell);
        if (found == 1) {
          out.valid[r] = 1;
        } else {
          SetNull(out, r);
          if (found < 0) MarkError(t, r, op_id);
        }
      }
      return;
    case OpKind::kFilter:
      for (uint32_t r = begin; r < end; ++r) {
        out.valid[r] = 1;
        bool keep;
        if (op.cmp == Cmp::kNotNull) {
          keep = in.valid[r] != 0;
        } else if (!in.valid[r]) {
          keep = op.cmp == Cmp::kNe;
        } else if (op.cmp == Cmp::kIn) {  // a string column (numbers are fixed ops)
          keep = false;
          for (const Constant& c : op.values) keep |= in.strs()[r].view() == c.s;
        } else {
          keep = Compare(op.cmp, Sign(in.strs()[r].view(), op.value.s));
        }
        out.ints()[r] = keep;
      }
      return;
    case OpKind::kDedupe:
      for (uint32_t r = begin; r < end; ++r) {
        XXH3_state_t st;
        XXH3_128bits_reset(&st);
        for (int c : op.inputs) {
          const Column& col = t->cols[c];
          const uint32_t n = ItemCount(col, r);
          const uint8_t tag[2] = {col.valid[r], static_cast<uint8_t>(col.type)};
          XXH3_128bits_update(&st, tag, 2);
          XXH3_128bits_update(&st, &n, sizeof(n));
          for (uint32_t i = 0; i < n; ++i) {
            const uint64_t h = ItemHash(col, r, i, 0);
            XXH3_128bits_update(&st, &h, sizeof(h));
          }
        }
        const XXH128_hash_t h = XXH3_128bits_digest(&st);
        out.valid[r] = 1;
        out.tags()[r] = {h.low64, h.high64};
      }
      return;
    case OpKind::kJoin:
      for (uint32_t r = begin; r < end; ++r) {
        out.valid[r] = 1;
        out.ints()[r] = sides[op.view]->Find(*t, op.inputs, r);
      }
      return;
    case OpKind::kGather: {
      const SideTable& side = *sides[op.view];
      const Column& src = side.column(op.view_col);
      const size_t cb = CellBytes(out.type);
      for (uint32_t r = begin; r < end; ++r) {
        const int64_t row = in.ints()[r];
        if (row < 0 || !src.valid[row]) {
          SetNull(out, r);
          continue;
        }
        out.valid[r] = 1;
        std::memcpy(static_cast<char*>(out.cells) + r * cb,
                    static_cast<const char*>(src.cells) + row * cb, cb);
      }
      return;
    }
    case OpKind::kHash:
    case OpKind::kCross: {
      // Algorithm 1 of FeatureBox §5: each row's size, their prefix sum, one allocation for
      // the block, then each row writes at its offset.
      uint64_t total = 0;
      for (uint32_t r = begin; r < end; ++r) {
        const uint64_t cap = op.kind == OpKind::kCross ? op.max_keys : UINT32_MAX;
        uint64_t n = 1;
        for (int c : op.inputs) n = std::min(n * ItemCount(t->cols[c], r), cap + 1);
        if (n > cap) {
          MarkError(t, r, op_id);
          n = 0;
        }
        out.keys()[r].n = static_cast<uint32_t>(n);
        total += n;
      }
      uint64_t* keys = arena->Alloc<uint64_t>(std::max<uint64_t>(total, 1), lane);
      uint64_t at = 0;
      std::vector<uint32_t> idx;
      std::vector<uint64_t> h;
      for (uint32_t r = begin; r < end; ++r) {
        KeySpan& span = out.keys()[r];
        span.p = keys + at;
        out.valid[r] = span.n > 0;
        if (span.n == 0) {
          span.p = nullptr;
          continue;
        }
        if (op.kind == OpKind::kHash) {
          for (uint32_t i = 0; i < span.n; ++i) keys[at + i] = ItemHash(in, r, i, op.seed);
        } else {
          // Every combination, the first input outermost.
          const size_t k = op.inputs.size();
          idx.assign(k, 0);
          h.resize(k);
          for (uint32_t j = 0; j < span.n; ++j) {
            for (size_t m = 0; m < k; ++m) h[m] = ItemHash(t->cols[op.inputs[m]], r, idx[m], 0);
            keys[at + j] = XXH3_64bits_withSeed(h.data(), k * sizeof(uint64_t), op.seed);
            for (size_t m = k; m-- > 0;) {  // odometer, last input fastest
              if (++idx[m] < ItemCount(t->cols[op.inputs[m]], r)) break;
              idx[m] = 0;
            }
          }
        }
        at += span.n;
      }
      return;
    }
    case OpKind::kSplit:
    case OpKind::kLastN: {
      if (in.type == ColType::kList) {  // last_n of a list: its tail, no copy
        for (uint32_t r = begin; r < end; ++r) {
          if (!in.valid[r]) {
            SetNull(out, r);
            continue;
          }
          const StrSpan s = in.lists()[r];
          const uint32_t k = std::min(s.n, op.n);
          out.lists()[r] = {s.p + (s.n - k), k};
          out.valid[r] = k > 0;
        }
        return;
      }
      // Pieces of a string: count, one allocation for the block, fill (pieces point into the
      // input string).
      uint64_t total = 0;
      for (uint32_t r = begin; r < end; ++r) {
        uint32_t n = 0;
        if (in.valid[r]) ForPieces(in.strs()[r].view(), op.sep, [&](std::string_view) { ++n; });
        if (op.kind == OpKind::kLastN) n = std::min(n, op.n);
        out.lists()[r].n = n;
        total += n;
      }
      Str* items = arena->Alloc<Str>(std::max<uint64_t>(total, 1), lane);
      uint64_t at = 0;
      for (uint32_t r = begin; r < end; ++r) {
        StrSpan& span = out.lists()[r];
        out.valid[r] = span.n > 0;
        if (span.n == 0) {
          span.p = nullptr;
          continue;
        }
        span.p = items + at;
        uint32_t all = 0;
        if (op.kind == OpKind::kLastN) {
          ForPieces(in.strs()[r].view(), op.sep, [&](std::string_view) { ++all; });
        }
        const uint32_t skip = op.kind == OpKind::kLastN ? all - span.n : 0;
        uint32_t i = 0, w = 0;
        ForPieces(in.strs()[r].view(), op.sep, [&](std::string_view p) {
          if (i++ >= skip) items[at + w++] = {p.data(), static_cast<uint32_t>(p.size())};
        });
        at += span.n;
      }
      return;
    }
    case OpKind::kBucketize:
    case OpKind::kTimePart:
    case OpKind::kLog:
    case OpKind::kClip:
    case OpKind::kNormalize:
      return;  // fixed: above
  }
}

void RunSequential(const FeaturePlan& plan, const SideTables& sides, Arena* arena,
                   ColumnTable* table) {
  for (int id : plan.topo) {
    AllocateOutput(plan, plan.ops[id], table->rows, arena, table);
    RunOpRows(plan, id, sides, 0, table->rows, arena, 0, table);
  }
}

}  // namespace ctrbox
