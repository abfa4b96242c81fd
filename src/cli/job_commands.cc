// train, eval and predict: the pipeline's jobs (jobs/trainer.h, jobs/evaluator.h).
// This file includes pipeline/ and util/ headers only.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>
#include <variant>
#include <vector>

#include "cli/commands.h"
#include "cli/progress.h"
#include "dist/comm.h"
#include "dist/mpi_comm.h"
#include "jobs/data.h"  // KillDataCommands (io/reader.h, which data.h exports)
#include "jobs/evaluator.h"
#include "jobs/stream.h"
#include "jobs/trainer.h"
#include "util/logging.h"

namespace ctrbox {

void ConfigureAllocator() {
  // Every pass allocates its buffers (examples, working set, rows: megabytes) and frees them
  // at its push. glibc serves such blocks with mmap and unmaps them on free, so each pass
  // paid page faults and zeroing again (measured: 10 % of the examples/s at the small passes
  // of a memory budget). Keep blocks up to 32 MiB in the heap instead. Larger ones (the
  // buffers of passes of 100 K+ examples) are still mapped: kept in the heap they can stay
  // resident in the malloc arenas after their pass (a 3 M-row run at a 200 MB budget peaked
  // 50 MB higher with the earlier 512 MiB threshold; docs/storage.md, the scale run).
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

void InstallSignalHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = [](int sig) {
    KillDataCommands();
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

const std::atomic<bool>* StopOnSignals(const char* second) {
  static std::atomic<bool> stop{false};
  static std::atomic<int> signals{0};
  static std::atomic<const char*> message{nullptr};
  message.store(second);
  struct sigaction sa = {};
  sa.sa_handler = [](int) {
    if (signals.fetch_add(1) == 0) {
      stop.store(true);
      return;
    }
    const char* m = message.load();
    (void)!::write(STDERR_FILENO, m, std::strlen(m));
    KillDataCommands();  // none is left running, orphaned
    ::_exit(kExitAbandoned);
  };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return &stop;
}

namespace {

// The log's last line of a train job that evaluated held-out data.
void LogTestAuc(const TrainReport& report) {
  if (!report.test) return;
  const MetricSummary& test = *report.test;
  LOG_INFO(
      "trained on {} examples at {:.0f} examples/s: test AUC {}{}", report.examples,
      report.examples_per_s,
      test.auc_undefined == nullptr ? fmt::format("{:.4f}", test.auc)
                                    : "undefined (" + std::string(test.auc_undefined) + ")",
      report.oracle_auc
          ? fmt::format("; the oracle's {:.4f} is the generator's own click probability scored on "
                        "the same rows: a ceiling, not a target (a model learns it only from far "
                        "more than {} rows, most of whose ids appear a few times)",
                        *report.oracle_auc, report.examples)
          : "");
}

// What a rank's job reported: a train job's or a stream job's.
using JobReport = std::variant<TrainReport, StreamReport>;

// The job the command runs, picked here once: a stream job (stream.root) or a job of files.
StatusOr<JobReport> RunJob(const JobConfig& job, ProgressSink* sink, const std::atomic<bool>* stop,
                           Comm* comm) {
  if (job.stream.enabled()) {
    ASSIGN_OR_RETURN(StreamReport r, RunStream(Env::Posix(), job, sink, stop, comm));
    return JobReport(std::move(r));
  }
  ASSIGN_OR_RETURN(TrainReport r, RunTrain(Env::Posix(), job, sink, stop, comm));
  return JobReport(std::move(r));
}

// Rank 0's lines: the test AUC of a train job, and the report.
void ShowReport(const JobReport& report) {
  if (const auto* train = std::get_if<TrainReport>(&report)) {
    LogTestAuc(*train);
    PrintJson(train->ToJson());
  } else {
    PrintJson(std::get<StreamReport>(report).ToJson());
  }
}

// One rank of an mpirun job. Rank 0 prints the report; an error on any rank ends every rank
// (MPI_Abort: mpirun names the rank that stopped the job and exits non-zero).
Status RunMpiTrain(const JobConfig& job) {
  ASSIGN_OR_RETURN(std::unique_ptr<Comm> comm, OpenMpiWorld(job.dist.timeout_seconds));
  LOG_INFO("rank {} of {} (MPI)", comm->rank(), comm->size());
  StatusOr<JobReport> report = RunJob(job, nullptr, nullptr, comm.get());
  if (!report.ok()) {
    const Status s = OnRank(*comm, report.status());
    comm->Abort(s);  // prints it, and does not return under MPI
    return s;
  }
  if (comm->rank() == 0) ShowReport(*report);
  return Status::OK();
}

// n ranks as threads (LocalGroup); rank 0 prints the report; the first rank's error is the
// command's.
Status RunLocalRanks(const JobConfig& job, int n) {
  LocalGroup group(n, job.dist.timeout_seconds);
  std::vector<StatusOr<JobReport>> reports(n, InternalError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Comm* comm = group.rank(r);
      reports[r] = RunJob(job, nullptr, nullptr, comm);
      // A rank that failed names itself; the others fail with its error (the group's abort).
      if (!reports[r].ok()) {
        reports[r] = OnRank(*comm, reports[r].status());
        comm->Abort(reports[r].status());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : reports) RETURN_IF_ERROR(r.status());
  ShowReport(*reports[0]);
  return Status::OK();
}

// A stream job (docs/routine.md): Ctrl-C stops it between partitions, or abandons the
// partition in training (it is trained again at the next start).
Status RunStreamCommand(const JobConfig& job) {
  const std::atomic<bool>* stop = StopOnSignals(
      "\nctrbox: second interrupt: stopped at once; the stream's checkpoints and published "
      "versions keep what they last committed (exit status 3)\n");
  ASSIGN_OR_RETURN(StreamReport report, RunStream(Env::Posix(), job, nullptr, stop));
  InstallSignalHandlers();
  PrintJson(report.ToJson());
  if (report.interrupted) return CancelledError("interrupted");
  return Status::OK();
}

}  // namespace

// The feature graph guessed for a CSV or TSV file, as a job file beside the model (written
// before training: the user has it whatever happens next), or in the log without a model dir.
Status SaveGuessedJob(const JobConfig& job) {
  if (job.guessed_job.empty()) return Status::OK();
  if (job.model_dir.empty()) {
    LOG_INFO("the guessed job (save it, edit it, train with -c):\n{}", job.guessed_job);
    return Status::OK();
  }
  const std::string path = JoinPath(job.model_dir, "job.yaml");
  RETURN_IF_ERROR(Env::Posix()->CreateDirs(job.model_dir));
  RETURN_IF_ERROR(WriteFileAtomic(Env::Posix(), path, job.guessed_job));
  LOG_INFO(
      "the guessed job is {}: edit it and train with -c {}; eval, predict and serve read "
      "through it (-c {})",
      path, path, path);
  return Status::OK();
}

Status RunTrainCommand(const JobConfig& job, int local_ranks) {
  if (!LaunchedByMpirun()) RETURN_IF_ERROR(SaveGuessedJob(job));
  if (LaunchedByMpirun()) {
    if (local_ranks > 1)
      return InvalidArgumentError("--local-ranks under mpirun: use one or the other");
    return RunMpiTrain(job);
  }
  if (local_ranks > 1) return RunLocalRanks(job, local_ranks);
  if (job.stream.enabled()) return RunStreamCommand(job);
  if (job.model_dir.empty()) LOG_INFO("no --model-dir given: the trained model is not saved");
  if (IsGenerated(job.data)) {
    LOG_INFO("no --data given: training on {} generated {} rows (seed {}), testing on {} more",
             job.generated.rows, DataFormatName(job.generated.layout), job.generated.seed,
             job.generated.test_rows);
  }
  ProgressPrinter progress;
  // Ctrl-C (or SIGTERM) stops after the pass in training is pushed and saves the model (exit
  // 130); a second one ends the process at once, saying so, with exit status 3
  // (kExitAbandoned): what was not committed yet is abandoned, the model directory and the
  // checkpoints keep their last commit (commits are atomic).
  const std::atomic<bool>* stop = StopOnSignals(
      "\nctrbox: second interrupt: stopped at once, abandoning the save or the passes in "
      "progress; the model directory and the checkpoints keep what they last committed "
      "(exit status 3)\n");
  ASSIGN_OR_RETURN(TrainReport report, RunTrain(Env::Posix(), job, &progress, stop));
  InstallSignalHandlers();
  if (report.interrupted && !report.saved) {
    LOG_WARNING("interrupted before any example was trained: nothing was saved{}",
                job.model_dir.empty() ? "" : " (" + job.model_dir + " is as it was)");
    PrintJson(report.ToJson());
    return CancelledError("interrupted");
  }
  if (report.interrupted) {
    LOG_WARNING("interrupted: stopped after {} examples; the model trained so far is saved{}",
                report.examples,
                job.model_dir.empty() ? " (nowhere: no --model-dir)" : " in " + job.model_dir);
    PrintJson(report.ToJson());
    return CancelledError("interrupted");
  }
  LogTestAuc(report);
  PrintJson(report.ToJson());
  return Status::OK();
}

Status RunEvalCommand(const JobConfig& job) {
  ASSIGN_OR_RETURN(EvalReport report, RunEval(Env::Posix(), job));
  const MetricSummary& m = report.metrics;
  LOG_INFO(
      "evaluated {} examples: AUC {} (as train reports test_auc; exact over {} examples: "
      "{}), logloss {:.4f}",
      m.examples, m.auc_undefined == nullptr ? fmt::format("{:.4f}", m.auc) : "undefined",
      report.exact_auc_examples,
      report.exact_auc ? fmt::format("{:.6f}", *report.exact_auc) : "undefined", m.logloss);
  PrintJson(report.ToJson());
  return Status::OK();
}

Status RunPredictCommand(JobConfig job, bool data_given) {
  // predict scores --data, else standard input: a job file's data.paths (or data.command) is
  // its training data, never the rows to score.
  if (!data_given && (!job.data.paths.empty() || !job.data.command.empty())) {
    LOG_INFO(
        "predict reads standard input (give files with --data): the job file's data is its "
        "training data, not the rows to score");
    job.data.paths.clear();
    job.data.command.clear();
  }
  return RunPredict(Env::Posix(), job, stdout);
}

Status RunServeCommand(const ServeOptions& options) {
  const std::atomic<bool>* stop = StopOnSignals("ctrbox: serve abandoned at a second signal\n");
  return RunServer(Env::Posix(), options, stop, [&](int port, int grpc_port) {
    nlohmann::json line = {
        {"command", "serve"},
        {"listening", fmt::format("{}:{}", options.http.host, port)},
        {"port", port},
        {"source", options.serving_dir.empty() ? options.model_dir : options.serving_dir}};
    if (grpc_port >= 0) line["grpc_port"] = grpc_port;
    PrintJson(line);
  });
}

}  // namespace ctrbox
