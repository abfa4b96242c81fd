// train, eval and predict: the pipeline's jobs (pipeline/trainer.h, pipeline/evaluator.h).
// This file includes pipeline/ and util/ headers only.
#include <signal.h>

#include <atomic>
#include <csignal>
#include <cstdio>

#include "cli/commands.h"
#include "cli/progress.h"
#include "pipeline/evaluator.h"
#include "pipeline/trainer.h"
#include "util/logging.h"

namespace ctrbox {

Status RunTrainCommand(const JobConfig& job) {
  if (job.model_dir.empty()) LOG_INFO("no --model-dir given: the trained model is not saved");
  if (job.data.paths.empty()) {
    LOG_INFO("no --data given: training on {} generated {} rows (seed {}), testing on {} more",
             job.generated.rows, DataFormatName(job.generated.layout), job.generated.seed,
             job.generated.test_rows);
  }
  ProgressPrinter progress;
  // Ctrl-C (or SIGTERM) stops after the pass in training is pushed and saves the model; a
  // second one ends the process at once.
  static std::atomic<bool> stop{false};
  struct sigaction sa = {};
  sa.sa_handler = [](int sig) {
    stop.store(true);
    std::signal(sig, SIG_DFL);
  };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  ASSIGN_OR_RETURN(nlohmann::json report, RunTrain(Env::Posix(), job, &progress, &stop));
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  if (report.value("interrupted", false)) {
    LOG_WARNING("interrupted: stopped after {} examples; the model trained so far is saved{}",
                report["examples"].get<uint64_t>(),
                job.model_dir.empty() ? " (nowhere: no --model-dir)" : " in " + job.model_dir);
    PrintJson(report);
    return CancelledError("interrupted");
  }
  if (report.contains("test_auc")) {
    const nlohmann::json& auc = report["test_auc"];
    LOG_INFO("trained on {} examples at {:.0f} examples/s: test AUC {}{}",
             report["examples"].get<uint64_t>(), report["examples_per_s"].get<double>(),
             auc.is_number() ? fmt::format("{:.4f}", auc.get<double>())
                             : "undefined (" + report.value("test_auc_undefined", "") + ")",
             report.contains("oracle_auc")
                 ? fmt::format(" (oracle {:.4f})", report["oracle_auc"].get<double>())
                 : "");
  }
  PrintJson(report);
  return Status::OK();
}

Status RunEvalCommand(const JobConfig& job) {
  ASSIGN_OR_RETURN(nlohmann::json report, RunEval(Env::Posix(), job));
  PrintJson(report);
  return Status::OK();
}

Status RunPredictCommand(const JobConfig& job) { return RunPredict(Env::Posix(), job, stdout); }

}  // namespace ctrbox
