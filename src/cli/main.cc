// ctrbox: train click-through-rate models whose sparse tables outgrow memory.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/config.h"
#include "util/blas.h"
#include "util/logging.h"
#include "util/parse.h"
#include "util/sys.h"

namespace {

// The command line's numeric options go through the parsers of the job keys (util/parse.h),
// never through a conversion that wraps: a sign on an integer, a fraction, a value out of
// [min, max] (zero where it makes no sense) is refused with the option named.
CLI::Validator IntegerIn(uint64_t min, uint64_t max) {
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        uint64_t v = 0;
        if (!ctrbox::ParseUint64(s, &v) || v < min || v > max) {
          return "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                 "], got '" + s + "'";
        }
        return "";
      },
      "INT in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
}
// A finite number in (min, max] (exclusive_min) or [min, max].
CLI::Validator NumberIn(double min, double max, bool exclusive_min) {
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        double v = 0;
        if (!ctrbox::ParseDouble(s, &v) || v > max || v < min || (exclusive_min && v == min)) {
          return std::string("expected a number in ") + (exclusive_min ? "(" : "[") +
                 std::to_string(min) + ", " + std::to_string(max) + "], got '" + s + "'";
        }
        return "";
      },
      "NUMBER");
}

void AddJobOptions(CLI::App* cmd, ctrbox::JobSources* a) {
  cmd->add_option("-c,--config", a->config_path, "YAML job file");
  cmd->add_option("--set", a->sets, "override a job key: --set train.threads=2 (repeatable)");
  cmd->add_option("--data", a->data, "input files or directories");
  cmd->add_option("--format", a->format, "criteo | libsvm | libfm | libffm | slots | shards");
}

int Report(const ctrbox::Status& s) {
  if (s.ok()) return 0;
  if (s.code() == ctrbox::StatusCode::kCancelled) return 130;  // Ctrl-C: the report is printed
  std::fprintf(stderr, "ctrbox: error: %s\n", s.ToString().c_str());
  return 1;
}

// `ctrbox serve`'s options (docs/serve.md), sizes as text until parsed.
struct ServeFlags {
  ctrbox::ServeOptions options;
  ctrbox::JobSources job;
  std::string memory_budget, max_header_bytes, max_body_bytes, max_inflated_bytes;
};

CLI::App* AddServeCommand(CLI::App* app, ServeFlags* f) {
  ctrbox::ServeOptions& serve = f->options;
  auto* serve_cmd = app->add_subcommand(
      "serve", "answer predictions over HTTP (KServe v2), following new versions (docs/serve.md)");
  auto* serve_dir =
      serve_cmd->add_option("--serving-dir", serve.serving_dir, "a stream job's serving.dir");
  auto* serve_model = serve_cmd->add_option("--model-dir", serve.model_dir, "a model directory");
  serve_dir->excludes(serve_model);
  serve_cmd->add_option("--host", serve.http.host, "the address to listen on (127.0.0.1)");
  serve_cmd->add_option("--port", serve.http.port, "the port (8500; 0: any free one)")
      ->check(IntegerIn(0, 65535));
  serve_cmd
      ->add_option("--grpc-port", serve.grpc_port,
                   "also answer KServe v2 over gRPC on this port (0: any free one; default: no "
                   "gRPC)")
      ->check(IntegerIn(0, 65535));
  // One worker per CPU: 8 on 2 CPUs predicted 256-record requests 15-20 % slower
  // (docs/serve.md, "Workers: one per CPU").
  serve.http.workers = ctrbox::NumCpus();
  serve_cmd
      ->add_option("--threads", serve.http.workers,
                   "workers predicting requests at once; open connections take none (default: "
                   "the number of CPUs)")
      ->check(IntegerIn(1, 1024));
  serve_cmd
      ->add_option("--max-connections", serve.http.max_connections,
                   "connections open at once; one more is answered 503 (10000)")
      ->check(IntegerIn(1, 1 << 24));
  serve_cmd
      ->add_option("--header-timeout", serve.http.header_timeout_seconds,
                   "seconds a request's header may take from its first byte (10)")
      ->check(NumberIn(0, 86400, true));
  serve_cmd
      ->add_option("--body-timeout", serve.http.body_timeout_seconds,
                   "seconds a request's body may take, and an answer's write (60)")
      ->check(NumberIn(0, 86400, true));
  serve_cmd
      ->add_option("--idle-timeout", serve.http.idle_timeout_seconds,
                   "seconds a kept-alive connection may wait for its next request (30)")
      ->check(NumberIn(0, 86400, true));
  serve_cmd->add_option("--max-header-bytes", f->max_header_bytes,
                        "a request header's largest size (16KB; larger: 431)");
  serve_cmd->add_option("--max-body-bytes", f->max_body_bytes,
                        "a request body's largest size as sent (64MB; larger: 413)");
  serve_cmd->add_option("--max-inflated-bytes", f->max_inflated_bytes,
                        "a gzip or deflate body's largest size inflated (256MB; larger: 413)");
  serve_cmd
      ->add_option("--poll-seconds", serve.poll_seconds,
                   "how often new versions are looked for (1)")
      ->check(NumberIn(0.01, 3600, false));
  serve_cmd->add_option("--model-name", serve.model_name, "the model's name (ctrbox)");
  serve_cmd->add_option("--rows-dir", serve.rows_dir,
                        "keep each base's rows in a file here (an SSD), mapped, for a model "
                        "larger than memory");
  serve_cmd
      ->add_option("--batch-max-micros", serve.batch_max_micros,
                   "batch the requests that come while the cores are busy predicting: a "
                   "batch's longest wait for a free lane (2000; 0: no batching)")
      ->check(IntegerIn(0, 1000000));
  serve_cmd
      ->add_option("--batch-lanes", serve.batch_lanes,
                   "small predictions at once; small requests that come while they run are "
                   "batched (0: half the cores)")
      ->check(IntegerIn(0, 1024));
  // Its old name (docs/architecture.md, "Words": a slot is a feature field), still taken.
  serve_cmd
      ->add_option_function<int>(
          "--batch-slots",
          [&serve](int n) {
            LOG_WARNING("serve: --batch-slots is now --batch-lanes (it still works)");
            serve.batch_lanes = n;
          },
          "")
      ->check(IntegerIn(0, 1024))
      ->group("");
  serve_cmd
      ->add_option("--batch-max-rows", serve.batch_max_rows,
                   "a batch's most rows; requests of as many are predicted alone (16)")
      ->check(IntegerIn(1, 1 << 20));
  serve_cmd->add_option("-c,--config", f->job.config_path,
                        "the training job of a model trained through a feature graph: requests' "
                        "records are rows of its main view");
  serve_cmd->add_option("--set", f->job.sets, "override a key of the -c job (repeatable)");
  serve_cmd->add_option("--memory-budget", f->memory_budget,
                        "with --rows-dir: the resident bytes of the mapped rows, given back each "
                        "poll above it (e.g. 512MB)");
  return serve_cmd;
}

// The serve command, its options parsed and checked.
int RunServe(ServeFlags* f) {
  ctrbox::ServeOptions& serve = f->options;
  struct Size {
    const char* flag;
    const std::string& text;
    uint64_t* out;
  };
  for (const Size& z :
       {Size{"--memory-budget", f->memory_budget, &serve.memory_budget},
        Size{"--max-header-bytes", f->max_header_bytes, &serve.http.max_header_bytes},
        Size{"--max-body-bytes", f->max_body_bytes, &serve.http.max_body_bytes},
        Size{"--max-inflated-bytes", f->max_inflated_bytes, &serve.http.max_inflated_bytes}}) {
    if (z.text.empty()) continue;
    if (!ctrbox::ParseBytes(z.text, z.out) || *z.out == 0 || *z.out > (uint64_t{1} << 40)) {
      std::fprintf(stderr, "ctrbox: error: %s %s: not a size (16KB, 512MB, 2GB, ...)\n", z.flag,
                   z.text.c_str());
      return ctrbox::kExitUsage;
    }
  }
  if (serve.http.max_body_bytes >= (uint64_t{1} << 32)) {
    std::fprintf(stderr, "ctrbox: error: --max-body-bytes: at most 4GB\n");
    return ctrbox::kExitUsage;
  }
  if (serve.serving_dir.empty() && serve.model_dir.empty()) {
    std::fprintf(stderr, "ctrbox: error: serve needs --serving-dir or --model-dir\n");
    return ctrbox::kExitUsage;
  }
  if (!f->job.config_path.empty()) {
    auto job = ctrbox::BuildJobConfig(f->job);
    if (!job.ok()) return Report(job.status());
    serve.graph = ctrbox::ServeGraphOptions{job->features, job->data};
  } else if (!f->job.sets.empty()) {
    std::fprintf(stderr, "ctrbox: error: serve's --set overrides keys of a -c job\n");
    return ctrbox::kExitUsage;
  }
  return Report(ctrbox::RunServeCommand(serve));
}

// Every command's flags, as parsed.
struct Flags {
  ctrbox::JobSources train_args, eval_args, predict_args, convert_args, extract_args;
  ctrbox::GenArgs gen;
  ctrbox::ConvertArgs convert, extract;
  bool explain = false;
  std::string inspect_dir, inspect_store, inspect_ckpt, inspect_serving;
  std::string report_dir, report_metrics, report_out;
  int local_ranks = 1;
  std::string id_column;
  ServeFlags serve;
};

struct Commands {
  CLI::App *train, *eval, *predict, *inspect, *report, *gen, *convert, *extract, *config, *serve;
};

// train, eval and predict: the jobs.
void AddJobCommands(CLI::App* app, Flags* f, Commands* c) {
  c->train = app->add_subcommand("train", "train a model (generated data if no --data)");
  AddJobOptions(c->train, &f->train_args);
  f->train_args.train = true;  // (--format csv | tsv guesses a graph; job-file data checked)
  c->train->add_option("--model-dir", f->train_args.model_dir,
                       "where the model is saved (and continued from)");
  c->train->add_option("--eval-data", f->train_args.eval_data,
                       "data to evaluate on after training");
  auto* fresh = c->train->add_flag("--fresh", f->train_args.fresh,
                                   "start a new model even if --model-dir (or ckpt.dir) holds one");
  c->train
      ->add_flag("--continue", f->train_args.continue_model,
                 "train the model in --model-dir further (train.continue)")
      ->excludes(fresh);
  c->train
      ->add_flag("--resume", f->train_args.resume,
                 "continue from the newest complete checkpoint in ckpt.dir (or start the job "
                 "if there is none)")
      ->excludes("--fresh");
  c->train
      ->add_option("--local-ranks", f->local_ranks,
                   "run the job as this many ranks of a distributed job, as threads of this "
                   "process (to try a job before mpirun; docs/distributed.md)")
      ->check(IntegerIn(1, 64));

  c->eval = app->add_subcommand("eval", "AUC, logloss and COPC of a model on data");
  AddJobOptions(c->eval, &f->eval_args);
  c->eval->add_option("--model-dir", f->eval_args.model_dir, "the model")->required();

  c->predict = app->add_subcommand("predict", "one probability per input line (stdin by default)");
  AddJobOptions(c->predict, &f->predict_args);
  c->predict->add_option("--model-dir", f->predict_args.model_dir, "the model")->required();
  c->predict->add_option("--id-column", f->id_column,
                         "with a feature graph (-c): write `id<TAB>probability` per row that the "
                         "graph keeps, the id from this column");
}

// inspect and report: over the files a job wrote.
void AddFileCommands(CLI::App* app, Flags* f, Commands* c) {
  c->inspect = app->add_subcommand(
      "inspect", "verify a model directory, SSD store or checkpoints and report them");
  auto* model_opt = c->inspect->add_option("--model-dir", f->inspect_dir, "a model directory");
  auto* store_opt = c->inspect->add_option("--store", f->inspect_store,
                                           "an SSD store directory (storage.ssd_dir)");
  auto* ckpt_opt =
      c->inspect->add_option("--ckpt-dir", f->inspect_ckpt, "a checkpoint directory (ckpt.dir)");
  auto* serving_opt = c->inspect->add_option("--serving-dir", f->inspect_serving,
                                             "a stream job's serving directory (serving.dir)");
  model_opt->excludes(store_opt)->excludes(ckpt_opt)->excludes(serving_opt);
  store_opt->excludes(ckpt_opt)->excludes(serving_opt);
  ckpt_opt->excludes(serving_opt);
  c->inspect->require_option(1);

  c->report = app->add_subcommand(
      "report", "an HTML page of a train job's curves, stage times, cache and memory");
  c->report->add_option("--model-dir", f->report_dir, "the model directory (its metrics.jsonl)");
  c->report->add_option("--metrics", f->report_metrics,
                        "the metrics log (default <model-dir>/metrics.jsonl)");
  c->report->add_option("--out", f->report_out,
                        "the page to write (default <model-dir>/report.html)");
  c->report->require_option(1, 3);
}

CLI::App* AddGenCommand(CLI::App* app, ctrbox::GenArgs* gen) {
  auto* gen_cmd = app->add_subcommand("gen", "write a synthetic click log with a planted model");
  gen_cmd->add_option(
      "--format", gen->format,
      "criteo | libsvm | libfm | libffm | slots | views (a directory of raw views and "
      "their job: docs/features.md)");
  gen_cmd->add_option("--test-rows", gen->test_rows, "views: held-out rows (default rows / 5)")
      ->check(IntegerIn(1, uint64_t{1} << 40));
  gen_cmd->add_option("--rows", gen->rows, "rows to write")->check(IntegerIn(1, uint64_t{1} << 40));
  gen_cmd->add_option("--seed", gen->seed, "seed (the planted model does not depend on it)")
      ->check(IntegerIn(0, UINT64_MAX));
  gen_cmd->add_option("--out", gen->out, "output file (views: directory)")->required();
  gen_cmd->add_option("--threads", gen->threads, "generator threads (default: number of CPUs)")
      ->check(IntegerIn(0, 1024));
  gen_cmd->add_option("--vocab-scale", gen->vocab_scale, "multiply every slot's vocabulary")
      ->check(NumberIn(0, 1e6, /*exclusive_min=*/true));
  gen_cmd->add_option("--zipf", gen->zipf, "Zipf exponent of the ids (> 1; default 1.15)")
      ->check(NumberIn(1, 100, /*exclusive_min=*/true) | CLI::IsMember({"0"}));

  auto* partitions_opt =
      gen_cmd
          ->add_option("--partitions", gen->partitions,
                       "write a stream's data root at --out: this many partitions of --rows rows "
                       "each, with their done files (docs/routine.md)")
          ->check(IntegerIn(1, 1000000));
  // The stream's options apply to --partitions alone: given without it, they are an error.
  gen_cmd->add_option("--layout", gen->layout, "partitions: how they are named ({day}/{hour})")
      ->needs(partitions_opt);
  gen_cmd->add_option("--start", gen->start, "partitions: the first one's name (20261101/00)")
      ->needs(partitions_opt);
  gen_cmd->add_option("--done-file", gen->done_file, "partitions: the marker of a ready one")
      ->needs(partitions_opt);
  gen_cmd
      ->add_option("--interval", gen->interval,
                   "partitions: seconds between two landing (0: all at once)")
      ->check(NumberIn(0, 1e6, false))
      ->needs(partitions_opt);
  gen_cmd
      ->add_option("--ctr-drift", gen->ctr_drift,
                   "partitions: amplitude of the daily cycle of the click rate (logit)")
      ->check(NumberIn(0, 10, false))
      ->needs(partitions_opt);
  gen_cmd
      ->add_option("--new-id-share", gen->new_id_share,
                   "partitions: share of ids that are the partition's own new ids")
      ->check(NumberIn(0, 1, false))
      ->needs(partitions_opt);

  return gen_cmd;
}

// convert and extract: binary shards.
void AddShardCommands(CLI::App* app, Flags* f, Commands* c) {
  c->convert = app->add_subcommand("convert", "convert text input to binary shards");
  AddJobOptions(c->convert, &f->convert_args);
  c->convert->add_option("--out", f->convert.out, "output directory")->required();
  c->convert->add_option("--codec", f->convert.codec, "zstd | lz4 | none");
  c->convert->add_option("--block-rows", f->convert.block_rows, "rows per shard block")
      ->check(IntegerIn(1, 1 << 24));
  c->convert->add_option("--rows-per-file", f->convert.rows_per_file, "rows per shard file")
      ->check(IntegerIn(1, uint64_t{1} << 40));

  c->extract = app->add_subcommand(
      "extract", "run a job's feature graph over its views; write the rows as binary shards");
  AddJobOptions(c->extract, &f->extract_args);
  auto* extract_out = c->extract->add_option("--out", f->extract.out, "output directory");
  auto* extract_text = c->extract->add_option(
      "--text", f->extract.text_out,
      "write the rows as text to this file instead: label, dense values, each slot's keys "
      "(tab-separated)");
  extract_out->excludes(extract_text);
  c->extract->add_option("--codec", f->extract.codec, "zstd | lz4 | none");
  c->extract->add_option("--block-rows", f->extract.block_rows, "rows per shard block")
      ->check(IntegerIn(1, 1 << 24));
  c->extract->add_option("--rows-per-file", f->extract.rows_per_file, "rows per shard file")
      ->check(IntegerIn(1, uint64_t{1} << 40));
  c->extract->add_flag("--explain", f->explain, "print the graph's layers and operators first");
}

// Runs the command parsed.
int RunParsed(Flags* f, const Commands& c) {
  if (!f->id_column.empty()) f->predict_args.sets.push_back("data.id_column=" + f->id_column);
  if (c.train->parsed() || c.eval->parsed() || c.predict->parsed() || c.convert->parsed() ||
      c.extract->parsed()) {
    const ctrbox::JobSources& a = c.train->parsed()     ? f->train_args
                                  : c.eval->parsed()    ? f->eval_args
                                  : c.predict->parsed() ? f->predict_args
                                  : c.extract->parsed() ? f->extract_args
                                                        : f->convert_args;
    auto job = ctrbox::BuildJobConfig(a);
    if (!job.ok()) return Report(job.status());
    if (c.train->parsed()) return Report(ctrbox::RunTrainCommand(*job, f->local_ranks));
    if (c.eval->parsed()) return Report(ctrbox::RunEvalCommand(*job));
    if (c.predict->parsed()) return Report(ctrbox::RunPredictCommand(*job, !a.data.empty()));
    if (c.extract->parsed()) return Report(ctrbox::RunExtractCommand(*job, f->extract, f->explain));
    return Report(ctrbox::RunConvertCommand(*job, f->convert));
  }
  if (c.report->parsed()) {
    if (f->report_dir.empty() && (f->report_metrics.empty() || f->report_out.empty())) {
      std::fprintf(stderr, "ctrbox: error: report needs --model-dir, or --metrics and --out\n");
      return ctrbox::kExitUsage;
    }
    return Report(ctrbox::RunReportCommand(f->report_dir, f->report_metrics, f->report_out));
  }
  if (c.inspect->parsed())
    return Report(ctrbox::RunInspectCommand(f->inspect_dir, f->inspect_store, f->inspect_ckpt,
                                            f->inspect_serving));
  if (c.gen->parsed()) return Report(ctrbox::RunGenCommand(f->gen));
  if (c.serve->parsed()) return RunServe(&f->serve);
  if (c.config->parsed()) {
    std::cout << ctrbox::ConfigReference();
    return 0;
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  ctrbox::blas::SelectFittingCores(argv);  // may restart the program with fitting BLAS kernels
  ctrbox::InitLogging(ctrbox::LogLevel::kInfo);
  ctrbox::InstallCrashBacktrace();  // a crash names its stack (the GPU machines have no gdb)
  ctrbox::ConfigureAllocator();

  CLI::App app{"ctrbox: CTR model training over sparse tables larger than memory"};
  app.require_subcommand(1);
  Flags f;
  Commands c;
  AddJobCommands(&app, &f, &c);
  AddFileCommands(&app, &f, &c);
  c.gen = AddGenCommand(&app, &f.gen);
  AddShardCommands(&app, &f, &c);
  c.config = app.add_subcommand("config", "list every job key with its default");
  c.serve = AddServeCommand(&app, &f.serve);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints and exits 0; every other parse error (an unknown option or command, a bad
    // or missing value) is a usage error, with the conventional status 2.
    return app.exit(e) == 0 ? 0 : ctrbox::kExitUsage;
  }
  ctrbox::InstallSignalHandlers();
  return RunParsed(&f, c);
}
