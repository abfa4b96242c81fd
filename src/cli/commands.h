// The ctrbox subcommands. Each returns OK or the error to report; results go to standard
// output (train, eval and inspect end with one JSON line), logs to standard error.
#ifndef CTRBOX_CLI_COMMANDS_H_
#define CTRBOX_CLI_COMMANDS_H_

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/config.h"
#include "serve/server.h"

namespace ctrbox {

struct GenArgs {
  std::string format = "criteo";
  uint64_t rows = 100000;
  uint64_t seed = 1;
  std::string out;
  int threads = 0;  // 0: number of CPUs
  double vocab_scale = 1.0;
  double zipf = 0.0;
  uint64_t test_rows = 0;  // --format views: held-out rows (0: rows / 5)
  // --partitions N: a stream's data root at --out (docs/routine.md): N partitions of --rows
  // rows each, named by --layout from --start, each with its done file, one every
  // --interval seconds (0: all at once).
  uint32_t partitions = 0;
  std::string layout = "{day}/{hour}";
  std::string start = "20261101/00";
  std::string done_file = "_SUCCESS";
  double interval = 0;
  double ctr_drift = 0.3;
  double new_id_share = 0.05;
};

struct ConvertArgs {
  std::string out;
  std::string codec = "zstd";
  uint32_t block_rows = 65536;
  uint64_t rows_per_file = 1 << 22;
  // extract: write the rows as text to this file instead of shards: per row, tab-separated,
  // the label, each dense value, and each slot's keys (decimal, space-separated).
  std::string text_out;
  // Polled between batches: once set (Ctrl-C), the command stops and removes its output.
  const std::atomic<bool>* stop = nullptr;
};

// Exit statuses (README, "Errors and exit codes"): 0 done; 1 an error (bad input, settings or
// files, named on standard error); kExitUsage a command line that does not parse;
// kExitAbandoned after a second Ctrl-C or SIGTERM, which abandons what was not committed;
// 130 stopped by the first one (the model trained so far saved, if any was trained).
constexpr int kExitUsage = 2;
constexpr int kExitAbandoned = 3;

// Prints j as one line of standard output.
void PrintJson(const nlohmann::json& j);

// Ctrl-C and SIGTERM in every command: the default action (the process ends), after stopping
// any data.command, which runs in its own process group out of a terminal's reach. The train
// command replaces this with its own handling while it runs (a clean stop, then a second
// signal's abandon).
void InstallSignalHandlers();
// ctrbox serve: prints {"command": "serve", "listening": "HOST:PORT", ...} once it answers,
// serves until SIGTERM or Ctrl-C, then drains and returns OK.
Status RunServeCommand(const ServeOptions& options);
// For a command that stops cleanly (train, convert, extract): the first Ctrl-C or SIGTERM sets
// the returned flag, which the command polls (and its readers, as data.cancel); a second ends
// the process at once with kExitAbandoned, writing `second` (a static string) to stderr.
const std::atomic<bool>* StopOnSignals(const char* second);

// The allocator settings of a ctrbox process (main, and the Python module when imported):
// per-pass buffers stay in the heap instead of being mapped and unmapped every pass.
void ConfigureAllocator();

// Writes the generated log and returns what `ctrbox gen` prints (rows, bytes, oracle AUC).
StatusOr<nlohmann::json> RunGen(const GenArgs& args);
Status RunGenCommand(const GenArgs& args);
Status RunConvertCommand(const JobConfig& job, const ConvertArgs& args);
// `ctrbox extract`: the job's read and extract stages alone, the extracted rows written as
// shards (docs/features.md); `explain`: print the graph's layers first.
Status RunExtractCommand(const JobConfig& job, const ConvertArgs& args, bool explain);
// local_ranks > 1: the job's ranks as threads of this process (docs/distributed.md); started
// by mpirun, the process is one rank of the MPI job.
Status RunTrainCommand(const JobConfig& job, int local_ranks = 1);
Status RunEvalCommand(const JobConfig& job);
// Scores --data (`data_given`), else standard input: never a job file's training data.
Status RunPredictCommand(JobConfig job, bool data_given);
// Inspects a model directory, (store_dir) the SSD store a clean shutdown left, (ckpt_dir) a
// train job's checkpoints, or (serving_dir) a stream job's published versions.
Status RunInspectCommand(const std::string& model_dir, const std::string& store_dir,
                         const std::string& ckpt_dir, const std::string& serving_dir = "");
// Writes the HTML report of a train job's metrics log (docs/report.md): metrics_path, or
// <model_dir>/metrics.jsonl; to out, or <model_dir>/report.html.
Status RunReportCommand(const std::string& model_dir, const std::string& metrics_path,
                        const std::string& out);

}  // namespace ctrbox

#endif  // CTRBOX_CLI_COMMANDS_H_
