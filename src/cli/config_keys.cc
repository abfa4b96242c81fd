// Every job key with its default and meaning, in section order: what `ctrbox config` prints and
// docs/config.md holds (a test keeps them equal).
#include <fmt/format.h>

#include <limits>

#include "cli/config_grammars.h"
#include "util/sys.h"

namespace ctrbox::config {

constexpr uint64_t kMaxU32 = std::numeric_limits<uint32_t>::max();

const std::vector<Key>& Keys() {
  static const std::vector<Key> keys = {
      // data
      {"data.paths", "(none: generated data)", "input files or directories (also --data)",
       List([](JobConfig* j, auto v) { j->data.paths = std::move(v); })},
      {"data.command", "(none)",
       "a shell command whose standard output is the (text) training data, instead of data.paths",
       Text([](JobConfig* j, std::string v) { j->data.command = std::move(v); })},
      {"data.label_column", "(a column named label, click, clicked, is_click, target or y)",
       "train --format csv or tsv: the label column of the guessed feature graph",
       Text([](JobConfig* j, std::string v) { j->label_column = std::move(v); })},
      {"data.format", "criteo",
       "criteo | libsvm | libfm (label idx:val) | libffm (label field:idx:val) | slots | shards "
       "(also --format; train --format csv | tsv guesses a feature graph)",
       Format([](JobConfig* j, DataFormat f) { j->data.format = f; }, true)},
      {"data.slot_from", "one",
       "libsvm, libfm: one (every feature in slot 0) | position (the token's place in the row "
       "is its slot: one-hot-per-field files)",
       SlotFromSetter()},
      {"data.num_slots", "0",
       "slots per row for the libffm and slots formats (required there); with data.slot_from "
       "position, 0 takes the most features of a row of the first 64 KB",
       UInt([](JobConfig* j, uint64_t v) { j->data.num_slots = static_cast<uint32_t>(v); }, 1,
            100000)},
      {"data.num_dense", "0", "dense values per row for the slots format",
       UInt([](JobConfig* j, uint64_t v) { j->data.num_dense = static_cast<uint32_t>(v); }, 0,
            100000)},
      {"data.id_column", "(none)",
       "predict through a feature graph: a column whose value is written beside each row's "
       "probability (also --id-column)",
       Text([](JobConfig* j, std::string v) { j->id_column = std::move(v); })},
      {"data.eval_paths", "(none)", "train: data to evaluate on after training (also --eval-data)",
       List([](JobConfig* j, auto v) { j->eval_paths = std::move(v); })},
      {"data.max_error_rate", "0.01", "the job stops once malformed records exceed this fraction",
       Float([](JobConfig* j, float v) { j->data.bad_input.max_error_rate = v; }, 0, 1)},
      {"data.max_line_bytes", "1MB", "longer lines are malformed (overlong_line)",
       Bytes([](JobConfig* j, uint64_t v) { j->data.max_line_bytes = v; }, 64)},
      {"data.chunk_bytes", "4MB", "text is read and parsed in chunks of this size",
       Bytes([](JobConfig* j, uint64_t v) { j->data.chunk_bytes = v; }, 4096)},
      {"data.reader_threads", "number of CPUs",
       "threads parsing (or decoding, or generating) input",
       UInt([](JobConfig* j, uint64_t v) { j->data.threads = static_cast<int>(v); }, 1, 256)},
      {"data.gen.rows", "500000", "generated training rows (when no data paths are given)",
       UInt([](JobConfig* j, uint64_t v) { j->generated.rows = v; }, 1, uint64_t{1} << 40)},
      {"data.gen.test_rows", "100000", "generated held-out rows (seed data.gen.seed + 1)",
       UInt([](JobConfig* j, uint64_t v) { j->generated.test_rows = v; }, 1, uint64_t{1} << 40)},
      {"data.gen.seed", "11", "seed of the generated training rows",
       UInt([](JobConfig* j, uint64_t v) { j->generated.seed = v; }, 0, ~uint64_t{0} - 1)},
      {"data.gen.vocab_scale", "1", "multiply every generated slot's vocabulary (scale tests)",
       Float([](JobConfig* j, float v) { j->generated.vocab_scale = v; }, 1e-3, 1e6)},
      {"data.gen.zipf", "1.15",
       "Zipf exponent of the generated ids (> 1; flatter: more distinct keys)",
       Float([](JobConfig* j, float v) { j->generated.zipf = v; }, 1.0001, 10)},
      {"data.gen.format", "criteo",
       "layout of the generated rows: criteo | slots | libsvm | libfm | libffm",
       Format([](JobConfig* j, DataFormat f) { j->generated.layout = f; }, false)},
      // model
      {"model.embedding_dim", "16", "embedding dimension of every slot",
       UInt(
           [](JobConfig* j, uint64_t v) { j->spec.model.embedding_dim = static_cast<uint32_t>(v); },
           1, 1024)},
      {"model.mlp", "512,256,128", "hidden layer widths of the MLP tower (ReLU)", Widths()},
      {"model.wide", "false", "add the wide (LR) part: the sum of the keys' wide weights",
       Bool([](JobConfig* j, bool v) { j->spec.model.wide = v; })},
      {"model.dense_log1p", "true", "dense features enter as log(1 + max(x, 0))",
       Bool([](JobConfig* j, bool v) { j->spec.model.dense_log1p = v; })},
      // interactions, composable with the MLP and the wide part (docs/model.md, "Architectures")
      {"model.fm", "false",
       "add DeepFM's second-order term (pairwise dot products of the slots' embeddings, summed) "
       "to the logit",
       Bool([](JobConfig* j, bool v) { j->spec.model.fm = v; })},
      {"model.cross_layers", "0",
       "DCN-v2 cross layers x_{l+1} = x0 * (x_l W_l + b_l) + x_l between the input and the MLP",
       UInt([](JobConfig* j, uint64_t v) { j->spec.model.cross_layers = static_cast<uint32_t>(v); },
            0, 16)},
      {"model.cross_rank", "0",
       "rank r of the cross layers' W_l = U_l V_l^T (DCN-v2's low-rank form; 0: full W0 x W0)",
       UInt([](JobConfig* j, uint64_t v) { j->spec.model.cross_rank = static_cast<uint32_t>(v); },
            0, 4096)},
      {"model.cross_experts", "0",
       "DCN-v2's mixture of low-rank experts: this many experts per cross layer, each "
       "x0 * (relu(relu(x_l V) C) U + b) of rank model.cross_rank, mixed by a softmax gate of x_l "
       "(0: one W_l per layer)",
       UInt(
           [](JobConfig* j, uint64_t v) { j->spec.model.cross_experts = static_cast<uint32_t>(v); },
           0, 64)},
      {"model.bottom_mlp", "",
       "DLRM's bottom MLP: ReLU layer widths turning the dense features into z, the last as wide "
       "as model.embedding_dim; z replaces them in the input and joins model.dot's products",
       Widths(&ModelOptions::bottom_mlp)},
      {"model.shared_slots", "",
       "groups of slots that share their keys (equal raw ids in them are one key, one row): "
       "slot indices joined by '+', groups by ',', e.g. 0+5,3+7",
       SlotGroups()},
      {"model.slot_dims", "",
       "per-slot embedding dimensions: slots:dim groups separated by ',' (slots as indices or "
       "ranges joined by '+'), e.g. 0-9:32,10-25:8; other slots keep model.embedding_dim, and "
       "the slots of one dimension form one table",
       SlotDimGroups()},
      {"model.towers", "0",
       "AIBox's joint learning: this many MLP towers of model.mlp's widths instead of one, each "
       "reading the input plus the first and last hidden layers of the towers before it; one "
       "output unit over their last hidden layers (0 or 1: the single MLP)",
       UInt([](JobConfig* j, uint64_t v) { j->spec.model.towers = static_cast<uint32_t>(v); }, 0,
            16)},
      {"model.tower_mlp", "",
       "with model.towers: each tower's own hidden widths instead of model.mlp's, one shape per "
       "tower: widths joined by '-' (or '+'), shapes by ',', e.g. 512-256-128,256-128",
       TowerShapes()},
      {"model.dense_groups", "",
       "with model.towers: each tower's own dense features, one group per tower (the others "
       "feed every tower): indices or ranges joined by '+', groups by ',', e.g. 0-5,6-12",
       DenseGroups()},
      {"model.dot", "false",
       "append DLRM's pairwise dot products of the slots' embeddings to the MLP's input",
       Bool([](JobConfig* j, bool v) { j->spec.model.dot = v; })},
      // lossy hashing of the keys, the baseline lossless ids are measured against
      {"features.hashing.method", "none",
       "hash keys into a smaller space: none (lossless) | modulo (K keys) | op_osrp (2K keys)",
       [](JobConfig* j, std::string_view v, std::string* expect) {
         *expect = "none, modulo or op_osrp";
         return ParseHashingMethod(v, &j->spec.model.hashing.method);
       }},
      {"features.hashing.bins", "0", "K, the bins of features.hashing (required with a method)",
       UInt([](JobConfig* j, uint64_t v) { j->spec.model.hashing.bins = v; }, 1,
            uint64_t{1} << 61)},
      // optimizers
      {"optimizer.sparse.type", "adagrad",
       "sparse optimizer: adagrad | rowwise_adagrad (one state value per row: smaller rows) | "
       "sgd | adam",
       Optimizer([](JobConfig* j) { return &j->spec.sparse_optimizer; }, true)},
      {"optimizer.sparse.state_bits", "0",
       "stored bits of each embedding optimizer-state value: 0 (float32) or 16 (bfloat16, "
       "rounded stochastically after every update; adagrad and rowwise_adagrad; "
       "docs/quantization.md)",
       UInt([](JobConfig* j,
               uint64_t v) { j->spec.sparse_optimizer.state_bits = static_cast<uint32_t>(v); },
            0, 16)},
      {"optimizer.sparse.lr", "0.05", "sparse learning rate",
       Float([](JobConfig* j, float v) { j->spec.sparse_optimizer.lr = v; }, 0, 1e6)},
      {"optimizer.sparse.epsilon", "1e-10 (adagrad, rowwise_adagrad), 1e-8 (adam)",
       "sparse optimizer epsilon",
       Float([](JobConfig* j, float v) { j->spec.sparse_optimizer.epsilon = v; }, 0, 1)},
      {"optimizer.sparse.beta1", "0.9", "sparse adam beta1",
       Float([](JobConfig* j, float v) { j->spec.sparse_optimizer.beta1 = v; }, 0, 0.999999)},
      {"optimizer.sparse.beta2", "0.999", "sparse adam beta2",
       Float([](JobConfig* j, float v) { j->spec.sparse_optimizer.beta2 = v; }, 0, 0.999999)},
      {"optimizer.dense.type", "adam", "dense optimizer: adam | adagrad | sgd",
       Optimizer([](JobConfig* j) { return &j->spec.dense_optimizer; }, false)},
      {"optimizer.dense.lr", "0.001", "dense learning rate",
       Float([](JobConfig* j, float v) { j->spec.dense_optimizer.lr = v; }, 0, 1e6)},
      {"optimizer.dense.epsilon", "1e-8 (adam), 1e-10 (adagrad)", "dense optimizer epsilon",
       Float([](JobConfig* j, float v) { j->spec.dense_optimizer.epsilon = v; }, 0, 1)},
      {"optimizer.dense.beta1", "0.9", "dense adam beta1",
       Float([](JobConfig* j, float v) { j->spec.dense_optimizer.beta1 = v; }, 0, 0.999999)},
      {"optimizer.dense.beta2", "0.999", "dense adam beta2",
       Float([](JobConfig* j, float v) { j->spec.dense_optimizer.beta2 = v; }, 0, 0.999999)},
      // table
      {"table.stripe_bits", "6",
       "the in-memory table has 2^stripe_bits stripes (each with its own lock, rows and share of "
       "the "
       "budget); formerly table.shard_bits",
       UInt([](JobConfig* j, uint64_t v) { j->storage.stripe_bits = static_cast<uint32_t>(v); }, 0,
            12)},
      {"table.embedx_threshold", "0",
       "create a key's embedding once its show/click score reaches this",
       Float([](JobConfig* j, float v) { j->spec.table.embedx_threshold = v; }, 0, 1e9)},
      {"table.nonclk_coeff", "0.1", "score = (show - click) * nonclk_coeff + click * click_coeff",
       Float([](JobConfig* j, float v) { j->spec.table.nonclk_coeff = v; }, 0, 1e6)},
      {"table.click_coeff", "1", "see table.nonclk_coeff",
       Float([](JobConfig* j, float v) { j->spec.table.click_coeff = v; }, 0, 1e6)},
      {"table.init_range", "0.01", "new embeddings are uniform in [-init_range, init_range]",
       Float([](JobConfig* j, float v) { j->spec.table.init_range = v; }, 0, 100)},
      {"table.decay", "0.98", "show and click are multiplied by this at each shrink",
       Float([](JobConfig* j, float v) { j->spec.table.decay = v; }, 0, 1)},
      {"table.delete_threshold", "0", "shrink deletes keys whose score falls below this",
       Float([](JobConfig* j, float v) { j->spec.table.delete_threshold = v; }, 0, 1e9)},
      {"table.ttl_partitions", "0",
       "a stream job deletes the keys not trained in the last this many partitions (checked "
       "after each partition; counters decay by table.decay then too); 0: never",
       UInt([](JobConfig* j, uint64_t v) { j->stream.ttl_partitions = static_cast<uint32_t>(v); },
            0, 65000)},
      {"table.admit.min_count", "0",
       "a stream job gives a key a row only once it has been seen this many times (0, 1: "
       "every key); until then its occurrences are left out (docs/routine.md, \"Admission\")",
       UInt([](JobConfig* j, uint64_t v) { j->stream.admit_min_count = static_cast<uint32_t>(v); },
            0, 255)},
      {"table.admit.bloom_bits", "24",
       "the admission counts' counting Bloom filter: 2^this one-byte counters (24: 16 MiB)",
       UInt([](JobConfig* j, uint64_t v) { j->stream.admit_bloom_bits = static_cast<uint32_t>(v); },
            10, 34)},
      {"table.delete_after_unseen_passes", "0",
       "shrink deletes keys unseen for more passes (0: never)",
       UInt([](JobConfig* j,
               uint64_t v) { j->spec.table.delete_after_unseen_passes = static_cast<uint32_t>(v); },
            0, 65535)},
      {"table.shrink_every_passes", "0",
       "run shrink after every N passes of pipeline.pass_examples (0: never)",
       UInt([](JobConfig* j,
               uint64_t v) { j->train.shrink_every_passes = static_cast<uint32_t>(v); },
            0, kMaxU32)},
      // storage (docs/storage.md)
      {"storage.ssd_dir", "(none: all rows in memory)",
       "directory of the SSD parameter files; with it the table keeps storage.memory_budget in "
       "memory",
       Text([](JobConfig* j, std::string v) { j->storage.ssd.dir = std::move(v); })},
      {"storage.memory_budget", "0 (unlimited; required with storage.ssd_dir)",
       "bytes of sparse-table memory (cache, group index, Bloom filters), e.g. 512MB, or a share "
       "of the job's memory box (its memory cgroup's limit, which counts the page cache, else "
       "the physical memory), e.g. 45%; needs storage.ssd_dir",
       MemoryBudget()},
      {"storage.keep_store", "false",
       "train: close the SSD store cleanly at the end (for inspect --store) instead of deleting it",
       Bool([](JobConfig* j, bool v) { j->storage.keep_store = v; })},
      {"storage.disk_probe", "auto",
       "train: measure the disk under the SSD files at the job's end (random 4 KiB reads/s at 1 "
       "and 16 in flight, sequential MB/s; O_DIRECT) for the report's disk ceiling: auto (0.5 s "
       "when training took at least 10 s), off, or seconds",
       DiskProbe()},
      {"storage.disk_budget", "0 (unlimited)", "bytes the parameter files may take",
       Bytes([](JobConfig* j, uint64_t v) { j->storage.ssd.disk_budget = v; }, 0)},
      {"storage.group_bits", "log2(memory_budget / 1920)",
       "2^group_bits key groups (one SSD record and one index entry each)",
       UInt([](JobConfig* j, uint64_t v) { j->storage.ssd.group_bits = static_cast<uint32_t>(v); },
            1, 30)},
      {"storage.file_bytes", "64MB", "size at which a parameter file is sealed",
       Bytes([](JobConfig* j, uint64_t v) { j->storage.ssd.file_bytes = v; }, 4096)},
      {"storage.recycle_files", "8",
       "dead parameter files kept to be written over by the next new ones (their cached pages "
       "take the bytes instead of new ones); 0 deletes them at once",
       UInt([](JobConfig* j,
               uint64_t v) { j->storage.ssd.recycle_files = static_cast<uint32_t>(v); },
            0, 64)},
      {"storage.direct_reads", "false",
       "read the SSD files with O_DIRECT, bypassing the page cache (for a box whose memory "
       "cannot cache them: no page cache to fill and reclaim); false reads through the cache "
       "with read-ahead off; a file system without O_DIRECT (tmpfs) reads through the cache",
       Bool([](JobConfig* j, bool v) { j->storage.ssd.direct_reads = v; })},
      {"storage.mapped_reads", "auto (false with storage.direct_reads)",
       "read the SSD files by copying out of read-only mappings instead of with pread: no "
       "system call per record read, for files the page cache holds (their mapped pages "
       "count in the process's RSS; a device error is a crash, not an error); auto: while "
       "the reads come from memory, pread once more than 5 % of them wait for the device "
       "(and back below 1 %); true not with storage.direct_reads",
       MappedReadsMode()},
      {"storage.quant.bits", "0 (float32)",
       "store embeddings as b-bit integer codes (2..16; 8 and 16 are the paper's; "
       "docs/quantization.md); every sparse update is rounded onto the grid",
       UInt([](JobConfig* j, uint64_t v) { j->spec.model.quant.bits = static_cast<uint32_t>(v); },
            0, 16)},
      {"storage.quant.range", "1",
       "w: codes cover [-w, w] in 2^bits - 1 steps; values outside "
       "are clipped",
       Float([](JobConfig* j, float v) { j->spec.model.quant.range = v; }, 1e-6, 1e6)},
      {"storage.quant.rounding", "stochastic",
       "stochastic (StocQ: floor(x/step + u), u uniform, unbiased) | nearest (FixQ)", Rounding()},
      {"storage.io_threads", "4", "parallel record reads per pull while they come from memory",
       UInt([](JobConfig* j, uint64_t v) { j->storage.io_threads = static_cast<int>(v); }, 1, 256)},
      {"storage.device_io_threads", "16",
       "parallel record reads per pull while they come from the device (more than 5 % of a "
       "window's reads slower than 20 µs, until under 1 %), and per write-back batch; "
       "0: storage.io_threads",
       UInt([](JobConfig* j, uint64_t v) { j->storage.device_io_threads = static_cast<int>(v); }, 0,
            256)},
      {"storage.parallel_read_us", "40",
       "a write-back batch reads its groups' old records one at a time until they average more "
       "than this many microseconds (then they come from the device, not the page cache), and "
       "the rest storage.device_io_threads at a time; 0: in parallel from the second read on",
       Float([](JobConfig* j, float v) { j->storage.parallel_read_us = v; }, 0, 1e9)},
      {"storage.evict_threads", "2", "stripes the background worker writes back in parallel",
       UInt([](JobConfig* j, uint64_t v) { j->storage.evict_threads = static_cast<int>(v); }, 1,
            64)},
      {"storage.bloom_share", "0.1",
       "the share of storage.memory_budget the SSD files' Bloom filters may take (a new file's "
       "filter gets fewer bits per key, or none, to stay within)",
       Float([](JobConfig* j, float v) { j->storage.bloom_share = v; }, 0.001, 0.5)},
      {"storage.bloom_bits_per_key", "8", "Bloom filter bits per key (8: ~2 % false positives)",
       UInt([](JobConfig* j,
               uint64_t v) { j->storage.ssd.bloom_bits_per_key = static_cast<int>(v); },
            1, 32)},
      {"storage.lfu_half_life", "64 (32 with pipeline.queue_depth 0)",
       "eviction keeps the rows used most: a row's show count, halved for every this many "
       "passes since its last use, ranks it (larger: frequency counts more than recency)",
       Float([](JobConfig* j, float v) { j->storage.lfu_half_life = v; }, 0.01, 1e6)},
      {"storage.dirty_weight", "4",
       "eviction ranks a row it must write back (dirty) this many times its use: above 1, "
       "clean rows leave before dirty ones used as often (evicting a clean row writes nothing)",
       Float([](JobConfig* j, float v) { j->storage.dirty_weight = v; }, 1, 1e6)},
      {"storage.min_group_victims", "2",
       "an eviction round keeps the dirty rows of a group with fewer victims than this (a group "
       "write for one row) while clean rows ranked next can leave instead; 1: never",
       UInt([](JobConfig* j,
               uint64_t v) { j->storage.min_group_victims = static_cast<uint32_t>(v); },
            1, 1000)},
      {"storage.delta_share", "0.2",
       "a group's delta record is merged into its base once it would hold more than this share "
       "of the base's rows (lower: fewer rows carried per write-back, more merges)",
       Float([](JobConfig* j, float v) { j->storage.delta_share = v; }, 0.01, 4)},
      {"storage.evict_start", "0.9", "eviction starts above this share of the memory budget",
       Float([](JobConfig* j, float v) { j->storage.evict_start = v; }, 0.05, 1)},
      {"storage.evict_stop", "0.8", "... and stops below this share",
       Float([](JobConfig* j, float v) { j->storage.evict_stop = v; }, 0.01, 1)},
      {"storage.compact_stale", "0.5", "compact files whose stale share exceeds this",
       Float([](JobConfig* j, float v) { j->storage.compact_stale = v; }, 0.01, 0.99)},
      // checkpoints (docs/checkpoints.md)
      {"ckpt.dir", "(none: no checkpoints)",
       "directory of the train job's checkpoints; `train --resume` continues from the newest",
       Text([](JobConfig* j, std::string v) { j->ckpt.dir = std::move(v); })},
      {"ckpt.every_passes", "1",
       "a checkpoint after every this many passes of pipeline.pass_examples (0: only at the end)",
       UInt([](JobConfig* j, uint64_t v) { j->ckpt.every_passes = static_cast<uint32_t>(v); }, 0,
            1u << 30)},
      {"ckpt.base_every", "8",
       "at least every this many checkpoints is a base (all rows); the others are deltas",
       UInt([](JobConfig* j, uint64_t v) { j->ckpt.base_every = static_cast<uint32_t>(v); }, 1,
            1u << 30)},
      {"ckpt.keep", "2", "the newest checkpoints kept (with the base and deltas they need)",
       UInt([](JobConfig* j, uint64_t v) { j->ckpt.keep = static_cast<uint32_t>(v); }, 1,
            1u << 30)},
      // stream and serving (docs/routine.md)
      {"stream.root", "(none: a job of files)",
       "follow this directory: its partitions are taken in order as they land, each tested "
       "on, then trained on, once (needs ckpt.dir)",
       Text([](JobConfig* j, std::string v) { j->stream.root = std::move(v); })},
      {"stream.layout", "{day}/{hour}",
       "how partitions are named below stream.root: {day} (YYYYMMDD) with {hour} (HH) or "
       "alone, or {index}; literal text around them (dt={day}/hr={hour})",
       Text([](JobConfig* j, std::string v) { j->stream.layout = std::move(v); })},
      {"stream.done_file", "_SUCCESS", "a partition is ready once this file exists in it",
       Text([](JobConfig* j, std::string v) { j->stream.done_file = std::move(v); })},
      {"stream.poll_seconds", "10", "seconds between looks for the next partition",
       Float([](JobConfig* j, float v) { j->stream.poll_seconds = v; }, 0.001, 86400)},
      {"stream.start", "(the first ready partition)",
       "the first partition (its name, e.g. 20261101/00)",
       Text([](JobConfig* j, std::string v) { j->stream.start = std::move(v); })},
      {"stream.until", "(none: until stopped)", "stop once this partition is committed",
       Text([](JobConfig* j, std::string v) { j->stream.until = std::move(v); })},
      {"stream.max_wait", "3600",
       "seconds a missing partition is waited for once a later one is ready",
       Float([](JobConfig* j, float v) { j->stream.max_wait_seconds = v; }, 0, 1e9)},
      {"stream.on_late", "skip",
       "a partition still missing after stream.max_wait: skip (counted and logged; never "
       "trained later) | fail (the job stops) | wait (without end)",
       OnLate()},
      {"stream.max_ahead", "86400",
       "seconds a ready partition may begin after the clock (time zones, skew); one further "
       "ahead is from the future: not taken, and no reason to skip, until the clock reaches it",
       Float([](JobConfig* j, float v) { j->stream.max_ahead_seconds = v; }, 0, 1e10)},
      {"stream.max_gap", "1000",
       "partitions a ready one may lie after the next; one further is not taken, and no reason "
       "to skip, until the stream reaches it (0: no limit)",
       UInt([](JobConfig* j, uint64_t v) { j->stream.max_gap = static_cast<uint32_t>(v); }, 0,
            1u << 30)},
      {"serving.dir", "(none)",
       "publish versions for serving here: deltas and bases, listed in versions.jsonl",
       Text([](JobConfig* j, std::string v) { j->serving.dir = std::move(v); })},
      {"serving.delta_every", "1", "publish a version after every this many partitions",
       UInt([](JobConfig* j, uint64_t v) { j->serving.delta_every = static_cast<uint32_t>(v); }, 1,
            1u << 20)},
      {"serving.base_every", "24",
       "every this many versions is a base (every row); the others are deltas",
       UInt([](JobConfig* j, uint64_t v) { j->serving.base_every = static_cast<uint32_t>(v); }, 1,
            1u << 20)},
      {"serving.keep_bases", "2", "the newest bases kept, with the deltas after them",
       UInt([](JobConfig* j, uint64_t v) { j->serving.keep_bases = static_cast<uint32_t>(v); }, 1,
            1u << 20)},
      {"serving.quant.bits", "0",
       "serving rows' embeddings as 16- or 8-bit codes (0: as the table stores them)",
       UInt([](JobConfig* j, uint64_t v) { j->serving.quant_bits = static_cast<uint32_t>(v); }, 0,
            16)},
      {"serving.quant.range", "1", "w of the serving codes' range [-w, w] (values beyond clip)",
       Float([](JobConfig* j, float v) { j->serving.quant_range = v; }, 1e-6, 1e6)},
      // train
      {"train.threads", "number of CPUs", "trainer threads",
       UInt([](JobConfig* j, uint64_t v) { j->train.threads = static_cast<int>(v); }, 1, 1024)},
      {"train.seed", "1", "seed of the MLP and embedding initialisation",
       UInt([](JobConfig* j, uint64_t v) { j->train.seed = v; }, 0, ~uint64_t{0} - 1)},
      {"train.continue", "false",
       "train the model already in model_dir further (also --continue); without it, or "
       "--fresh, a model there is refused",
       Bool([](JobConfig* j, bool v) { j->train.continue_model = v; })},
      {"train.deterministic", "false",
       "canonical sums: any number of ranks dividing the batch's sum blocks trains the "
       "one-process model bit for bit "
       "(CPU; files are then read whole by every rank; docs/distributed.md); runs repeat bit "
       "for bit either way; "
       "device: gpu needs gpu.scatter=segment",
       Bool([](JobConfig* j, bool v) { j->train.deterministic = v; })},
      {"train.batch_size", "2048",
       "examples per minibatch; unset, sized from the data's rows (128 to 2048, at least 256 "
       "steps an epoch: docs/model.md)",
       UInt([](JobConfig* j, uint64_t v) { j->train.batch_size = static_cast<uint32_t>(v); }, 1,
            1 << 20)},
      {"train.epochs", "1",
       "passes over the data (1: online learning, each example seen once), or auto: until the "
       "validation logloss stops improving (train.max_epochs at most; docs/model.md)",
       Epochs()},
      {"train.max_epochs", "20", "train.epochs: auto trains at most this many epochs",
       UInt([](JobConfig* j, uint64_t v) { j->train.max_epochs = static_cast<uint32_t>(v); }, 1,
            100000)},
      {"train.validation_fraction", "0 (0.1 with train.epochs: auto)",
       "share of the training rows held back and scored after every epoch (never the test "
       "data); the epoch of the lowest validation logloss is the model kept",
       Float([](JobConfig* j, float v) { j->train.validation_fraction = v; }, 0, 0.5)},
      {"train.early_stop_patience", "2",
       "train.epochs: auto stops after this many epochs in a row without a lower validation "
       "logloss",
       UInt([](JobConfig* j, uint64_t v) { j->train.patience = static_cast<uint32_t>(v); }, 1,
            1000)},
      {"train.metrics_path", "<model-dir>/metrics.jsonl", "JSON-lines metrics log",
       Text([](JobConfig* j, std::string v) { j->train.metrics_path = std::move(v); })},
      {"train.progress_seconds", "2", "seconds between progress updates",
       Float([](JobConfig* j, float v) { j->train.progress_seconds = v; }, 0, 1e9)},
      {"train.dry_run", "false",
       "run every stage as training would but compute nothing (no gradients, no model saved): "
       "examples_per_s is the input pipeline's feed rate",
       Bool([](JobConfig* j, bool v) { j->train.dry_run = v; })},
      // device
      {"device", "cpu", "where the train stage runs: cpu | gpu (docs/gpu.md)", Device()},
      {"gpu.count", "1",
       "GPUs the pass's working table is partitioned over (key mod count); more than the "
       "machine has share GPUs round robin",
       UInt([](JobConfig* j, uint64_t v) { j->gpu_options.gpus = static_cast<uint32_t>(v); }, 1,
            1024)},
      {"gpu.gemm", "fp32", "MLP GEMM precision: fp32 | tf32 | bf16 (tensor cores, fp32 sums)",
       Gemm()},
      {"gpu.scatter", "segment",
       "per-key gradient sums: segment (fixed order, deterministic) | atomic (float atomics)",
       Scatter()},
      {"gpu.emulate", "false",
       "run the GPU train step on CPU threads (no GPU needed; slow; for tests and debugging)",
       Bool([](JobConfig* j, bool v) { j->gpu_options.emulate = v; })},
      {"gpu.replay", "true",
       "record each minibatch shape's step once (a CUDA graph) and replay it: one launch per "
       "minibatch (one GPU per process; docs/gpu.md, \"A replayed step\")",
       Bool([](JobConfig* j, bool v) { j->gpu_options.replay = v; })},
      {"gpu.staged_memory", "0 (auto: half of GPU 0's memory; no limit with gpu.emulate)",
       "GPU memory the staged passes may take together (queue_depth + 2 of them): the read "
       "stage closes a pass before its bytes pass its share (docs/gpu.md, \"Pass sizing\"); "
       "formerly gpu.pass_memory",
       Bytes([](JobConfig* j, uint64_t v) { j->gpu_options.staged_memory = v; }, 0)},
      // pipeline
      {"pipeline.pass_examples", "262144",
       "examples per pass (the unit of pull / train / push, shrinking and checkpoints); with "
       "pass sizing by memory, cut further between minibatches",
       UInt([](JobConfig* j, uint64_t v) { j->pipeline.pass_examples = v; }, 1, uint64_t{1} << 32)},
      {"pipeline.pass_memory", "0 (auto: storage.memory_budget / 4, at least 64MB)",
       "with passes sized by memory: the bytes the passes alive at once (3 x queue_depth + 4) "
       "may hold in examples, working sets and working tables; a pass closes before it would "
       "pass it (docs/storage.md, \"Pass memory\")",
       Bytes([](JobConfig* j, uint64_t v) { j->pipeline.pass_memory = v; }, 0)},
      {"pipeline.size_by_memory", "true",
       "with storage.memory_budget: close a pass before the rows that the passes in flight pin "
       "together would exceed 60 % of the budget (docs/storage.md, \"Pass sizing\")",
       Bool([](JobConfig* j, bool v) { j->pipeline.size_by_memory = v; })},
      {"pipeline.enabled", "true",
       "overlap read, pull, train and push on consecutive passes (false: one after the other; "
       "docs/pipeline.md)",
       Bool([](JobConfig* j, bool v) { j->pipeline.enabled = v; })},
      {"pipeline.queue_depth", "1",
       "passes each queue between two stages holds (0: none, a stage hands its pass to the next "
       "when that one takes it: 4 passes alive at once instead of 3 x queue_depth + 4, so "
       "passes sized by memory may each be larger; docs/pipeline.md, \"Memory\")",
       UInt([](JobConfig* j, uint64_t v) { j->pipeline.queue_depth = static_cast<uint32_t>(v); }, 0,
            64)},
      {"pipeline.read_threads", "number of CPUs",
       "threads of the read stage (working sets and the pass table; data.reader_threads decode)",
       UInt([](JobConfig* j, uint64_t v) { j->pipeline.read_threads = static_cast<int>(v); }, 1,
            256)},
      {"pipeline.pull_threads", "number of CPUs", "threads of the pull stage",
       UInt([](JobConfig* j, uint64_t v) { j->pipeline.pull_threads = static_cast<int>(v); }, 1,
            256)},
      {"pipeline.push_threads", "number of CPUs", "threads of the push stage",
       UInt([](JobConfig* j, uint64_t v) { j->pipeline.push_threads = static_cast<int>(v); }, 1,
            256)},
      {"pipeline.background_nice", "10",
       "the nice value the threads other than the train stage's (read, pull, push, the "
       "decoders, the SSD tier's) add to the process's, so that where the job fills the cores "
       "the train stage takes them first; 0: every thread alike (docs/pipeline.md, \"Threads\")",
       UInt([](JobConfig* j, uint64_t v) { j->pipeline.background_nice = static_cast<int>(v); }, 0,
            19)},
      // dist (docs/distributed.md)
      {"dist.timeout_seconds", "600",
       "a job of several ranks: an exchange waiting this long for the other ranks stops the "
       "job, naming the wait (docs/distributed.md)",
       Float([](JobConfig* j, float v) { j->dist.timeout_seconds = v; }, 0.1, 1e7)},
      {"dist.sparse_updates", "owner",
       "a job of several ranks: owner (a key's owner applies its updates and sends each rank "
       "the changed rows its next minibatch uses) | replicated (every rank holding a key "
       "applies every update of it; not with device: gpu); the same model, owner sends fewer "
       "bytes as ranks grow (docs/distributed.md, \"Owner updates\")",
       SparseUpdates()},
  };
  return keys;
}

const std::vector<RenamedKey>& RenamedKeys() {
  // (gpu.pass_memory was pipeline.pass_memory's namesake: docs/architecture.md, "Words")
  static const std::vector<RenamedKey> renamed = {{"gpu.pass_memory", "gpu.staged_memory"},
                                                  {"table.shard_bits", "table.stripe_bits"}};
  return renamed;
}

}  // namespace ctrbox::config
