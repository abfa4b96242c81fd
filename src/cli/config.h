// Job configuration: the YAML job file and --set overrides, mapped onto JobConfig.
//
// Every key is declared once in a registry (name, default, meaning, parser), which drives
// the YAML reader, --set, validation and `ctrbox config` (the reference in docs/config.md).
// Unknown keys and bad values are errors that name the key (and the file and line).
#ifndef CTRBOX_CLI_CONFIG_H_
#define CTRBOX_CLI_CONFIG_H_

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "jobs/job.h"

namespace ctrbox {

class JobConfigBuilder {
 public:
  JobConfigBuilder();

  // Applies every key of a YAML job file (nested maps are dotted keys).
  Status LoadYaml(const std::string& path);
  // Applies one "key=value".
  Status ApplySet(std::string_view assignment);
  // Applies one key; `origin` names where it came from, for messages.
  Status Set(std::string_view key, std::string_view value, std::string_view origin);
  // Applies defaults that depend on other keys and validates the whole job.
  StatusOr<JobConfig> Finish();

  bool was_set(const std::string& key) const { return set_keys_.count(key) > 0; }
  // Where key was set last ("job.yaml:3", "--set"), or "".
  std::string origin(const std::string& key) const {
    auto it = origins_.find(key);
    return it == origins_.end() ? "" : it->second;
  }
  JobConfig& job() { return job_; }
  const JobConfig& job_const() const { return job_; }

 private:
  JobConfig job_;
  std::set<std::string> set_keys_;
  std::map<std::string, std::string> origins_;
};

// Where a job's settings come from besides the defaults, in the order they apply: a YAML job
// file, "key=value" overrides (--set), keys set one by one with where each came from (the
// Python module's dict and keyword arguments), then the flags, which override all of them.
struct JobSources {
  struct Entry {
    std::string key, value, origin;
  };
  std::string config_path;
  std::vector<std::string> sets;
  std::vector<Entry> keys;
  std::vector<std::string> data, eval_data;
  std::string format, model_dir;
  bool fresh = false, resume = false, continue_model = false;
  // The train command's sources: --format csv or tsv (or a first data file named *.csv with
  // no format set) guesses the feature graph from the file's header and a sample
  // (feature/csv_guess.h), and a job file's data files are checked to exist, named with the
  // job file's line, before anything is read.
  bool train = false;
  // A feature graph given as YAML (or JSON) text of the `features:` node, from `origin` (the
  // Python module's dict config); docs/features.md.
  std::string features_text, features_origin;
};

// The validated job of `sources` (the first bad key or value is the error, named).
StatusOr<JobConfig> BuildJobConfig(const JobSources& sources);

// The reference of every key (Markdown table rows: key, default, meaning).
std::string ConfigReference();

}  // namespace ctrbox

#endif  // CTRBOX_CLI_CONFIG_H_
