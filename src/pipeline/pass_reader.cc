#include "pipeline/pass_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "working/working_set.h"
#include "working/working_table.h"

namespace ctrbox {

uint64_t PassBytes(const PassShape& s, uint64_t row_bytes) {
  return s.content_bytes + sizeof(uint32_t) +
         WorkingSet::BytesBound(s.key_uses, s.keys, s.batches, s.batch_keys) +
         WorkingTable::BytesBound(s.keys, row_bytes);
}

PassReader::PassReader(ReaderFactory open, PassReaderOptions options)
    : open_(std::move(open)), options_(std::move(options)) {}

Status PassReader::Open() {
  ASSIGN_OR_RETURN(reader_, open_());
  schema_ = reader_->schema();
  block_.reset();
  pending_ = RowRange{};
  pending_counted_ = false;
  if (options_.window_keys > 0 || options_.device_pass_bytes > 0) {
    // The window's own count decides only against window_keys (window_bytes with weights),
    // and only where the owners' windows do not: the map is kept only near that limit.
    constexpr uint64_t kNone = UINT64_MAX;
    const bool decides = options_.window_keys > 0 && !options_.agree;
    const bool weighted = !options_.table_row_bytes.empty();
    const KeyWindow::Exactness exact{decides && !weighted ? options_.window_keys : kNone,
                                     decides && weighted ? options_.window_bytes : kNone};
    window_ = std::make_unique<KeyWindow>(std::max<uint32_t>(1, options_.window_passes),
                                          options_.table_row_bytes, exact);
    if (options_.agree && options_.window_keys > 0) {
      for (uint32_t o = 0; o < options_.owners; ++o) {
        owner_windows_.push_back(std::make_unique<KeyWindow>(
            std::max<uint32_t>(1, options_.window_passes), options_.table_row_bytes));
      }
      owner_keys_.resize(options_.owners);
    }
  }
  return Status::OK();
}

StatusOr<PassReader::Fill> PassReader::FillTo(std::vector<RowRange>* out, uint64_t* rows,
                                              uint64_t limit) {
  while (*rows < limit) {
    if (block_ && begin_ < block_->rows()) {
      const size_t take = std::min<size_t>(block_->rows() - begin_, limit - *rows);
      out->push_back({block_, begin_, begin_ + take});
      begin_ += take;
      *rows += take;
      continue;
    }
    if (!reader_) {
      if (epoch_ >= options_.epochs) return Fill::kEnd;  // nothing more was appended
      ASSIGN_OR_RETURN(reader_, open_());
    }
    block_ = FreeBlock();
    bool end = false;
    RETURN_IF_ERROR(reader_->Next(block_.get(), &end));
    begin_ = 0;
    const InputProgress p = reader_->progress();
    const double epochs = std::max<uint32_t>(options_.epochs, 1);
    if (end) {
      counts_.Add(reader_->counts());
      reader_.reset();
      block_.reset();
      ++epoch_;
      ended_epoch_rows_ = std::exchange(epoch_rows_, 0);
      if (options_.shared_epoch_rows > 0) ended_epoch_rows_ = options_.shared_epoch_rows;
      fraction_.store(p.known() ? epoch_ / epochs : -1.0, std::memory_order_relaxed);
      return *rows > 0 ? Fill::kRowsThenEpochEnd : Fill::kEpochEnd;
    }
    if (options_.select) options_.select(block_.get());  // validation's rows out (holdout.h)
    if (!options_.share.whole() && options_.shared_epoch_rows == 0) {  // (io/row_share.h)
      const size_t rows = block_->rows();
      KeepRowShare(options_.share, epoch_rows_, block_.get());
      epoch_rows_ += rows;
    }
    ModelKeys(options_.hashing, options_.key_tables, block_.get());
    if (options_.filter) options_.filter(block_.get());  // admission (jobs/admission.h)
    rows_read_.fetch_add(block_->rows(), std::memory_order_relaxed);
    fraction_.store(p.known() ? (epoch_ + p.fraction()) / epochs : -1.0, std::memory_order_relaxed);
  }
  return Fill::kRows;
}

std::shared_ptr<Batch> PassReader::FreeBlock() {
  // A block of the last few that no range holds any more: the reader decodes into its memory.
  // use_count() is a sound test here, unlike across threads: every range lives on this
  // reader's thread, and the gather's pool tasks that read blocks end before their ranges go.
  for (std::shared_ptr<Batch>& b : blocks_) {
    if (b.use_count() == 1) return b;
  }
  if (blocks_.size() == kKeptBlocks) blocks_.erase(blocks_.begin());
  blocks_.push_back(std::make_shared<Batch>());
  return blocks_.back();
}

StatusOr<PassReader::Fill> PassReader::FillPending(uint64_t limit) {
  pending_counted_ = false;
  ranges_.clear();
  uint64_t rows = 0;
  ASSIGN_OR_RETURN(Fill f, FillTo(&ranges_, &rows, limit));
  if (ranges_.size() == 1) {
    pending_ = std::move(ranges_[0]);
  } else if (ranges_.size() > 1) {  // across blocks: its keys must lie in one array
    auto joined = std::make_shared<Batch>();
    joined->Reset(schema_);
    for (const RowRange& r : ranges_) joined->AppendRows(*r.block, r.begin, r.end);
    pending_ = RowRange{std::move(joined), 0, rows};
  }
  ranges_.clear();
  return f;
}

void PassReader::ClosePass(const Batch& examples, bool by_keys, bool by_memory, bool by_device) {
  const PassShape shape = std::exchange(shape_, PassShape{});
  if (examples.rows() == 0) return;
  PassSizingStats& z = sizing_;
  z.min_examples = z.passes == 0 ? examples.rows() : std::min(z.min_examples, examples.rows());
  z.max_examples = std::max<uint64_t>(z.max_examples, examples.rows());
  ++z.passes;
  if (window_) {
    z.closed_by_keys += by_keys;
    // (Agreed with owners' windows, NextAgreed counts theirs: this rank's keys pin rows of
    // every owner.)
    if (owner_windows_.empty())
      z.max_window_keys = std::max(z.max_window_keys, window_->distinct());
    z.max_window_row_bytes = std::max(z.max_window_row_bytes, window_->distinct_weight());
    z.max_pass_keys = std::max(z.max_pass_keys, window_->current());
    window_->NextPass();
    for (auto& w : owner_windows_) w->NextPass();
  }
  z.closed_by_device += by_device;
  if (SizedByBytes() && window_) {
    const uint64_t bytes = PassBytes(shape, options_.row_bytes);
    z.closed_by_memory += by_memory;
    z.max_pass_bytes = std::max(z.max_pass_bytes, bytes);
    if (options_.device_bytes) {
      z.max_device_bytes = std::max(z.max_device_bytes, options_.device_bytes(shape));
    }
    z.max_window_bytes = std::max(z.max_window_bytes, recent_sum_ + bytes);
    recent_bytes_.push_back(bytes);
    recent_sum_ += bytes;
    if (recent_bytes_.size() >= options_.memory_passes) {
      recent_sum_ -= recent_bytes_.front();
      recent_bytes_.pop_front();
    }
  }
}

PassReader::Verdict PassReader::Judge() {
  Verdict v;
  const uint64_t* keys = pending_.keys();
  const size_t n = pending_.num_keys();
  // A minibatch that closed the pass before is judged again as the next one's first: the
  // windows recount the keys they counted then, as they stand now.
  const bool again = std::exchange(pending_counted_, true);
  v.with = again ? window_->Recount(keys, n) : window_->CountWith(keys, n);
  const KeyWindow::Counts& with = v.with;
  // With tables of several row sizes the window's bytes, else its keys.
  const bool weighted = !options_.table_row_bytes.empty();
  v.keys = options_.window_keys > 0 && (weighted ? with.window_weight > options_.window_bytes
                                                 : with.window > options_.window_keys);
  if (!owner_windows_.empty()) {  // the owners' windows decide, once added up over the ranks
    v.keys = false;
    if (!again) {  // (else owner_keys_ hold this minibatch's already)
      for (auto& k : owner_keys_) k.clear();
      for (size_t i = 0; i < n; ++i) owner_keys_[options_.owner_of(keys[i])].push_back(keys[i]);
    }
    v.owner_with.resize(owner_windows_.size());
    for (size_t o = 0; o < owner_windows_.size(); ++o) {
      KeyWindow& w = *owner_windows_[o];
      const std::vector<uint64_t>& ok = owner_keys_[o];
      const KeyWindow::Counts c =
          again ? w.Recount(ok.data(), ok.size()) : w.CountWith(ok.data(), ok.size());
      v.owner_with[o] = weighted ? c.window_weight : c.window;
    }
  }
  v.shape = shape_;
  if (SizedByBytes()) {
    // The minibatch alone, and the pass with it.
    const PassShape alone{pending_.ContentBytes() - sizeof(uint32_t),
                          n,
                          with.batch,
                          1,
                          with.batch,
                          pending_.rows(),
                          with.batch};
    sizing_.max_batch_bytes =
        std::max(sizing_.max_batch_bytes, PassBytes(alone, options_.row_bytes));
    PassShape& shape = v.shape;
    shape.content_bytes += alone.content_bytes;
    shape.key_uses += n;
    shape.keys = with.pass;
    shape.batches += 1;
    shape.batch_keys += with.batch;
    shape.rows += alone.rows;
    shape.max_batch_keys = std::max(shape.max_batch_keys, with.batch);
    // Each pass gets an equal share of pass_memory. (Letting a pass take what the passes
    // before it left made a full-size pass followed by passes of one minibatch until it
    // left the window, each of them over the limit.)
    v.memory = options_.pass_memory > 0 &&
               PassBytes(shape, options_.row_bytes) >
                   options_.pass_memory / std::max<uint32_t>(1, options_.memory_passes);
    v.device =
        options_.device_pass_bytes > 0 && options_.device_bytes(shape) > options_.device_pass_bytes;
  }
  return v;
}

void PassReader::CountUncounted(const Batch& examples) {
  for (const Uncounted& u : uncounted_) {
    const uint64_t* keys = examples.keys.data() + u.key_begin;
    const size_t n = u.key_end - u.key_begin;
    const KeyWindow::Counts with = window_->CountWith(keys, n);
    const PassShape alone{u.content_bytes, n, with.batch, 1, with.batch, u.rows, with.batch};
    sizing_.max_batch_bytes =
        std::max(sizing_.max_batch_bytes, PassBytes(alone, options_.row_bytes));
    shape_.content_bytes += alone.content_bytes;
    shape_.key_uses += n;
    shape_.keys = with.pass;
    shape_.batches += 1;
    shape_.batch_keys += with.batch;
    shape_.rows += alone.rows;
    shape_.max_batch_keys = std::max(shape_.max_batch_keys, with.batch);
    window_->AddCounted(keys, n);
  }
  uncounted_.clear();
  counting_ = true;
}

Status PassReader::Take(const Verdict& v) {
  if (v.keys) {
    // The first minibatch of a pass: the older passes in the window may be pushed before
    // this one is pulled (the pull waits for them), but its own keys must fit the budget.
    const bool weighted = !options_.table_row_bytes.empty();
    const uint64_t own = v.with.batch;
    if (weighted ? v.with.batch_weight > options_.max_bytes : own > options_.max_keys) {
      std::string hint = options_.key_limit_hint ? options_.key_limit_hint(own) : "";
      return ResourceExhaustedError(fmt::format(
          "a minibatch of {} examples holds {} distinct keys, more than the {} rows that "
          "storage.memory_budget holds{}",
          pending_.rows(), own, options_.max_keys, hint.empty() ? "" : "; " + hint));
    }
  }
  pending_counted_ = false;
  window_->AddCounted(pending_.keys(), pending_.num_keys());  // counted by Judge
  for (size_t o = 0; o < owner_windows_.size(); ++o) {  // owner_keys_: Judge's of this minibatch
    owner_windows_[o]->AddCounted(owner_keys_[o].data(), owner_keys_[o].size());
  }
  shape_ = v.shape;
  grid_pos_ += pending_.rows();
  gather_.Add(std::exchange(pending_, RowRange{}), pool_);
  return Status::OK();
}

Status PassReader::Next(Batch* examples, bool* eof, PassPlace* place, ThreadPool* pool) {
  pool_ = pool;
  gather_.Begin(schema_, examples);
  const uint64_t want = options_.pass_examples;
  PassPlace here;
  here.grid_index = grid_count_;
  if (!window_) {
    // Passes of `want` examples, or to the end of an epoch (a pass never spans two).
    uint64_t rows = 0;
    bool empty_pass = false;
    while (rows < want) {
      ranges_.clear();
      const StatusOr<Fill> f = FillTo(&ranges_, &rows, want);
      for (RowRange& r : ranges_) gather_.Add(std::move(r), pool_);
      if (!f.ok()) return f.status();
      if (*f == Fill::kEnd || *f == Fill::kRowsThenEpochEnd) break;
      if (*f == Fill::kEpochEnd && (rows > 0 || epoch_ >= options_.epochs)) break;
      if (*f == Fill::kEpochEnd && ShareMissesEpochTail()) {
        empty_pass = true;  // the other ranks' epoch ends with a pass this rank has no rows of
        break;
      }
    }
    ranges_.clear();
    gather_.Finish(pool_);
    ClosePass(*examples, false, false, false);
    *eof = examples->rows() == 0 && !empty_pass;
    grid_count_ += !*eof;
    if (place != nullptr) *place = here;
    return Status::OK();
  }
  if (options_.agree) return NextAgreed(examples, eof, place);  // (it finishes the gather)
  here.first = grid_pos_ == 0;

  // Key-sized: the passes above, each cut further between minibatches (counted from the
  // start of the pass above, as the trainer cuts them) while the window's keys fit.
  bool by_keys = false, by_memory = false, by_device = false;
  uncounted_.clear();
  bound_ = PassShape{};
  counting_ = !DeviceOnly();
  while (true) {
    if (pending_.rows() == 0) {
      const uint64_t room = std::min<uint64_t>(options_.batch_size, want - grid_pos_);
      ASSIGN_OR_RETURN(Fill f, FillPending(room));
      if (f == Fill::kEnd) break;
      if (f == Fill::kEpochEnd) {
        grid_pos_ = 0;
        if (gather_.rows() > 0 || epoch_ >= options_.epochs) break;
        continue;
      }
      pending_ends_epoch_ = f == Fill::kRowsThenEpochEnd;
    }
    if (!counting_) {
      const uint64_t n = pending_.num_keys(), content = pending_.ContentBytes() - sizeof(uint32_t);
      PassShape b = bound_;
      b.content_bytes += content;
      b.key_uses += n;
      b.keys += n;
      b.batches += 1;
      b.batch_keys += n;
      b.rows += pending_.rows();
      b.max_batch_keys = std::max(b.max_batch_keys, n);
      if (options_.device_bytes(b) <= options_.device_pass_bytes) {
        bound_ = b;
        uncounted_.push_back({gather_.keys(), gather_.keys() + n, content, pending_.rows()});
        grid_pos_ += pending_.rows();
        pending_counted_ = false;
        gather_.Add(std::exchange(pending_, RowRange{}), pool_);
        if (pending_ends_epoch_ || grid_pos_ == want) {
          pending_ends_epoch_ = false;
          grid_pos_ = 0;
          break;
        }
        continue;
      }
      gather_.Flush(pool_);       // (the uncounted minibatches' keys in the pass's batch)
      CountUncounted(*examples);  // the bound no longer fits: count from here on
    }
    const Verdict v = Judge();
    if (v.any() && gather_.rows() > 0) {
      by_keys = v.keys;  // the minibatch starts the next pass
      by_memory = v.memory;
      by_device = v.device;
      break;
    }
    RETURN_IF_ERROR(Take(v));
    if (pending_ends_epoch_ || grid_pos_ == want) {  // the grid pass ends (or the epoch)
      pending_ends_epoch_ = false;
      grid_pos_ = 0;
      break;
    }
  }
  gather_.Finish(pool_);
  if (options_.pass_memory > 0) examples->ShrinkToFit();  // what PassBytes counts
  if (!counting_) shape_ = bound_;  // a pass never counted: its bound stands for its shape
  ClosePass(*examples, by_keys, by_memory, by_device);
  *eof = examples->rows() == 0;
  // The last piece of its grid pass unless the key window or a memory limit cut it (the
  // input's end ends it).
  here.last = !by_keys && !by_memory && !by_device;
  if (!*eof && here.last) {
    grid_pos_ = 0;
    ++grid_count_;
  }
  if (place != nullptr) *place = here;
  return Status::OK();
}

bool PassReader::ShareMissesEpochTail() const {
  // The epoch's last (global) pass holds its rows past the last whole pass of pass_examples
  // on every rank; this rank's share of it starts index x unit rows in (io/row_share.h).
  // (Only where a rank's pass is whole blocks of the share, so that the ranks' passes are the
  // stream's: train.deterministic cuts the passes so.)
  const RowShare& s = options_.share;
  if (s.whole() || options_.pass_examples % s.unit != 0) return false;
  const uint64_t tail = ended_epoch_rows_ % (options_.pass_examples * s.count);
  return tail > 0 && s.index * s.unit >= tail;
}

Status PassReader::NextAgreed(Batch* examples, bool* eof, PassPlace* place) {
  const uint64_t want = options_.pass_examples;
  PassPlace here;
  here.grid_index = grid_count_;
  here.first = !grid_open_;
  bool by_keys = false, by_memory = false, by_device = false;
  bool cut = false, taken = false;  // as every rank sees them
  while (true) {
    // This rank's next minibatch of its grid pass, unless that ended.
    while (!grid_ended_ && pending_.rows() == 0) {
      const uint64_t room = std::min<uint64_t>(options_.batch_size, want - grid_pos_);
      ASSIGN_OR_RETURN(Fill f, FillPending(room));
      if (f == Fill::kEnd) {
        grid_ended_ = true;
      } else if (f == Fill::kEpochEnd) {
        // At the start of its grid pass the next epoch begins in it (unless the other ranks'
        // epoch ends with a grid pass this rank has no rows of); else the epoch's end ended
        // the grid pass.
        if (grid_pos_ > 0 || epoch_ >= options_.epochs || ShareMissesEpochTail()) {
          grid_ended_ = true;
        }
      } else {
        pending_ends_epoch_ = f == Fill::kRowsThenEpochEnd;
      }
    }
    Verdict v;
    if (!grid_ended_) v = Judge();
    // Over a limit of its own; has a minibatch; each owner's window (with the minibatch).
    const bool weighted = !options_.table_row_bytes.empty();
    votes_.assign(2 + owner_windows_.size(), 0);
    votes_[0] = !grid_ended_ && v.any();
    votes_[1] = !grid_ended_;
    for (size_t o = 0; o < owner_windows_.size(); ++o) {
      votes_[2 + o] = grid_ended_ ? (weighted ? owner_windows_[o]->distinct_weight()
                                              : owner_windows_[o]->distinct())
                                  : v.owner_with[o];
    }
    RETURN_IF_ERROR(options_.agree(votes_.data(), votes_.size()));
    // The owners' rows pinned, at most: their windows added up.
    uint64_t owner_max = 0;
    for (size_t o = 0; o < owner_windows_.size(); ++o)
      owner_max = std::max(owner_max, votes_[2 + o]);
    const bool owner_over = !owner_windows_.empty() &&
                            owner_max > (weighted ? options_.window_bytes : options_.window_keys);
    if (votes_[1] == 0) break;                      // every rank's grid pass ended
    if ((votes_[0] != 0 || owner_over) && taken) {  // some pass is full: every rank's ends here
      by_keys = v.keys || owner_over;
      by_memory = v.memory;
      by_device = v.device;
      cut = true;
      break;
    }
    if (!owner_windows_.empty() && !weighted) {
      sizing_.max_window_keys = std::max(sizing_.max_window_keys, owner_max);
    }
    taken = true;
    if (!grid_ended_) {
      RETURN_IF_ERROR(Take(v));
      if (pending_ends_epoch_ || grid_pos_ == want) {
        pending_ends_epoch_ = false;
        grid_ended_ = true;
      }
    }
  }
  gather_.Finish(pool_);
  if (SizedByBytes()) examples->ShrinkToFit();  // what PassBytes counts
  ClosePass(*examples, by_keys, by_memory, by_device);
  // No rank had a minibatch at a grid pass's start: every rank's input ended.
  *eof = !taken;
  here.last = !cut;
  if (here.last) {
    grid_count_ += taken;
    grid_pos_ = 0;
    grid_ended_ = false;
  }
  grid_open_ = !here.last;
  if (place != nullptr) *place = here;
  return Status::OK();
}

namespace {

// Reads past the passes of a resumed job's trained data until `count(passes read)` reaches
// `want`; they must hold `examples` examples. `what` names what is counted, for the messages.
template <typename Count>
Status SkipTo(PassReader* reader, uint64_t want, Count count, std::string_view what,
              std::optional<uint64_t> examples, bool may_end_early, uint64_t* seen_out) {
  Batch scratch;
  uint64_t seen = 0, read = 0;
  while (count(read) < want) {
    bool eof = false;
    RETURN_IF_ERROR(reader->Next(&scratch, &eof));
    if (eof && may_end_early && (!examples || seen == *examples)) break;
    if (eof) {
      return FailedPreconditionError(fmt::format(
          "the input ended after {} {}, but the checkpoint was cut after {}: the data changed "
          "since",
          count(read), what, want));
    }
    seen += scratch.rows();
    ++read;
  }
  if (examples && seen != *examples) {
    return FailedPreconditionError(fmt::format(
        "the first {} {} of the input hold {} examples, the checkpoint says {}: the data "
        "changed since",
        want, what, seen, *examples));
  }
  if (seen_out != nullptr) *seen_out = seen;
  return Status::OK();
}

}  // namespace

Status PassReader::SkipGridPasses(uint64_t grid_passes, std::optional<uint64_t> examples,
                                  bool may_end_early, uint64_t* seen) {
  return SkipTo(
      this, grid_passes, [this](uint64_t) { return grid_count_; }, "grid passes", examples,
      may_end_early, seen);
}

Status PassReader::Skip(uint64_t passes, std::optional<uint64_t> examples, bool may_end_early,
                        uint64_t* seen) {
  return SkipTo(
      this, passes, [](uint64_t read) { return read; }, "passes", examples, may_end_early, seen);
}

}  // namespace ctrbox
