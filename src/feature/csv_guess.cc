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

bool Compressed(const std::string& head) {
  return (head.size() >= 2 && static_cast<uint8_t>(head[0]) == 0x1f &&
          static_cast<uint8_t>(head[1]) == 0x8b) ||
         (head.size() >= 4 && head.compare(0, 4, "\x28\xb5\x2f\xfd") == 0);
}

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
  // The sample: the first sample_bytes of the first file, whole lines.
  ASSIGN_OR_RETURN(std::unique_ptr<SequentialFile> f, env->NewSequentialFile(file));
  std::string text(o.sample_bytes, '\0');
  size_t got = 0;
  while (got < text.size()) {
    size_t n = 0;
    RETURN_IF_ERROR(f->Read(text.size() - got, text.data() + got, &n));
    if (n == 0) break;
    got += n;
  }
  const bool whole = got < text.size();
  text.resize(got);
  if (Compressed(text)) {
    return InvalidArgumentError(fmt::format(
        "{}: compressed; --format {} guesses the columns of a plain file. Write the views job "
        "for it (docs/features.md: a view reads compressed files through `command`)",
        file, Lower(kind)));
  }
  std::vector<std::string_view> lines;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) {
      if (!whole) break;  // cut by the sample's size
      end = text.size();
    }
    std::string_view line(text.data() + at, end - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    at = end + 1;
    if (lines.size() > o.sample_rows) break;
  }
  if (lines.empty() || lines[0].empty()) {
    return InvalidArgumentError(
        fmt::format("{}: empty: no header to guess the columns from", file));
  }
  ViewLayout layout;
  layout.format = o.format;
  const std::vector<std::string> header = ViewParser::SplitHeader(layout, lines[0]);
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
        file, header.size() < 2 ? "a single field" : "mostly numbers", Lower(kind),
        header.size() < 2 && o.format == ViewFormat::kCsv && lines[0].find('\t') != lines[0].npos
            ? "; the line has tabs: --format tsv?"
            : ""));
  }
  // The label.
  size_t label = header.size();
  if (!o.label.empty()) {
    label = std::find(header.begin(), header.end(), o.label) - header.begin();
    if (label == header.size()) {
      return InvalidArgumentError(
          fmt::format("data.label_column {}: {} has no such column (its header: {})", o.label, file,
                      fmt::format("{}", fmt::join(header, ", "))));
    }
  } else {
    for (const char* want : {"label", "click", "clicked", "is_click", "target", "y"}) {
      for (size_t c = 0; c < header.size() && label == header.size(); ++c) {
        if (Lower(header[c]) == want) label = c;
      }
    }
    if (label == header.size()) {
      return InvalidArgumentError(fmt::format(
          "{}: no column is named as a label (label, click, clicked, is_click, target or y): "
          "name it with --set data.label_column=COLUMN (its header: {})",
          file, fmt::format("{}", fmt::join(header, ", "))));
    }
  }
  // The columns' statistics over the sample.
  std::vector<ColumnStats> stats(header.size());
  Arena arena;
  std::vector<Str> fields;
  size_t rows = 0, ragged = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    fields.clear();
    if (!SplitFields(lines[i], layout.sep(), o.format == ViewFormat::kCsv, &arena, 0, &fields) ||
        fields.size() != header.size()) {
      ++ragged;
      continue;
    }
    ++rows;
    const std::string_view y = fields[label].view();
    double v;
    if (!y.empty() && (!ParseDouble(y, &v) || (v != 0 && v != 1))) {
      return InvalidArgumentError(
          fmt::format("{}:{}: the label column {} holds '{}', not 0 or 1 (name the label with "
                      "--set data.label_column=COLUMN)",
                      file, i + 1, header[label], y.substr(0, 40)));
    }
    for (size_t c = 0; c < header.size(); ++c) stats[c].Add(fields[c].view());
  }
  if (rows == 0) {
    return InvalidArgumentError(fmt::format(
        "{}: no row of the first {} lines has the header's {} fields: nothing to guess from", file,
        lines.size(), header.size()));
  }
  // Each column's role.
  std::string columns, ops;
  std::vector<std::string> slots, dense, dense_said, left_out;
  std::set<std::string> taken(header.begin(), header.end());
  for (size_t c = 0; c < header.size(); ++c) {
    const std::string& name = header[c];
    const ColumnStats& s = stats[c];
    std::string type;
    if (c == label) {
      type = s.integer ? "int" : "float";
    } else if (name.find('.') != std::string::npos) {
      left_out.push_back(name + " (a '.' in its name reads as view.column; rename it to use it)");
    } else if (s.values == 0) {
      left_out.push_back(name + " (empty in the sample)");
    } else if ((!s.numeric || s.integer) && s.values >= 100 && s.distinct.size() == s.values) {
      left_out.push_back(name + " (every value differs: a row id?)");
    } else if (s.numeric && s.distinct.size() > o.max_code_values) {
      // The model takes dense values as log(1 + max(x, 0)) (model.dense_log1p): a column that
      // is never negative goes in as it is; a signed one is shifted to start at 0 first, in
      // units of its spread, so that its negative half is not lost.
      type = "float";
      if (s.min >= 0) {
        dense.push_back(name);
        dense_said.push_back(name);
      } else {
        const double mean = s.sum / static_cast<double>(s.values);
        const double var = std::max(0.0, s.sum2 / static_cast<double>(s.values) - mean * mean);
        const double sd = var > 0 ? std::sqrt(var) : 1.0;
        const std::string op = FreeName("shifted_" + name, taken);
        taken.insert(op);
        ops +=
            fmt::format("  - {{name: {}, op: normalize, input: {}, mean: {:.6g}, std: {:.6g}}}\n",
                        Quote(op), Quote(name), s.min, sd);
        dense.push_back(op);
        dense_said.push_back(name + ": (x - min) / sd");
      }
    } else {
      type = "string";  // a category, or a number code: one key per value
      slots.push_back(name);
    }
    if (!type.empty()) {
      columns += fmt::format("{}{}: {}", columns.empty() ? "" : ", ", Quote(name), type);
    }
  }
  if (slots.empty()) {
    return InvalidArgumentError(fmt::format(
        "{}: no column looks like a categorical feature (every one is numeric with many values, "
        "empty, or an id): the model needs slots; write the views job (docs/features.md)",
        file));
  }
  CsvGuess g;
  g.features_yaml = fmt::format(
      "main:\n  format: {}\n  header: true\n  columns: {{{}}}\n{}label: {}\nslots: {}\n{}",
      Lower(kind), columns, ops.empty() ? "" : "ops:\n" + ops, Quote(header[label]),
      QuotedList(slots), dense.empty() ? "" : fmt::format("dense: {}\n", QuotedList(dense)));
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
      file, rows, QuotedList(Absolute(paths)), indented);
  g.summary = fmt::format(
      "label {}; {} slot{} ({}); {} dense ({}){}{}", header[label], slots.size(),
      slots.size() == 1 ? "" : "s", fmt::join(slots, ", "), dense.size(),
      dense_said.empty() ? "none" : fmt::format("{}", fmt::join(dense_said, ", ")),
      left_out.empty() ? "" : fmt::format("; left out: {}", fmt::join(left_out, ", ")),
      ragged > 0 ? fmt::format("; {} sampled line(s) without the header's {} fields skipped",
                               ragged, header.size())
                 : "");
  return g;
}

}  // namespace ctrbox
