// The parallel in-order chunk reader and the generated rows' source (io/reader_internal.h).
#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "io/reader_internal.h"
#include "io/synth.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

class SynthSource final : public ChunkSource {
 public:
  SynthSource(uint64_t rows, uint64_t block_rows, RowShare share)
      : rows_(rows), block_rows_(block_rows), share_(share), next_(share.index * share.unit) {
    if (share_.count > 1) {
      for (uint64_t b = next_; b < rows_; b += share_.count * share_.unit) {
        total_ += std::min(share_.unit, rows_ - b);
      }
    } else {
      total_ = rows_;
    }
  }
  Status Next(TextChunk* chunk, bool* eof) override {
    *eof = next_ >= rows_;
    if (*eof) return Status::OK();
    chunk->file = "<generated>";
    chunk->first_line = next_;
    if (share_.count > 1) {
      // About block_rows of the share's rows: whole units of it, each `count` units after the
      // one before (only the stream's last unit may be short, and it ends a chunk).
      const uint64_t units = std::max<uint64_t>(1, block_rows_ / share_.unit);
      chunk->offset = 0;
      for (uint64_t k = 0; k < units && next_ < rows_; ++k) {
        chunk->offset += std::min(share_.unit, rows_ - next_);
        next_ += share_.count * share_.unit;
      }
    } else {
      chunk->offset = std::min(block_rows_, rows_ - next_);
      next_ += chunk->offset;
    }
    done_ += chunk->offset;
    chunk->progress = done_;
    return Status::OK();
  }
  uint64_t total() const override { return total_; }

 private:
  const uint64_t rows_, block_rows_;
  const RowShare share_;
  uint64_t next_, total_ = 0, done_ = 0;
};

using DecodeFn = std::function<void(const TextChunk&, ChunkParseResult*)>;

// Workers pull chunks from the source (one at a time, under a lock), decode them in parallel
// and deposit the results by sequence number; Next() hands them out in order.
class ParallelChunkReader final : public BatchReader {
 public:
  // `closing` (optional) is set at destruction, before the workers are joined: a source
  // waiting on a pipe checks it, so that closing the reader never waits on a stalled producer.
  ParallelChunkReader(Schema schema, std::unique_ptr<ChunkSource> source, DecodeFn decode,
                      const DataOptions& options,
                      std::shared_ptr<std::atomic<bool>> closing = nullptr,
                      std::function<Status(ChunkParseResult*)> in_order = nullptr)
      : schema_(schema),
        source_(std::move(source)),
        decode_(std::move(decode)),
        in_order_(std::move(in_order)),
        max_inflight_(std::max(options.max_inflight, options.threads)),
        closing_(std::move(closing)),
        total_(source_->total()),
        tracker_(options.bad_input) {
    for (int t = 0; t < std::max(1, options.threads); ++t)
      workers_.emplace_back([this] {
        SetThreadName("ctrbox-parse");
        EnterBackground();
        Work();
      });
  }
  ~ParallelChunkReader() override {
    if (closing_) closing_->store(true);
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }

  Schema schema() const override { return schema_; }
  RecordCounts counts() const override { return tracker_.counts(); }
  InputProgress progress() const override {
    return {progress_.load(std::memory_order_relaxed), total_};
  }

  Status Next(Batch* batch, bool* eof) override {
    *eof = false;
    if (!final_status_.ok()) return final_status_;
    while (true) {
      ChunkParseResult r;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return results_.count(next_out_) || source_done_at_ == next_out_; });
        auto it = results_.find(next_out_);
        if (it == results_.end()) {
          // No more chunks: the source ended (or failed) at next_out_.
          if (!source_status_.ok()) return final_status_ = source_status_;
          Status s = tracker_.Finish();
          if (!s.ok()) return final_status_ = s;
          progress_.store(total_, std::memory_order_relaxed);  // all of it (footers too)
          *eof = true;
          return Status::OK();
        }
        r = std::move(it->second.first);
        progress_.store(it->second.second, std::memory_order_relaxed);
        results_.erase(it);
        ++next_out_;
      }
      cv_.notify_all();
      if (!r.status.ok()) return final_status_ = r.status;
      Status s = tracker_.Add(r.counts, r.samples);
      if (!s.ok()) return final_status_ = s;
      if (in_order_) {
        s = in_order_(&r);
        if (!s.ok()) return final_status_ = s;
      }
      if (r.batch.rows() > 0) {
        // The caller's old batch goes back to the workers: its memory decodes a later chunk.
        std::swap(*batch, r.batch);
        std::lock_guard<std::mutex> l(mu_);
        if (free_.size() < kFreeBatches) free_.push_back(std::move(r.batch));
        return Status::OK();
      }
    }
  }

 private:
  static constexpr uint64_t kNotDone = ~uint64_t{0};
  static constexpr size_t kFreeBatches = 2;  // kept for their memory at most

  void Work() {
    TextChunk chunk;
    while (true) {
      uint64_t seq;
      ChunkParseResult r;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] {
          return stop_ || source_done_at_ != kNotDone ||
                 next_seq_ - next_out_ < static_cast<uint64_t>(max_inflight_);
        });
        if (stop_ || source_done_at_ != kNotDone) return;
        bool eof = false;
        Status s = source_->Next(&chunk, &eof);
        if (!s.ok() || eof) {
          source_status_ = s;
          source_done_at_ = next_seq_;
          cv_.notify_all();
          return;
        }
        seq = next_seq_++;
        if (!free_.empty()) {
          r.batch = std::move(free_.back());
          free_.pop_back();
        }
      }
      decode_(chunk, &r);
      {
        std::lock_guard<std::mutex> l(mu_);
        results_.emplace(seq, std::make_pair(std::move(r), chunk.progress));
      }
      cv_.notify_all();
    }
  }

  const Schema schema_;
  std::unique_ptr<ChunkSource> source_;  // guarded by mu_
  const DecodeFn decode_;
  const std::function<Status(ChunkParseResult*)> in_order_;  // consumer thread
  const int max_inflight_;
  const std::shared_ptr<std::atomic<bool>> closing_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                   // guarded by mu_
  uint64_t next_seq_ = 0;               // guarded by mu_
  uint64_t next_out_ = 0;               // guarded by mu_
  uint64_t source_done_at_ = kNotDone;  // guarded by mu_
  Status source_status_;                // guarded by mu_
  // Decoded chunks by sequence number, with their progress.
  std::map<uint64_t, std::pair<ChunkParseResult, uint64_t>> results_;  // guarded by mu_
  // Batches handed back by Next, whose memory the workers decode into (no fresh pages).
  std::vector<Batch> free_;            // guarded by mu_
  const uint64_t total_;               // the source's total (read before the workers start)
  std::atomic<uint64_t> progress_{0};  // of the last chunk Next handed out

  // Owned by the consumer thread.
  BadInputTracker tracker_;
  Status final_status_;
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<BatchReader> NewParallelChunkReader(
    Schema schema, std::unique_ptr<ChunkSource> source, DecodeFn decode, const DataOptions& options,
    std::shared_ptr<std::atomic<bool>> closing, std::function<Status(ChunkParseResult*)> in_order) {
  return std::make_unique<ParallelChunkReader>(schema, std::move(source), std::move(decode),
                                               options, std::move(closing), std::move(in_order));
}

std::unique_ptr<BatchReader> NewSynthReader(const SynthOptions& options, uint64_t rows, int threads,
                                            uint64_t block_rows, RowShare share) {
  auto gen = std::make_shared<SynthGenerator>(options);
  const Schema schema = gen->schema();
  // A chunk of a share: its units from first_line, `count` units apart (SynthSource).
  DecodeFn decode = [gen, schema, share](const TextChunk& c, ChunkParseResult* r) {
    ResetParseResult(schema, r);
    const bool units = share.count > 1;
    uint64_t row = c.first_line, left = c.offset;
    while (left > 0) {
      const uint64_t n = units ? std::min(share.unit, left) : left;
      gen->AppendRows(row, row + n, &r->batch, nullptr);
      row += units ? share.count * share.unit : n;
      left -= n;
    }
    r->counts.good = c.offset;
  };
  DataOptions o;
  o.threads = std::max(1, threads);
  return NewParallelChunkReader(schema, std::make_unique<SynthSource>(rows, block_rows, share),
                                std::move(decode), o);
}

}  // namespace ctrbox
