#include "cli/config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>

#include "cli/config_grammars.h"
#include "feature/csv_guess.h"
#include "feature/graph.h"
#include "util/logging.h"
#include "util/parse.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

using config::Key;
using config::Keys;
using config::RenamedKeys;

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
  for (const config::RenamedKey& r : RenamedKeys()) {
    if (key != r.old_name) continue;
    LOG_WARNING("{}: {} is now called {} (the old name still works, for now)", origin, key,
                r.new_name);
    key = r.new_name;
    break;
  }
  for (const Key& k : Keys()) {
    if (key != k.name) continue;
    std::string expect;
    if (!k.set(&job_, Trim(value), &expect)) {
      return InvalidArgumentError(
          fmt::format("{}: bad value '{}' for {}: expected {}", origin, value, key, expect));
    }
    set_keys_.insert(std::string(key));
    origins_[std::string(key)] = std::string(origin);
    job_.settings_given[std::string(key)] = std::string(Trim(value));
    return Status::OK();
  }
  return InvalidArgumentError(
      fmt::format("{}: unknown configuration key '{}' (`ctrbox config` lists them)", origin, key));
}

namespace {

// train --format csv / tsv, or a first data file named *.csv and no format set: the feature
// graph guessed from the file (feature/csv_guess.h), said in the log.
Status GuessCsvGraph(const JobSources& sources, JobConfig* job) {
  const bool asked = sources.format == "csv" || sources.format == "tsv";
  const bool named = sources.format.empty() && !job->settings_given.contains("data.format") &&
                     !job->data.paths.empty() && job->data.paths[0].ends_with(".csv");
  if (asked && job->features != nullptr) {
    return InvalidArgumentError(
        fmt::format("--format {}: this job has a feature graph, whose views name their own formats "
                    "(features.main.format; docs/features.md)",
                    sources.format));
  }
  if (!sources.train || job->features != nullptr || !(asked || named)) return Status::OK();
  CsvGuessOptions o;
  o.format = sources.format == "tsv" ? ViewFormat::kTsv : ViewFormat::kCsv;
  o.label = job->label_column;
  ASSIGN_OR_RETURN(CsvGuess g, GuessCsvFeatures(Env::Posix(), job->data.paths, o));
  const std::string origin = "the feature graph guessed for " + job->data.paths[0];
  try {
    ASSIGN_OR_RETURN(job->features, ParseFeatures(YAML::Load(g.features_yaml), origin));
  } catch (const YAML::Exception& e) {
    return InternalError(fmt::format("{}: {}", origin, e.msg));
  }
  LOG_INFO("{} is read as {} with a header{}; guessed from its first rows: {}", job->data.paths[0],
           o.format == ViewFormat::kTsv ? "TSV" : "CSV",
           asked ? "" : " (its name; --format chooses another)", g.summary);
  job->guessed_job = std::move(g.job_yaml);
  return Status::OK();
}

}  // namespace

namespace {

// A path a job file gives is relative to the job file's folder, as in compose files, not to
// the working directory: the same job file runs from anywhere. (--set and --data paths stay
// relative to the working directory, as every command line's do.)
std::string RelativeToJobFile(const std::string& job_file, std::string_view key,
                              std::string_view value) {
  static constexpr std::string_view kPathKeys[] = {
      "data.paths",  "data.eval_paths",    "ckpt.dir",   "storage.ssd_dir",
      "serving.dir", "train.metrics_path", "stream.root"};
  if (std::find(std::begin(kPathKeys), std::end(kPathKeys), key) == std::end(kPathKeys)) {
    return std::string(value);
  }
  const std::string base = DirName(job_file);
  std::string out;
  for (std::string_view item : Split(value, ',')) {  // (a list arrives joined by ',')
    item = Trim(item);
    std::string resolved(item);
    if (!item.empty() && item != "-" && item.front() != '/' && base != ".") {
      resolved = JoinPath(base, item);
    }
    out += (out.empty() ? "" : ",") + resolved;
  }
  return out;
}

// train: a data file a job file names that does not exist is named with the job file's line
// (and the folder its relative paths start from) before anything else is read.
Status CheckJobFilePaths(const JobConfigBuilder& b, const JobSources& sources) {
  if (!sources.train || sources.config_path.empty()) return Status::OK();
  const JobConfig& job = b.job_const();
  for (const auto& [key, paths] :
       {std::pair{"data.paths", &job.data.paths}, std::pair{"data.eval_paths", &job.eval_paths}}) {
    const std::string origin = b.origin(key);
    if (!origin.starts_with(sources.config_path + ":")) continue;  // (not the job file's)
    for (const std::string& p : *paths) {
      if (p == "-" || p.find_first_of("*?[") != std::string::npos) continue;
      if (!std::filesystem::exists(p)) {
        return NotFoundError(fmt::format(
            "{}: {}: {} does not exist (a job file's relative paths start from its folder, "
            "{})",
            origin, key, p, DirName(sources.config_path)));
      }
    }
  }
  return Status::OK();
}

}  // namespace

StatusOr<JobConfig> BuildJobConfig(const JobSources& sources) {
  JobConfigBuilder b;
  b.job().size_to_data = true;
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
  const bool csv = sources.format == "csv" || sources.format == "tsv";
  if (csv && !sources.train) {
    return InvalidArgumentError(fmt::format(
        "--format {}: train guesses a feature graph for a {} file and saves it beside the "
        "model as job.yaml: give that job file here (-c MODEL_DIR/job.yaml)",
        sources.format, sources.format));
  }
  if (!sources.format.empty() && !csv) {
    if (b.job().features != nullptr) {  // it would be ignored: said, not accepted
      return InvalidArgumentError(fmt::format(
          "--format {}: this job has a feature graph, whose views name their own formats "
          "(features.main.format, features.views.*.format; docs/features.md)",
          sources.format));
    }
    RETURN_IF_ERROR(b.Set("data.format", sources.format, "--format"));
  }
  std::map<std::string, std::string>& given = b.job().settings_given;
  if (!sources.data.empty()) {
    b.job().data.paths = sources.data;
    given["--data"] = fmt::format("{}", fmt::join(sources.data, " "));
  }
  if (!sources.eval_data.empty()) {
    b.job().eval_paths = sources.eval_data;
    given["--eval-data"] = fmt::format("{}", fmt::join(sources.eval_data, " "));
  }
  if (!sources.model_dir.empty()) b.job().model_dir = given["--model-dir"] = sources.model_dir;
  b.job().fresh = sources.fresh;
  b.job().resume = sources.resume;
  if (sources.fresh) given["--fresh"] = "true";
  if (sources.resume) given["--resume"] = "true";
  if (sources.continue_model) {
    b.job().train.continue_model = true;
    given["--continue"] = "true";
  }
  RETURN_IF_ERROR(CheckJobFilePaths(b, sources));
  RETURN_IF_ERROR(GuessCsvGraph(sources, &b.job()));
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
      // The views' paths, as the job's, start from the job file's folder.
      if (features["views"] && features["views"].IsMap()) {
        for (auto view : features["views"]) {
          YAML::Node paths = view.second["paths"];
          if (!paths || !paths.IsSequence()) continue;
          for (size_t i = 0; i < paths.size(); ++i) {
            if (paths[i].IsScalar()) {
              paths[i] = RelativeToJobFile(path, "data.paths", paths[i].as<std::string>());
            }
          }
        }
      }
      ASSIGN_OR_RETURN(job_.features, ParseFeatures(features, path));
      for (const char* k : kFeatureGraphKeys) features.remove(k);
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
    RETURN_IF_ERROR(
        Set(key, RelativeToJobFile(path, key, value), fmt::format("{}:{}", path, line)));
  }
  return Status::OK();
}

StatusOr<JobConfig> JobConfigBuilder::Finish() {
  // Defaults that depend on other keys. The settings are validated where the job starts
  // (JobConfig::Validate, TieredOptions::Validate), not here.
  TieredOptions& st = job_.storage;
  if (!st.ssd.dir.empty() && !was_set("storage.group_bits")) {
    // A group per 1 920 bytes of budget at most: the group index (sizeof(GroupEntry), 88 B a
    // group) takes at most 4.6 % of it, and a model 10x the budget holds ~110 rows a group
    // (docs/storage.md, "Group size": half the groups of 960 B read 20 % fewer records).
    constexpr uint64_t kBudgetBytesPerGroup = 1920;
    uint32_t bits = 0;
    while ((uint64_t{1} << (bits + 1)) * kBudgetBytesPerGroup <= st.memory_budget) ++bits;
    st.ssd.group_bits = std::clamp<uint32_t>(bits, std::max<uint32_t>(10, st.stripe_bits), 28);
  }
  if (!was_set("storage.mapped_reads") && !st.ssd.direct_reads) {
    // Mapped while the page cache serves the reads, pread once the device does (docs/storage.md
    // "Reads"): for a table the library's callers open, kOff stays the default.
    st.ssd.mapped_reads = MappedReads::kAuto;
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
