// CtrModel: the wide & deep CTR model (docs/model.md) on the CPU.
//
//   input  = [ f(dense_1..D) | sum-pool(embeddings of slot 1) | ... | sum-pool(slot S) ]
//   logit  = MLP(input) (+ sum of the wide weights of the example's keys, if model.wide)
//
// composed with the interactions of model/interactions.h when set: model.cross_layers DCN-v2
// cross layers turn the input into the MLP's (stacked), model.dot appends DLRM's pairwise dot
// products of the pooled embeddings to it, model.fm adds DeepFM's second-order term to the
// logit:
//
//   logit  = MLP([ cross^L(input) | dots(input) ]) + wide + fm(input)
//   p      = sigmoid(logit), loss = mean binary cross-entropy over the minibatch
//
// where f is log(1 + max(x, 0)) (model.dense_log1p) and a key with a weight w (libsvm
// values) enters every sum as w * row. The sparse rows of a pass live in a RowBlock indexed
// by the pass's local ids (working/working_set.h); TrainMinibatch updates them in place.
//
// A training step runs in two parallel phases on fixed work partitions (row blocks of 256
// rows; weight-gradient tiles of 128 columns; sparse updates in chunks of 1024 keys), so the
// result is bit-identical whatever the thread count (docs/model.md).
// Thread safety: not thread-safe (one trainer drives it); it uses the pool it is given.
#ifndef CTRBOX_MODEL_CTR_MODEL_H_
#define CTRBOX_MODEL_CTR_MODEL_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/batch.h"
#include "io/key_hashing.h"
#include "io/text_format.h"
#include "model/cross_mix.h"
#include "model/interactions.h"
#include "model/mlp.h"
#include "model/optimizer.h"
#include "model/towers.h"
#include "table/accessor.h"
#include "table/quant.h"
#include "table/value.h"
#include "util/thread_pool.h"
#include "working/working_set.h"

namespace ctrbox {

// model.slot_dims: the embedding dimension of a group of slots (docs/model.md, "Per-slot
// embedding dimensions").
struct SlotDims {
  std::vector<uint32_t> slots;
  uint32_t dim = 0;
  bool operator==(const SlotDims&) const = default;
};

struct ModelOptions {
  uint32_t embedding_dim = 16;  // of every slot model.slot_dims does not name
  std::vector<uint32_t> mlp = {512, 256, 128};
  bool wide = false;        // add the wide (LR) part to the logit
  bool dense_log1p = true;  // dense inputs as log(1 + max(x, 0)); else as they are
  // storage.quant: embeddings stored as b-bit codes; every sparse update is rounded onto the
  // grid (x <- Q(x + update), docs/quantization.md). bits 0: float32.
  QuantOptions quant;
  // features.hashing: the keys hashed into a smaller space before the table sees them, in
  // training and prediction alike (io/key_hashing.h). Off: lossless ids.
  HashingOptions hashing;
  // Interactions (model/interactions.h; docs/model.md "Architectures"). All off: the model
  // above, unchanged.
  bool fm = false;            // model.fm: DeepFM's second-order term on the logit
  uint32_t cross_layers = 0;  // model.cross_layers: DCN-v2 cross layers before the MLP
  uint32_t cross_rank = 0;    // model.cross_rank: their W_l = U_l V_l^T of rank r (0: full)
  // model.cross_experts: DCN-v2's mixture of this many low-rank experts per cross layer
  // (model/cross_mix.h; needs cross_rank), 0: one W_l per layer.
  uint32_t cross_experts = 0;
  bool dot = false;  // model.dot: DLRM's pairwise dot products into the MLP
  // model.bottom_mlp: DLRM's bottom MLP (ReLU layers; the last as wide as an embedding) turns
  // the dense features into z, which takes their place in the input and joins the dots.
  std::vector<uint32_t> bottom_mlp;
  // model.shared_slots: groups of slots that share their keys (docs/model.md): a
  // group's slots key raw values with its first slot's seed, so an id in one slot and the same
  // id in another are one row (a recent-clicks sequence and the candidate ad, say).
  std::vector<std::vector<uint32_t>> shared_slots;
  // model.towers: AIBox's joint-learning towers (model/towers.h): 2 or more MLP towers of
  // model.mlp's widths in place of the single MLP (0 or 1: the single MLP). model.dense_groups:
  // tower t's own dense features (indices into the dense features), one group per tower;
  // dense features in no group feed every tower. Empty: every tower reads them all.
  uint32_t towers = 0;
  std::vector<std::vector<uint32_t>> dense_groups;
  // model.tower_mlp: each tower's own hidden widths, one list per tower (empty: model.mlp's).
  std::vector<std::vector<uint32_t>> tower_mlp;

  // model.slot_dims: slots whose embeddings have their own dimension. The slots of one
  // dimension form a table: table 0 holds embedding_dim's (slots slot_dims names not, and any
  // named with that dimension), tables 1, 2, ... the other dimensions in the order slot_dims
  // first names them. With one table (no slot_dims, or every dimension embedding_dim) the model
  // is the one-dimension model; with several, keys carry their table (value.h: TableKey).
  std::vector<SlotDims> slot_dims;

  // The tables' dimensions (TableDims()[t] of table t), and each slot's table and dimension.
  std::vector<uint32_t> TableDims() const {
    std::vector<uint32_t> dims = {embedding_dim};
    for (const SlotDims& g : slot_dims) {
      if (std::find(dims.begin(), dims.end(), g.dim) == dims.end()) dims.push_back(g.dim);
    }
    return dims;
  }
  uint32_t SlotTable(uint32_t slot) const {
    const std::vector<uint32_t> dims = TableDims();
    for (const SlotDims& g : slot_dims) {
      if (std::find(g.slots.begin(), g.slots.end(), slot) != g.slots.end()) {
        return static_cast<uint32_t>(std::find(dims.begin(), dims.end(), g.dim) - dims.begin());
      }
    }
    return 0;
  }
  uint32_t SlotDim(uint32_t slot) const { return TableDims()[SlotTable(slot)]; }
  bool MultiTable() const { return TableDims().size() > 1; }
  // The readers' table of each slot named in slot_dims (io/key_hashing.h); empty with one table.
  KeyTables KeyTableMap() const {
    KeyTables k;
    if (!MultiTable()) return k;
    for (const SlotDims& g : slot_dims) {
      for (uint32_t s : g.slots) {
        if (k.slot_table.size() <= s) k.slot_table.resize(s + 1, 0);
      }
    }
    for (uint32_t s = 0; s < k.slot_table.size(); ++s) k.slot_table[s] = SlotTable(s);
    return k;
  }
  // The widest table's dimension: a RowBlock row's (value.h, ValueLayout::dim).
  uint32_t MaxDim() const {
    const std::vector<uint32_t> dims = TableDims();
    return *std::max_element(dims.begin(), dims.end());
  }
  // "" or what is wrong with slot_dims given `num_slots` (0: not known yet) and the other
  // options (FM and the dot products need one dimension; a shared_slots group one table).
  std::string SlotDimsError(uint32_t num_slots) const;

  bool HasTowers() const { return towers >= 2; }
  // Every tower's hidden widths.
  std::vector<std::vector<uint32_t>> TowerWidths() const {
    return tower_mlp.empty() ? std::vector<std::vector<uint32_t>>(towers, mlp) : tower_mlp;
  }
  bool HasInteractions() const { return fm || cross_layers > 0 || dot || !bottom_mlp.empty(); }
  // The readers' key map of shared_slots (io/text_format.h); empty when there are none.
  KeySlots KeySlotMap() const {
    KeySlots k;
    for (const auto& group : shared_slots) {
      for (uint32_t s : group) {
        if (k.size() <= s) {
          const size_t old = k.size();
          k.resize(s + 1);
          for (size_t i = old; i <= s; ++i) k[i] = static_cast<uint32_t>(i);
        }
        k[s] = group.front();
      }
    }
    return k;
  }
  // "" or what is wrong with shared_slots given `num_slots` (0: not known yet).
  std::string SharedSlotsError(uint32_t num_slots) const {
    std::vector<bool> seen;
    for (const auto& group : shared_slots) {
      if (group.size() < 2) return "a group of model.shared_slots needs two slots or more";
      for (uint32_t s : group) {
        if (num_slots > 0 && s >= num_slots) {
          return "model.shared_slots names slot " + std::to_string(s) + " but the data has " +
                 std::to_string(num_slots) + " slots (0 to " + std::to_string(num_slots - 1) + ")";
        }
        if (seen.size() <= s) seen.resize(s + 1);
        if (seen[s]) return "model.shared_slots names slot " + std::to_string(s) + " twice";
        seen[s] = true;
      }
    }
    return "";
  }
};

// "" or what is wrong with model.towers and model.dense_groups given the data's `num_dense`
// (kUnknownDense: not known yet).
inline constexpr int64_t kUnknownDense = -1;
std::string TowersError(const ModelOptions& m, int64_t num_dense);

struct StepStats {
  double loss_sum = 0;  // summed binary cross-entropy of the minibatch (before the update)
  uint32_t embeddings_created = 0;
};

class CtrModel {
 public:
  CtrModel(Schema schema, ModelOptions model, OptimizerOptions sparse, OptimizerOptions dense,
           uint64_t seed);

  const Schema& schema() const { return schema_; }
  const ModelOptions& options() const { return options_; }
  // The single MLP. With towers (model.towers) only its in(0), the base's width, is the model's:
  // towers() holds the parameters in its place.
  const Mlp& mlp() const { return mlp_; }
  const Towers& towers() const { return towers_; }
  // The cross layers' parameters (layers 0: none), after the MLP's in dense_params().
  const CrossLayout& cross() const { return cross_; }
  // The mixture-of-experts cross layers (model.cross_experts; layers 0: none, and then cross()
  // has none), after the bottom MLP's parameters.
  const MixLayout& mix() const { return mix_; }
  // The first column of the MLP's input that receives a gradient (0 with cross layers or a
  // bottom MLP, else the dense features' end).
  uint32_t dmi_begin() const { return dmi_begin_; }
  // The bottom MLP (no layers: none) and where its parameters start in dense_params() (after
  // the cross layers').
  const Mlp& bottom() const { return bottom_; }
  size_t bottom_base() const { return bottom_base_; }
  // Columns of the input before the embeddings: num_dense, or dim with a bottom MLP (z).
  uint32_t dense_width() const { return dense_width_; }
  // Input widths: W0 = dense_width + the slots' dimensions (num_slots x dim without
  // model.slot_dims), and the MLP's (W0 + the dot products).
  uint32_t input_width() const { return input_width_; }
  uint32_t mlp_input_width() const { return mlp_.in(0); }
  // Slot s's embedding columns: slot_dim(s) of them from dense_width() + slot_col(s).
  uint32_t slot_col(uint32_t s) const { return slot_col_[s]; }
  uint32_t slot_dim(uint32_t s) const { return slot_dim_[s]; }
  uint32_t emb_width() const { return emb_width_; }
  // Multiply-adds x 2 of forward + backward per example (for throughput reports).
  double FlopsPerExample() const;
  // The model's shape in one line, for logs and reports: "13 dense + 26 slots x 16 -> 2 cross
  // layers (rank 64) -> MLP 512-256-128 (+ 325 dots) + wide + fm; 1234567 dense parameters".
  std::string Describe() const;
  // The stored row layout this model's sparse optimizer needs.
  ValueLayout value_layout() const;
  // The value layout a model of these options stores per key (before the model exists).
  static ValueLayout LayoutFor(const ModelOptions& model, const OptimizerOptions& sparse);
  const SparseOptimizer& sparse_optimizer() const { return sparse_opt_; }
  // The seed of the stochastic rounding of quantized updates (element d of key k's update at
  // dense step t draws from (quant_seed, Mix64(k) + t)).
  uint64_t quant_seed() const { return quant_seed_; }
  // The bfloat16 state's rounding (optimizer.sparse.state_bits: 16) draws from
  // (quant_seed ^ kStateSalt, Mix64(k) + t).
  static constexpr uint64_t kStateSalt = 0x57A7'E000'0000'0016ULL;

  // Dense parameters (the Mlp's or the towers', then the cross layers', then the bottom MLP's)
  // and their optimizer, for saving and loading.
  std::vector<float>& dense_params() { return params_; }
  const std::vector<float>& dense_params() const { return params_; }
  DenseOptimizer& dense_optimizer() { return dense_opt_; }
  const DenseOptimizer& dense_optimizer() const { return dense_opt_; }

  // Trains minibatch mb of `pass` (rows: the pass's rows by local id): predictions
  // [mb.rows()] receive p before the update (progressive validation); then the dense
  // parameters and the rows of the minibatch's keys are updated, show/click counted, and
  // embeddings created where the accessor's threshold is passed.
  StepStats TrainMinibatch(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                           RowBlock* rows, const CtrAccessor& accessor, ThreadPool* pool,
                           float* predictions);

  // ---- The distributed step (docs/distributed.md): TrainMinibatch in three calls, with the
  // gradients summed over the ranks between them. One rank calling the three in a row on the
  // whole minibatch gets TrainMinibatch's model, bit for bit.
  //
  // The gradient record of one key: [g_emb (dim) | g_wide | show | click].
  // (dim: the widest table's with model.slot_dims; a smaller table's key leaves the rest zero.)
  uint32_t SparseRecordWidth() const { return row_dim_ + 3; }
  // Predictions (before any update) and gradients of minibatch mb, updating nothing: the dense
  // gradient into dense_grads(), each distinct key's record (mb.uniq order) into *records
  // (with canonical sums, one per node of sum_nodes(): record u * nodes + i).
  // global_rows: the rows of the minibatch over all ranks (the loss is their mean); mb may have
  // no rows (a rank whose share ran out).
  StepStats ComputeGradients(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                             const RowBlock& rows, ThreadPool* pool, float* predictions,
                             uint32_t global_rows, std::vector<float>* records);
  std::vector<float>& dense_grads() { return grads_; }

  // ---- The order of the gradient sums (docs/distributed.md, "The same model on any number of
  // ranks"). By default a sum runs in the fastest fixed order for this process's rows: the
  // same bits from run to run and for any thread count, other bits for another number of
  // ranks. Canonical sums (train.deterministic) cut every global minibatch of B = batch_rows
  // rows into SumBlocksFor(B) fixed blocks of about kSumBlockRows rows (block b of K: rows
  // [b B / K, (b + 1) B / K)); each block is one row block of the forward and backward passes
  // and one leaf of every gradient sum, summed within in row order, and the blocks' sums add
  // up a fixed pairwise tree (util/pairwise_sum.h), an empty block skipped. A rank holding rows
  // [first_row, first_row + share_rows) of each global minibatch, a share of whole blocks,
  // computes the sums of the tree's nodes its share is made of (sum_nodes(): one node for a
  // whole batch, or a half, a quarter...: SumPosition); the ranks' node sums added up the same
  // tree are one process's, bit for bit.
  static constexpr uint32_t kMaxSumBlocks = 24;
  static constexpr uint32_t kSumBlockRows = 128;
  // K, for blocks of at least block_rows rows: when 3 divides the batch (and it has 3 such
  // blocks), the largest 3 2^a up to 24, so that 3, 6 or 12 ranks share whole blocks; otherwise
  // the largest power of two up to 16.
  static uint32_t SumBlocksFor(uint32_t batch_rows, uint32_t block_rows = kSumBlockRows);
  struct SumOrder {
    bool canonical = false;
    uint32_t batch_rows = 0;  // the global minibatch's (train.batch_size over all the ranks)
    uint32_t first_row = 0;   // this rank's first row in it
    uint32_t block_rows = kSumBlockRows;  // (the tests' small batches take smaller blocks)
    uint32_t share_rows = 0;              // this rank's rows of it (0: to its end)
  };
  void set_sum_order(const SumOrder& o);
  const SumOrder& sum_order() const { return sum_order_; }
  // What set_sum_order(o) makes of a rank's share, without a model: the tree's nodes the share
  // is made of ([firsts[i], ends[i]): sum_nodes(), sum_node_ends()), and the positions of its
  // blocks in order (the leaves of a minibatch of the whole share: SumBlocks). Canonical `o`.
  static void ShareNodes(const SumOrder& o, std::vector<uint32_t>* firsts,
                         std::vector<uint32_t>* ends);
  static std::vector<uint32_t> ShareLeaves(const SumOrder& o);
  // The tree's nodes this rank's share is made of, in order: the first position
  // (SumPosition) of each (one node, position 0, without canonical sums or for a whole batch).
  // ComputeGradients
  // computes a dense gradient and a record per key for each: node 0's gradient is
  // dense_grads(), node i's node_grads(i); a node without rows of the minibatch has zeros
  // (node_has_rows(i) false), and so has a key's record for a node with none of its rows.
  const std::vector<uint32_t>& sum_nodes() const { return sum_nodes_; }
  std::vector<float>& node_grads(size_t i) { return i == 0 ? grads_ : node_grads_[i - 1]; }
  bool node_has_rows(size_t i) const { return node_rows_[i] != 0; }
  // Where each node of sum_nodes() ends (its positions are [sum_nodes()[i], sum_node_ends()[i])),
  // and the row blocks of this rank's minibatch of `rows` rows: [blocks[i], blocks[i + 1]) and
  // each one's leaf (its sum block's position). The GPU step cuts its minibatches so (gpu/step.h).
  const std::vector<uint32_t>& sum_node_ends() const { return node_end_; }
  void SumBlocks(uint32_t rows, std::vector<uint32_t>* blocks, std::vector<uint32_t>* leaf) const {
    RowBlocks(rows, blocks, leaf);
  }
  // Starts the optimizer step and applies dense_grads() (summed over the ranks).
  void ApplyDense(ThreadPool* pool);
  // Applies summed records to rows local[0..n) of *rows (distinct), after ApplyDense of the
  // same step: show/click, the embedding and wide updates, embeddings created (their count
  // returned). Every copy of a row that takes the same records ends bit-identical.
  uint32_t ApplySparse(const uint32_t* local, const float* records, size_t n, RowBlock* rows,
                       const CtrAccessor& accessor, ThreadPool* pool);

  // Predicts rows [mb.row_begin, mb.row_end) of `examples` (keys mapped to rows by ws), in
  // blocks of kPredictBlockRows rows from mb.row_begin. A row's prediction depends on the
  // block's row count and the row's place in it (some BLAS kernels, e.g. OpenBLAS's Haswell
  // sgemm, sum a row's products in another order at another place), not on other rows: two
  // callers that cut the same rows into the same blocks get the same bits
  // (pipeline/eval_chunks.h).
  static constexpr uint32_t kPredictBlockRows = 256;
  // The minibatch size prediction uses for batch_size: whole prediction blocks, so that a
  // row's block, and so its prediction, does not depend on the batch size.
  static uint32_t PredictMinibatchRows(uint32_t batch_size);
  // Row-wise predictions (`ctrbox predict`, `ctrbox serve`): the forward GEMMs are
  // blas::SgemmRowwise, so a row's prediction depends on that row alone, whatever its block
  // (bit for bit; docs/serve.md, "Predictions"). Off by default (eval, training: OpenBLAS).
  void set_rowwise_predictions(bool on) { rowwise_predictions_ = on; }
  bool rowwise_predictions() const { return rowwise_predictions_; }
  void Predict(const Batch& examples, const WorkingSet& ws, const Minibatch& mb,
               const RowBlock& rows, ThreadPool* pool, float* predictions);
  // Predict in two steps, for rows whose keys' rows come from several pulls: PredictInputs
  // builds the inputs of minibatch mb's rows into prediction rows [at, at + mb.rows()) (the
  // rows may be released after it); PredictBuilt predicts prediction rows [0, n), in blocks
  // as Predict does. Predict(mb) equals PredictInputs(mb, 0) + PredictBuilt(mb.rows()).
  void PredictInputs(const Batch& examples, const WorkingSet& ws, const Minibatch& mb,
                     const RowBlock& rows, uint32_t at);
  void PredictBuilt(uint32_t n, ThreadPool* pool, float* predictions);

 private:
  static constexpr uint32_t kRowBlock = kPredictBlockRows;  // training's row blocks too
  static constexpr uint32_t kTileColumns = 128;
  static constexpr uint32_t kSparseChunk = 1024;

  void EnsureBuffers(uint32_t rows);
  // The constructor's steps: the cross and mixture layers' initial weights; the dense
  // backward's tiles, largest first.
  void InitInteractionWeights(uint64_t seed);
  void PlanTiles();
  // Builds the input rows [r0, r1) of the minibatch and their wide sums, into buffer rows
  // [at + r0, at + r1).
  void BuildInputs(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                   const RowBlock& rows, uint32_t r0, uint32_t r1, uint32_t at = 0);
  void ForwardBlock(uint32_t r0, uint32_t r1);
  // Predicts buffer rows [0, n) in blocks of kPredictBlockRows on `pool`, each block's inputs
  // built first by build(r0, r1) when it is set.
  void PredictBlocks(uint32_t n, ThreadPool* pool, float* predictions,
                     const std::function<void(uint32_t, uint32_t)>& build);
  // Phase A of a step: inputs, forward, loss gradient (mean over loss_rows), backward to the
  // inputs; returns the summed loss.
  double ForwardBackward(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                         const RowBlock& rows, ThreadPool* pool, float* predictions,
                         uint32_t loss_rows);
  void UpdateSparseChunk(const Batch& pass, const WorkingSet& ws, const Minibatch& mb, size_t u0,
                         size_t u1, RowBlock* rows, const CtrAccessor& accessor, uint32_t* created);
  // Key mb.uniq[u]'s gradient record (SparseRecordWidth floats), and its application to row l.
  void SparseRecord(const Batch& pass, const WorkingSet& ws, const Minibatch& mb, size_t u,
                    float* record) const;
  bool ApplyRecord(uint32_t l, const float* record, RowBlock* rows, const CtrAccessor& accessor);
  // Adds occurrences [q0, q1) of the minibatch's keys, in order, to their key's record g (of
  // SparseRecordWidth() floats): each the slot's gradient columns, the wide gradient, a show,
  // the click.
  void AddOccurrences(const Batch& pass, const WorkingSet& ws, const Minibatch& mb, uint32_t q0,
                      uint32_t q1, float* g) const;
  // The sparse record's canonical sum (SumOrder): per block in occurrence order, the blocks
  // added up the pairwise tree.
  void SparseRecordCanonical(const Batch& pass, const WorkingSet& ws, const Minibatch& mb, size_t u,
                             float* record) const;
  // A weight-gradient tile: its gradient, then the dense optimizer's update of its columns.
  void DenseTile(size_t tile, uint32_t batch_rows);
  // The tile's gradient over the minibatch's rows (canonically: by blocks, added up the tree).
  void DenseTileGrad(size_t tile, uint32_t batch_rows);
  // The tile's gradient over buffer rows [r0, r1), written into `grads` (laid out like the
  // parameters; only the tile's ranges are written). into_zeros: the tile's ranges of `grads`
  // are zero, and the GEMMs add into them rather than zero them first (Mlp::TileGrad).
  void DenseTileRows(size_t tile, uint32_t r0, uint32_t r1, float* grads, bool into_zeros = false);
  void DenseTileUpdate(size_t tile);
  // Calls fn(offset, n) for every range of parameters tile `tile` holds (its gradient and
  // update touch these alone).
  void ForTileRanges(size_t tile, const std::function<void(size_t, size_t)>& fn) const;
  // The training row blocks of a minibatch of `rows` rows: [blocks[i], blocks[i + 1]) (of
  // kRowBlock rows; with canonical sums, this rank's parts of the sum blocks), and each one's
  // leaf: its sum block's position in the tree (SumPosition).
  void RowBlocks(uint32_t rows, std::vector<uint32_t>* blocks, std::vector<uint32_t>* leaf) const;
  // node_rows_ from the step's leaves (ForwardBackward).
  void MarkNodeRows();
  // The sum block of the global minibatch's row `row` (SumOrder).
  uint32_t SumBlockOf(uint32_t row) const;
  // The block's position in the sums' tree (PairwiseStack's): the block itself when K is a
  // power of two. With K = 3 x 2^a, block 3t + i is at 4t + (0, 2, 3)[i]: a triple is a node
  // (its first block plus the sum of the other two; position 4t + 1 stays empty), and the
  // triples add up a dyadic tree, so that 2 or 4 ranks (whole triples) hold one node each.
  uint32_t SumPosition(uint32_t block) const;
  uint32_t SumBlockBegin(uint32_t block) const;
  static constexpr size_t kNoBias = ~size_t{0};
  // The interactions' halves of a row block: forward after BuildInputs (cross layers, dot
  // products into the MLP's input), and backward from the MLP's input gradient (dmi_) to the
  // embedding gradients (dx_).
  void InteractionsForward(uint32_t r0, uint32_t r1);
  void InteractionsBackward(uint32_t r0, uint32_t r1);
  // The MLP's input rows: x_ (no cross layers, no dots), the last cross layer's output, or
  // mlp_in_.
  const float* MlpInput() const;
  // x_l, the input of cross layer l (x_ for l = 0).
  const float* CrossInput(uint32_t l) const;

  Schema schema_;
  ModelOptions options_;
  bool rowwise_predictions_ = false;
  SparseOptimizer sparse_opt_;
  Mlp mlp_;
  uint32_t dense_width_;  // num_dense, or dim with a bottom MLP
  uint32_t input_width_;  // W0 = dense_width + emb_width
  // The embedding columns: slot s's dimension slot_dim_[s] at slot_col_[s] from dense_width_
  // (model.slot_dims), emb_width_ their sum; row_dim_ the widest table's dimension.
  uint32_t emb_width_ = 0, row_dim_ = 0;
  std::vector<uint32_t> slot_col_, slot_dim_;
  Towers towers_;
  CrossLayout cross_;
  Mlp bottom_;
  size_t bottom_base_;
  MixLayout mix_;
  std::vector<float> params_, grads_;
  SumOrder sum_order_;
  uint32_t sum_blocks_ = 1;  // SumBlocksFor(sum_order_.batch_rows)
  // Canonical sums: the tree's pending sums of the dense gradient (slots 1.., slot 0 is
  // grads_), each laid out like the parameters.
  std::vector<std::vector<float>> sum_slots_;
  // The nodes of this rank's share: [sum_nodes_[i], node_end_[i]) of the leaves; the dense
  // gradients of nodes 1.. (node 0's is grads_); whether each has rows in the step.
  std::vector<uint32_t> sum_nodes_{0}, node_end_{~0u};
  std::vector<std::vector<float>> node_grads_;
  std::vector<uint8_t> node_rows_{1};
  // The step's row blocks (RowBlocks), cut by ForwardBackward; the dense tiles' sums read them.
  std::vector<uint32_t> step_blocks_, step_leaves_;
  DenseOptimizer dense_opt_;
  Quantizer quant_;      // of the stored embeddings (disabled: float32)
  uint64_t quant_seed_;  // stochastic rounding of updates
  // A weight-gradient tile: columns [c0, c1) of an MLP layer's weights and bias, of a cross
  // layer's W_l (full rank) or U_l (low rank) and b_l, or of a low-rank layer's V_l.
  // With towers: columns of tower `tower`'s layer, or (kTowerOut, one tile) the output unit's
  // weights and bias.
  // With a mixture of experts: expert `tower` of cross layer `layer` (kMixExpert), or the
  // layer's gates and bias (kMixLayer); one tile each.
  enum class TileKind : uint8_t {
    kMlp,
    kCross,
    kCrossV,
    kBottom,
    kTower,
    kTowerOut,
    kMixExpert,
    kMixLayer
  };
  struct Tile {
    TileKind kind;
    uint32_t layer, c0, c1;
    uint32_t tower = 0;
  };
  std::vector<Tile> tiles_;  // fixed weight-gradient tiles, largest first

  // Minibatch buffers (row-major, capacity rows).
  uint32_t capacity_ = 0;
  std::vector<float> x_, logits_, dlogit_, wide_sum_, dx_;
  std::vector<std::vector<float>> acts_, grads_hidden_;
  std::vector<float*> act_ptrs_, grad_ptrs_;
  // With interactions: the MLP's input gradient from column dmi_begin_ (0 with cross layers,
  // else num_dense), the MLP's input when it has dots, and per cross layer l its output x_{l+1}
  // (cross_x_[l]), x_l W_l + b_l (cross_u_) and the gradient at that sum (cross_gu_); cross_g_,
  // cross_t_ and cross_acc_ are the backward's running gradient, product and x0 share.
  uint32_t dmi_begin_ = 0;
  std::vector<float> dmi_, mlp_in_, cross_g_, cross_t_, cross_acc_;
  std::vector<std::vector<float>> cross_x_, cross_u_, cross_gu_;
  // Low rank: x_l V_l (cross_low_) and the gradient there (cross_glow_), [rows x r] each.
  std::vector<std::vector<float>> cross_low_, cross_glow_;
  // Bottom MLP: its input f(dense) (bottom_in_), activations and pre-activation gradients per
  // layer, and the gradient at z (bottom_gz_).
  std::vector<float> bottom_in_, bottom_gz_;
  std::vector<std::vector<float>> bottom_acts_, bottom_grads_;
  // Towers: per tower its input and the input's gradient, per layer its activations and
  // pre-activation gradients, and the gradients later towers send to its first and last hidden
  // layers (model/towers.h); TowerBlock points them (and the base) at rows from r0.
  std::vector<std::vector<float>> tw_tin_, tw_dtin_, tw_injf_, tw_injl_;
  std::vector<std::vector<std::vector<float>>> tw_acts_, tw_grads_;
  TowerRows TowerBlock(uint32_t r0);
  // The mixture's buffers (model/cross_mix.h), per layer; MixBlock points them at rows from r0.
  std::vector<std::vector<float>> mix_x_, mix_a_, mix_c_, mix_u_, mix_gate_, mix_du_, mix_dc_,
      mix_da_, mix_dgate_, mix_dub_;
  std::vector<float> mix_g_, mix_acc_, mix_tmp_;
  MixRows MixBlock(uint32_t r0);
  // x_L: the cross layers' (or the mixture's) output, x_ without either.
  const float* CrossOutput() const;
  // A row block's bottom MLP forward (into x_'s first dim columns) and backward.
  void BottomForward(uint32_t r0, uint32_t r1);
  void BottomBackward(uint32_t r0, uint32_t r1);
};

// Row-wise predictions on `model` while alive (predict's callers; eval keeps OpenBLAS's).
class ScopedRowwisePredictions {
 public:
  explicit ScopedRowwisePredictions(CtrModel* model)
      : model_(model), was_(model->rowwise_predictions()) {
    model_->set_rowwise_predictions(true);
  }
  ~ScopedRowwisePredictions() { model_->set_rowwise_predictions(was_); }
  ScopedRowwisePredictions(const ScopedRowwisePredictions&) = delete;
  ScopedRowwisePredictions& operator=(const ScopedRowwisePredictions&) = delete;

 private:
  CtrModel* model_;
  bool was_;
};

}  // namespace ctrbox

#endif  // CTRBOX_MODEL_CTR_MODEL_H_
