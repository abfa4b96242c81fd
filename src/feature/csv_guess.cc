#include "feature/csv_guess.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <unordered_set>

#include "feature/column.h"
#include "feature/view_parse.h"
#include "io/compressed_file.h"
#include "util/parse.h"

namespace ctrbox {
namespace {

constexpr size_t kMostDistinct = 100000;  // distinct values kept per column of the sample

// What the sample says of one column.
struct ColumnStats {
  size_t values = 0;  // non-empty cells
  bool numeric = true, integer = true;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double sum = 0, sum2 = 0;
  std::unordered_set<std::string> distinct;  // at most kMostDistinct
  void Add(std::string_view v) {
    if (v.empty()) return;
    ++values;
    if (distinct.size() < kMostDistinct) distinct.emplace(v);
    double x;
    if (!numeric || !ParseDouble(v, &x)) {
      numeric = integer = false;
      return;
    }
    integer = integer && x == std::floor(x) && std::fabs(x) < 9.0e15;
    min = std::min(min, x);
    max = std::max(max, x);
    sum += x;
    sum2 += x * x;
  }
};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A YAML double-quoted scalar.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string QuotedList(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + Quote(names[i]);
  return out + "]";
}

// The paths as absolute ones: the job file works from any directory.
std::vector<std::string> Absolute(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    std::error_code ec;
    const std::filesystem::path a = std::filesystem::absolute(p, ec);
    out.push_back(ec ? p : a.lexically_normal().string());
  }
  return out;
}

// A name no header column and no earlier op takes.
std::string FreeName(const std::string& want, const std::set<std::string>& taken) {
  std::string name = want;
  for (int i = 2; taken.count(name); ++i) name = fmt::format("{}_{}", want, i);
  return name;
}

// The sample: the first sample_bytes of the file (decompressed, as every text reader reads
// it: io/compressed_file.h), cut into its first sample_rows + 1 whole lines.
struct Sample {
  std::string text;
  std::vector<std::string_view> lines;  // into text; lines[0] is the header
};

StatusOr<Sample> ReadSample(Env* env, const std::string& file, const CsvGuessOptions& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<SequentialFile> raw, env->NewSequentialFile(file));
  ASSIGN_OR_RETURN(std::unique_ptr<SequentialFile> f, OpenDecompressed(std::move(raw)));
  Sample s;
  s.text.assign(o.sample_bytes, '\0');
  size_t got = 0;
  while (got < s.text.size()) {
    size_t n = 0;
    RETURN_IF_ERROR(f->Read(s.text.size() - got, s.text.data() + got, &n));
    if (n == 0) break;
    got += n;
  }
  const bool whole = got < s.text.size();
  s.text.resize(got);
  for (size_t at = 0; at < s.text.size() && s.lines.size() <= o.sample_rows;) {
    size_t end = s.text.find('\n', at);
    if (end == std::string::npos) {
      if (!whole) break;  // cut by the sample's size
      end = s.text.size();
    }
    std::string_view line(s.text.data() + at, end - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    s.lines.push_back(line);
    at = end + 1;
  }
  if (s.lines.empty() || s.lines[0].empty()) {
    return InvalidArgumentError(
        fmt::format("{}: empty: no header to guess the columns from", file));
  }
  return s;
}

// The header's column names: distinct, named, and not data (a line of mostly numbers).
StatusOr<std::vector<std::string>> ReadHeader(const std::string& file, std::string_view line,
                                              const CsvGuessOptions& o) {
  ViewLayout layout;
  layout.format = o.format;
  std::vector<std::string> header = ViewParser::SplitHeader(layout, line);
  std::set<std::string> names;
  size_t numbers = 0;
  for (const std::string& h : header) {
    double x;
    if (ParseDouble(h, &x)) ++numbers;
    if (h.empty() || !names.insert(h).second) {
      return InvalidArgumentError(
          fmt::format("{}:1: the header {} a column {}: every column needs its own name", file,
                      h.empty() ? "leaves" : "names", h.empty() ? "unnamed" : Quote(h) + " twice"));
    }
  }
  if (numbers * 2 > header.size() || header.size() < 2) {
    return InvalidArgumentError(fmt::format(
        "{}:1: {} is not a header naming the columns (--format {} needs one{}). Without a "
        "header, write the views job that declares the columns in file order "
        "(docs/features.md)",
        file, header.size() < 2 ? "a single field" : "mostly numbers",
        o.format == ViewFormat::kTsv ? "tsv" : "csv",
        header.size() < 2 && o.format == ViewFormat::kCsv && line.find('\t') != line.npos
            ? "; the line has tabs: --format tsv?"
            : ""));
  }
  return header;
}

// The label's column: the one o.label names, else the first named as a label.
StatusOr<size_t> FindLabel(const std::string& file, const std::vector<std::string>& header,
                           const CsvGuessOptions& o) {
  if (!o.label.empty()) {
    const size_t c = std::find(header.begin(), header.end(), o.label) - header.begin();
    if (c == header.size()) {
      return InvalidArgumentError(
          fmt::format("data.label_column {}: {} has no such column (its header: {})", o.label, file,
                      fmt::format("{}", fmt::join(header, ", "))));
    }
    return c;
  }
  for (const char* want : {"label", "click", "clicked", "is_click", "target", "y"}) {
    for (size_t c = 0; c < header.size(); ++c) {
      if (Lower(header[c]) == want) return c;
    }
  }
  return InvalidArgumentError(fmt::format(
      "{}: no column is named as a label (label, click, clicked, is_click, target or y): "
      "name it with --set data.label_column=COLUMN (its header: {})",
      file, fmt::format("{}", fmt::join(header, ", "))));
}

// Each column's statistics over the sample's rows (a label other than 0 or 1 is refused).
struct Columns {
  std::vector<ColumnStats> stats;
  size_t rows = 0, ragged = 0;  // rows read; lines without the header's fields, skipped
};

StatusOr<Columns> Measure(const std::string& file, const Sample& sample,
                          const std::vector<std::string>& header, size_t label,
                          const CsvGuessOptions& o) {
  Columns m;
  m.stats.resize(header.size());
  Arena arena;
  std::vector<Str> fields;
  const char sep = o.format == ViewFormat::kTsv ? '\t' : ',';
  for (size_t i = 1; i < sample.lines.size(); ++i) {
    if (sample.lines[i].empty()) continue;
    fields.clear();
    if (!SplitFields(sample.lines[i], sep, o.format == ViewFormat::kCsv, &arena, 0, &fields) ||
        fields.size() != header.size()) {
      ++m.ragged;
      continue;
    }
    ++m.rows;
    const std::string_view y = fields[label].view();
    double v;
    if (!y.empty() && (!ParseDouble(y, &v) || (v != 0 && v != 1))) {
      return InvalidArgumentError(
          fmt::format("{}:{}: the label column {} holds '{}', not 0 or 1 (name the label with "
                      "--set data.label_column=COLUMN)",
                      file, i + 1, header[label], y.substr(0, 40)));
    }
    for (size_t c = 0; c < header.size(); ++c) m.stats[c].Add(fields[c].view());
  }
  if (m.rows == 0) {
    return InvalidArgumentError(fmt::format(
        "{}: no row of the first {} lines has the header's {} fields: nothing to guess from", file,
        sample.lines.size(), header.size()));
  }
  return m;
}

// Each column's role, as the graph's YAML pieces and the summary's words.
struct Roles {
  std::string columns, ops;  // the main view's declared columns; the operators
  std::vector<std::string> slots, dense, dense_said, left_out;
};

Roles Assign(const std::vector<std::string>& header, size_t label, const Columns& m,
             const CsvGuessOptions& o) {
  Roles r;
  std::set<std::string> taken(header.begin(), header.end());
  for (size_t c = 0; c < header.size(); ++c) {
    const std::string& name = header[c];
    const ColumnStats& s = m.stats[c];
    std::string type;
    if (c == label) {
      type = s.integer ? "int" : "float";
    } else if (name.find('.') != std::string::npos) {
      r.left_out.push_back(name + " (a '.' in its name reads as view.column; rename it to use it)");
    } else if (s.values == 0) {
      r.left_out.push_back(name + " (empty in the sample)");
    } else if ((!s.numeric || s.integer) && s.values >= 100 && s.distinct.size() == s.values) {
      r.left_out.push_back(name + " (every value differs: a row id?)");
    } else if (s.numeric && s.distinct.size() > o.max_code_values) {
      // The model takes dense values as log(1 + max(x, 0)) (model.dense_log1p): a column that
      // is never negative goes in as it is; a signed one is shifted to start at 0 first, in
      // units of its spread, so that its negative half is not lost.
      type = "float";
      if (s.min >= 0) {
        r.dense.push_back(name);
        r.dense_said.push_back(name);
      } else {
        const double mean = s.sum / static_cast<double>(s.values);
        const double var = std::max(0.0, s.sum2 / static_cast<double>(s.values) - mean * mean);
        const double sd = var > 0 ? std::sqrt(var) : 1.0;
        const std::string op = FreeName("shifted_" + name, taken);
        taken.insert(op);
        r.ops +=
            fmt::format("  - {{name: {}, op: normalize, input: {}, mean: {:.6g}, std: {:.6g}}}\n",
                        Quote(op), Quote(name), s.min, sd);
        r.dense.push_back(op);
        r.dense_said.push_back(name + ": (x - min) / sd");
      }
    } else {
      type = "string";  // a category, or a number code: one key per value
      r.slots.push_back(name);
    }
    if (!type.empty()) {
      r.columns += fmt::format("{}{}: {}", r.columns.empty() ? "" : ", ", Quote(name), type);
    }
  }
  return r;
}

}  // namespace

StatusOr<CsvGuess> GuessCsvFeatures(Env* env, const std::vector<std::string>& paths,
                                    const CsvGuessOptions& o) {
  const char* kind = o.format == ViewFormat::kTsv ? "TSV" : "CSV";
  if (paths.empty() || paths[0] == "-") {
    return InvalidArgumentError(fmt::format(
        "--format {}: the columns are guessed from the first data file: give files with --data "
        "(standard input cannot be read twice)",
        Lower(kind)));
  }
  const std::string& file = paths[0];
  ASSIGN_OR_RETURN(const Sample sample, ReadSample(env, file, o));
  ASSIGN_OR_RETURN(const std::vector<std::string> header, ReadHeader(file, sample.lines[0], o));
  ASSIGN_OR_RETURN(const size_t label, FindLabel(file, header, o));
  ASSIGN_OR_RETURN(const Columns m, Measure(file, sample, header, label, o));
  const Roles r = Assign(header, label, m, o);
  if (r.slots.empty()) {
    return InvalidArgumentError(fmt::format(
        "{}: no column looks like a categorical feature (every one is numeric with many values, "
        "empty, or an id): the model needs slots; write the views job (docs/features.md)",
        file));
  }
  CsvGuess g;
  g.features_yaml = fmt::format(
      "main:\n  format: {}\n  header: true\n  columns: {{{}}}\n{}label: {}\nslots: {}\n{}",
      Lower(kind), r.columns, r.ops.empty() ? "" : "ops:\n" + r.ops, Quote(header[label]),
      QuotedList(r.slots), r.dense.empty() ? "" : fmt::format("dense: {}\n", QuotedList(r.dense)));
  std::string indented;
  for (size_t at = 0; at < g.features_yaml.size();) {
    const size_t end = g.features_yaml.find('\n', at);
    indented += "  " + g.features_yaml.substr(at, end - at + 1);
    at = end + 1;
  }
  g.job_yaml = fmt::format(
      "# The job ctrbox guessed for {} from its header and first {} rows (docs/features.md,\n"
      "# \"From a CSV file in one command\"). Edit it, then: ctrbox train -c THIS_FILE; eval,\n"
      "# predict and serve read the model's data through it (-c THIS_FILE).\n"
      "data:\n  paths: {}\nfeatures:\n{}",
      file, m.rows, QuotedList(Absolute(paths)), indented);
  g.summary = fmt::format(
      "label {}; {} slot{} ({}); {} dense ({}){}{}", header[label], r.slots.size(),
      r.slots.size() == 1 ? "" : "s", fmt::join(r.slots, ", "), r.dense.size(),
      r.dense_said.empty() ? "none" : fmt::format("{}", fmt::join(r.dense_said, ", ")),
      r.left_out.empty() ? "" : fmt::format("; left out: {}", fmt::join(r.left_out, ", ")),
      m.ragged > 0 ? fmt::format("; {} sampled line(s) without the header's {} fields skipped",
                                 m.ragged, header.size())
                   : "");
  return g;
}

}  // namespace ctrbox
