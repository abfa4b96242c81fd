#include "pipeline/stages.h"

#include <utility>

#include "ckpt/model_files.h"
#include "dist/collectives.h"
#include "feature/extractor.h"
#include "pipeline/pass_record.h"
#include "util/sys.h"
#include "working/working_set.h"

namespace ctrbox {
namespace {

// The rows `table` takes before it trains from the passes in flight `ahead` (ascending), into
// `out` (ascending): each from the newest pass that holds it (SharedWithNewest). `claimed`
// ends sized to the table with a 1 for every such row.
void TakeFromNewest(const WorkingTable& table, InFlight::Tables* ahead,
                    std::vector<uint8_t>* claimed, ThreadPool* pool,
                    std::vector<std::pair<std::shared_ptr<const WorkingTable>, SharedRows>>* out) {
  std::vector<const WorkingTable*> tables;
  for (const auto& [index, t] : *ahead) tables.push_back(t.get());
  std::vector<SharedRows> shared;
  SharedWithNewest(table, tables, &shared, claimed, pool);
  for (size_t t = 0; t < shared.size(); ++t) {
    if (!shared[t].empty()) out->emplace_back(std::move((*ahead)[t].second), std::move(shared[t]));
  }
}

}  // namespace

PassStages::PassStages(const StageContext& ctx)
    : ctx_(ctx),
      in_flight_(ctx.start.passes),
      tables_(std::make_shared<TableRecycler>(
          passes_gauge_, ctx.reader == nullptr || ctx.reader->options().pass_memory == 0)),
      next_index_(ctx.start.passes),
      predictions_(ctx.options.batch_size),
      sink_(ctx.sink) {}

void PassStages::Start() {
  run_clock_.Reset();
  storage_before_ = ctx_.table->Storage();
}

TrainPosition PassStages::Position() const {
  TrainPosition p = ctx_.start;
  p.passes += passes_;
  p.grid_passes += grid_passes_;
  p.examples += examples_;
  p.trained_examples += examples_;
  p.embeddings_created += created_;
  p.keys_shrunk += shrunk_;
  return p;
}

// ---- read ------------------------------------------------------------------------------------

StatusOr<PassPtr> PassStages::Read(ThreadPool* pool) {
  Stopwatch clock;
  auto pass = std::make_unique<Pass>(ctx_.model->value_layout());
  if (!local_eof_) {  // the buffers of a pushed pass, if some are parked (Next resets them)
    MutexLock l(&spare_mu_);
    if (spare_ != nullptr) {
      pass->examples = std::move(spare_->examples);
      pass->ws = std::move(spare_->ws);
      spare_.reset();
      passes_gauge_->Add(-spare_bytes_);
      spare_bytes_ = 0;
    }
  }
  bool eof = local_eof_;
  Stopwatch input;
  if (!eof) RETURN_IF_ERROR(ctx_.reader->Next(&pass->examples, &eof, &pass->place, pool));
  split_.read_input += input.Seconds();
  if (ctx_.comm != nullptr) {
    // A pass while any rank has rows; a rank whose share ran out takes part with none.
    local_eof_ = eof;
    uint64_t more = eof ? 0 : 1;
    RETURN_IF_ERROR(AllReduceMax(ctx_.comm->channel(kReadChannel), &more, 1));
    eof = more == 0;
    if (!eof && local_eof_) pass->place = PassPlace{next_index_, true, true};
  }
  if (eof) return PassPtr();
  pass->index = next_index_++;
  if (ctx_.options.extractor) {
    const ExtractTotals x = ctx_.options.extractor->totals();
    const double busy = x.parse_seconds + x.graph_seconds + x.assemble_seconds;
    pass->extract_busy = busy - extract_busy_;
    extract_busy_ = busy;
  }
  Stopwatch ws;
  BuildWorkingSet(pass->examples, ctx_.options.batch_size, pool, &pass->ws, &ws_scratch_);
  split_.read_working_set += ws.Seconds();
  // A distributed pass needs only the rows (the pull sizes them); its in-flight table is the
  // owner's served one.
  Stopwatch table;
  if (ctx_.comm == nullptr) {
    pass->table = tables_->Take(ctx_.model->value_layout());  // a done pass's memory
    pass->table->Build(pass->ws.keys, pool);
  }
  split_.read_pass_table += table.Seconds();
  pass->gauge = passes_gauge_.get();
  pass->Gauge();
  pass->clock[StageId::kRead].busy = clock.Seconds();
  return pass;
}

// ---- pull ------------------------------------------------------------------------------------

Status PassStages::Pull(Pass* pass, ThreadPool* pool) {
  // Shrinking runs after every `every` grid passes (ShrinkDue): the first pass of the grid
  // pass after one waits until every pass before it is pushed.
  const uint32_t every = ctx_.options.shrink_every_passes;
  const PassPlace& at = pass->place;
  if (every > 0 && at.first && at.grid_index > 0 && at.grid_index % every == 0) {
    Stopwatch wait;  // the shrink barrier
    if (!in_flight_.WaitPushed(pass->index)) return CancelledError("the train job stopped");
    pass->clock[StageId::kPull].stalled += wait.Seconds();
  }
  Stopwatch clock;
  if (ctx_.comm != nullptr) {
    // The owner's side of the rule for passes in flight: its served rows are this rank's
    // working table of the pass (docs/distributed.md, "Overlap").
    pass->ranked = std::make_unique<RankPass>();
    RankPass* sp = pass->ranked.get();
    sp->owner_updates = ctx_.options.owner_updates;
    InFlight::Tables ahead;
    RETURN_IF_ERROR(PullRankPass(ctx_.comm->channel(kPullChannel), ctx_.table, ctx_.accessor,
                                 pass->ws, &pass->table->rows(), sp, pool,
                                 [&] { ahead = in_flight_.Snapshot(); }));
    TakeFromNewest(*sp->served, &ahead, &pull_overwritten_, pool, &pass->ahead);
    in_flight_.Add(pass->index, sp->served);
    pass->registry = &in_flight_;
    pass->Gauge();
    if (ctx_.gpu != nullptr) {  // this rank's copies of the pass's rows, as on one box
      RETURN_IF_ERROR(
          ctx_.gpu->Stage(pass->index, pass->examples, pass->ws, pass->table->rows(), pool));
    }
    pass->clock[StageId::kPull].busy = clock.Seconds();
    return Status::OK();
  }
  InFlight::Tables ahead = in_flight_.Snapshot();  // before the table is read
  // The keys shared with the passes in flight first: train copies their rows in whole (rule 3,
  // docs/pipeline.md), so the pull need not copy them out of the table. (With GPUs the rows go
  // up as pulled, before train patches them: those are copied as before.)
  Stopwatch shared_clock;
  std::vector<uint8_t>& overwritten = pull_overwritten_;
  TakeFromNewest(*pass->table, &ahead, &overwritten, pool, &pass->ahead);
  split_.pull_shared += shared_clock.Seconds();
  Stopwatch pull;
  ASSIGN_OR_RETURN(
      pass->pins,
      ctx_.table->Pull(pass->ws.keys.data(), pass->ws.keys.size(), ctx_.accessor,
                       &pass->table->rows(), pool,
                       ctx_.gpu == nullptr && !pass->ahead.empty() ? overwritten.data() : nullptr));
  split_.pull_table += pull.Seconds();
  in_flight_.Add(pass->index, pass->table);
  pass->registry = &in_flight_;
  pass->Gauge();  // with its rows
  // The rows as pulled go to the GPUs now (copy streams), while an earlier pass trains.
  if (ctx_.gpu != nullptr) {
    Stopwatch stage;
    RETURN_IF_ERROR(
        ctx_.gpu->Stage(pass->index, pass->examples, pass->ws, pass->table->rows(), pool));
    split_.pull_gpu_stage += stage.Seconds();
  }
  pass->clock[StageId::kPull].busy = clock.Seconds();
  return Status::OK();
}

// ---- train -----------------------------------------------------------------------------------

Status PassStages::Train(Pass* pass, const std::atomic<bool>* failed) {
  Stopwatch clock;
  // The newer rows of the keys shared with the passes ahead, in ascending pass order.
  // (A distributed job: into the served rows, whose holders then take them.)
  std::vector<uint32_t> patched;
  WorkingTable* to = pass->ranked ? pass->ranked->served.get() : pass->table.get();
  for (const auto& [from, shared] : pass->ahead) {
    to->CopyRows(*from, shared, ctx_.train_pool);
    pass->patched_rows += shared.size();
    if (ctx_.gpu != nullptr || pass->ranked) {
      for (const auto& pair : shared) patched.push_back(pair.first);
    }
  }
  pass->ahead.clear();
  MetricAccumulator pass_metrics;
  if (ctx_.options.dry_run) {  // the pass's rows were read, pulled and staged: no more
    if (ctx_.gpu != nullptr) RETURN_IF_ERROR(ctx_.gpu->Drop(pass->index));
    trained_examples_ += pass->examples.rows();
    pass->clock[StageId::kTrain].busy = clock.Seconds();
    return Status::OK();
  }
  if (ctx_.comm != nullptr) {
    // The holders' copies the owners patched (on the GPUs: re-uploaded before training).
    std::vector<uint32_t> received;
    RETURN_IF_ERROR(PatchHolders(ctx_.comm->channel(kTrainChannel), pass->ranked.get(),
                                 std::move(patched), &pass->table->rows(), pass->ws,
                                 ctx_.gpu != nullptr ? &received : nullptr));
    if (ctx_.gpu != nullptr) {
      std::unique_ptr<RankExchange> ranks =
          RankPassExchange(ctx_.comm->channel(kTrainChannel), ctx_.model, pass->ws,
                           pass->ranked.get(), *ctx_.accessor, ctx_.train_pool);
      RETURN_IF_ERROR(TrainOnGpu(pass, received, &pass_metrics, ranks.get()));
    } else {
      RETURN_IF_ERROR(TrainOnRanks(pass, &pass_metrics));
    }
  } else if (ctx_.gpu != nullptr) {
    RETURN_IF_ERROR(TrainOnGpu(pass, patched, &pass_metrics, nullptr));
  } else {
    RETURN_IF_ERROR(TrainOnCpu(pass, failed, &pass_metrics));
  }
  pass->metrics = pass_metrics.Summary();
  if (ctx_.comm != nullptr) {  // rank 0's pass line is the job's: every rank's rows
    ASSIGN_OR_RETURN(pass->metrics,
                     MergeMetricsOnRank0(ctx_.comm->channel(kTrainChannel), pass_metrics));
  }
  if (CheckpointDue(*pass)) pass->dense_snapshot = DensePayload(*ctx_.model);
  pass->clock[StageId::kTrain].busy = clock.Seconds();
  return Status::OK();
}

Status PassStages::TrainOnCpu(Pass* pass, const std::atomic<bool>* failed,
                              MetricAccumulator* metrics) {
  for (const Minibatch& mb : pass->ws.batches) {
    if (failed != nullptr && failed->load(std::memory_order_relaxed)) {
      return CancelledError("the train job failed");
    }
    StepStats st = ctx_.model->TrainMinibatch(pass->examples, pass->ws, mb, &pass->table->rows(),
                                              *ctx_.accessor, ctx_.train_pool, predictions_.data());
    pass->embeddings_created += st.embeddings_created;
    AddMetrics(*pass, mb, metrics);
  }
  return Status::OK();
}

Status PassStages::TrainOnRanks(Pass* pass, MetricAccumulator* metrics) {
  RankPass* sp = pass->ranked.get();
  const Minibatch none;  // past this rank's last minibatch of the pass
  for (uint32_t m = 0; m < sp->global_rows.size(); ++m) {
    const Minibatch& mb = m < pass->ws.batches.size() ? pass->ws.batches[m] : none;
    ASSIGN_OR_RETURN(StepStats st,
                     TrainRankMinibatch(ctx_.comm->channel(kTrainChannel), ctx_.model,
                                        pass->examples, pass->ws, mb, m, &pass->table->rows(), sp,
                                        *ctx_.accessor, ctx_.train_pool, predictions_.data()));
    pass->embeddings_created += st.embeddings_created;
    AddMetrics(*pass, mb, metrics);
  }
  return Status::OK();
}

void PassStages::AddMetrics(const Pass& pass, const Minibatch& mb, MetricAccumulator* metrics) {
  for (uint32_t r = 0; r < mb.rows(); ++r) {
    const float y = pass.examples.labels[mb.row_begin + r];
    metrics->Add(y, predictions_[r]);
    total_.Add(y, predictions_[r]);
  }
  trained_examples_ += mb.rows();
  ReportProgress();
}

Status PassStages::TrainOnGpu(Pass* pass, const std::vector<uint32_t>& patched,
                              MetricAccumulator* metrics, RankExchange* ranks) {
  const Batch& ex = pass->examples;
  pass_predictions_.resize(ex.rows());
  uint64_t created = 0;
  RETURN_IF_ERROR(ctx_.gpu->Train(pass->index, ex, pass->ws, patched, &pass->table->rows(),
                                  pass_predictions_.data(), &created, ranks, ctx_.train_pool));
  pass->embeddings_created += created;
  for (size_t r = 0; r < ex.rows(); ++r) {
    metrics->Add(ex.labels[r], pass_predictions_[r]);
    total_.Add(ex.labels[r], pass_predictions_[r]);
  }
  trained_examples_ += ex.rows();
  ReportProgress();
  return Status::OK();
}

void PassStages::ReportProgress() {
  if (sink_ == nullptr || progress_clock_.Seconds() < ctx_.options.progress_seconds) return;
  progress_clock_.Reset();
  const double s = run_clock_.Seconds();
  TrainProgress p{trained_examples_, s, trained_examples_ / s, total_.Summary()};
  // The rows the whole job holds, from the share of the input the rows read so far took.
  const double read = ctx_.reader->InputFraction();
  const uint64_t rows_read = ctx_.reader->rows_read();
  if (read > 0 && rows_read > 0) {
    const double rows_total = rows_read / read;
    const double done = static_cast<double>(ctx_.start.examples + trained_examples_);
    p.fraction = std::min(1.0, done / rows_total);
    p.eta_seconds = p.examples_per_s > 0 ? std::max(0.0, rows_total - done) / p.examples_per_s : -1;
  }
  MutexLock l(&sink_mu_);
  sink_->OnProgress(p);
}

// ---- push ------------------------------------------------------------------------------------

Status PassStages::Push(Pass* pass, ThreadPool* pool) {
  Stopwatch clock;
  if (pass->ranked != nullptr) {
    RETURN_IF_ERROR(PushRankPass(ctx_.table, pass->ranked.get(), pool));
  } else {
    RETURN_IF_ERROR(ctx_.table->Push(&pass->pins, pass->table->rows(), pool));
  }
  ++passes_;
  grid_passes_ += pass->place.last;
  if (ctx_.ckpt != nullptr) {  // the rows this rank's table took: a rank's served rows
    RETURN_IF_ERROR(ctx_.ckpt->OnPush(pass->ranked != nullptr ? pass->ranked->served->rows()
                                                              : pass->table->rows()));
  }
  if (ctx_.on_push) {
    RETURN_IF_ERROR(
        ctx_.on_push(pass->ranked != nullptr ? pass->ranked->served->rows() : pass->table->rows()));
  }
  const uint32_t every = ctx_.options.shrink_every_passes;
  if (every > 0 && pass->place.last && (pass->place.grid_index + 1) % every == 0) {
    ASSIGN_OR_RETURN(uint64_t deleted, ctx_.table->Shrink(*ctx_.accessor, pool));
    shrunk_ += deleted;
    if (ctx_.ckpt != nullptr) ctx_.ckpt->OnShrink();
  }
  pass->registry = nullptr;
  in_flight_.Remove(pass->index, /*pushed=*/true);
  examples_ += pass->examples.rows();
  created_ += pass->embeddings_created;
  patched_rows_ += pass->patched_rows;

  // A checkpoint at this barrier: pass `index` is pushed, the next push waits for it.
  ASSIGN_OR_RETURN(nlohmann::json checkpoint, Checkpoint(*pass, pool));
  pass->clock[StageId::kPush].busy = clock.Seconds();
  const double now = run_clock_.Seconds();
  const double pass_seconds = now - last_push_;
  last_push_ = now;
  const StorageStats storage_now = ctx_.table->Storage();
  // The peak of the job's own memory: with mapped reads, the SSD files' pages they touched
  // grow the resident set as the page cache would (docs/storage.md "Reads").
  if (const ResidentSet now = CurrentResidentSet();
      now.rss - now.files > memory_at_peak_.rss - memory_at_peak_.file_pages) {
    memory_at_peak_ = MemorySample{now.rss, storage_now.memory_bytes, passes_gauge_->now(),
                                   HeapFreeBytes(), now.files};
  }
  nlohmann::json record = PassRecord(*pass, examples_, ctx_.table->CountKeys(), pass_seconds,
                                     checkpoint, StorageDeltaJson(storage_before_, storage_now));
  if (pass->ranked != nullptr) {
    const KeyRoutes& routes = pass->ranked->routes;
    exchange_sent_ += routes.bytes_sent;
    exchange_received_ += routes.bytes_received;
    exchange_seconds_ += pass->ranked->exchange_seconds;
    global_examples_ += pass->ranked->global_examples;
    record["global_examples"] = pass->ranked->global_examples;
    record["examples"] = global_examples_;  // the job's so far
    record["exchange"] = {{"bytes_sent", routes.bytes_sent},
                          {"bytes_received", routes.bytes_received},
                          {"seconds", pass->ranked->exchange_seconds},
                          {"served_keys", routes.served.size()}};
  }
  storage_before_ = storage_now;
  RETURN_IF_ERROR(ctx_.log->Write(record));
  if (sink_ != nullptr) {
    MutexLock l(&sink_mu_);
    sink_->OnPass(record);
  }
  ParkBuffers(pass);
  return Status::OK();
}

void PassStages::ParkBuffers(Pass* pass) {
  MutexLock l(&spare_mu_);
  if (spare_ != nullptr) return;
  spare_ = std::make_unique<SpareBuffers>();
  spare_->examples = std::move(pass->examples);
  spare_->ws = std::move(pass->ws);
  spare_bytes_ = static_cast<int64_t>(spare_->examples.MemoryBytes() + spare_->ws.MemoryBytes());
  passes_gauge_->Add(spare_bytes_);
  pass->Gauge();  // the pass's own count, without them
}

// Checkpoints, like shrinking, follow grid passes: after the last pass of every
// ckpt.every_passes-th one.
bool PassStages::CheckpointDue(const Pass& pass) const {
  return ctx_.ckpt != nullptr && !ctx_.options.dry_run && pass.place.last &&
         ctx_.ckpt->Due(pass.place.grid_index + 1);
}

StatusOr<nlohmann::json> PassStages::Checkpoint(const Pass& pass, ThreadPool* pool) {
  if (!CheckpointDue(pass)) return nlohmann::json();
  Stopwatch clock;
  ASSIGN_OR_RETURN(CheckpointManifest m,
                   ctx_.ckpt->Commit(*ctx_.table, pass.dense_snapshot, Position(), nullptr, pool));
  if (ctx_.comm != nullptr) {
    RETURN_IF_ERROR(CommitRanksCheckpointOf(ctx_.comm->channel(kPushChannel), ctx_.env,
                                            ctx_.ranks_ckpt_dir, m.id));
  }
  checkpoint_seconds_ += clock.Seconds();
  return CheckpointJson(m, clock.Seconds());
}

}  // namespace ctrbox
