// The job keys' value grammars (cli/config.cc's builder applies them; config_keys.cc lists
// the keys): a setter parses a value's text and assigns it, or says what it expected.
// Internal to src/cli.
#ifndef CTRBOX_CLI_CONFIG_GRAMMARS_H_
#define CTRBOX_CLI_CONFIG_GRAMMARS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "jobs/job.h"

namespace ctrbox::config {

// Parses a value into the job; returns false and fills *expect (what a good value looks
// like) on a bad one.
using Setter = std::function<bool(JobConfig*, std::string_view, std::string* expect)>;

struct Key {
  const char* name;
  const char* default_text;
  const char* help;
  Setter set;
};

// Every job key, in section order (config_keys.cc).
const std::vector<Key>& Keys();
// A key renamed since: the old name still sets the new key, with a deprecation warning.
struct RenamedKey {
  const char* old_name;
  const char* new_name;
};
const std::vector<RenamedKey>& RenamedKeys();

// ---- the grammars ----
Setter UInt(std::function<void(JobConfig*, uint64_t)> assign, uint64_t min, uint64_t max);
Setter Float(std::function<void(JobConfig*, float)> assign, double min, double max);
Setter Bool(std::function<void(JobConfig*, bool)> assign);
Setter Bytes(std::function<void(JobConfig*, uint64_t)> assign, uint64_t min);
// storage.memory_budget: bytes, or a share of the job's memory box (util/memory_box.h), e.g. 45%.
Setter MemoryBudget();
Setter Text(std::function<void(JobConfig*, std::string)> assign);
Setter List(std::function<void(JobConfig*, std::vector<std::string>)> assign);
Setter Format(std::function<void(JobConfig*, DataFormat)> assign, bool allow_shards);
Setter Optimizer(std::function<OptimizerOptions*(JobConfig*)> field, bool sparse);
Setter Device();
Setter Epochs();
Setter Gemm();
Setter DiskProbe();
Setter MappedReadsMode();
Setter Scatter();
Setter OnLate();
Setter SparseUpdates();
Setter Rounding();
Setter SlotFromSetter();
Setter Widths(std::vector<uint32_t> ModelOptions::*field = &ModelOptions::mlp);
Setter SlotGroups();
Setter DenseGroups();
Setter SlotDimGroups();
Setter TowerShapes();

}  // namespace ctrbox::config

#endif  // CTRBOX_CLI_CONFIG_GRAMMARS_H_
