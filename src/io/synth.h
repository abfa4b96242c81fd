// Synthetic click logs with a planted model (`ctrbox gen`, the built-in default job, tests).
//
// Ids per slot follow a Zipf law (a few hot, most cold), labels are drawn from a planted
// logistic model with per-id weights, low-rank interactions between pairs of slots and a
// saturating effect of two dense features, so a model that learns interactions beats plain
// logistic regression, and the planted probabilities give an oracle AUC.
//
// The planted model depends only on the layout, never on the seed: files generated with
// different seeds (train, test) share it. Row i depends only on (seed, i), so rows generate
// in parallel and the direct Batch form equals the parse of the text form.
#ifndef CTRBOX_IO_SYNTH_H_
#define CTRBOX_IO_SYNTH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "io/batch.h"
#include "io/text_format.h"

namespace ctrbox {

class Random;

// Zipf on {0..n-1} (rank 0 hottest) with exponent a > 1, by rejection-inversion
// (Hormann & Derflinger, 1996): O(1) per sample, no tables.
class ZipfSampler {
 public:
  ZipfSampler(uint64_t n, double a);
  uint64_t Sample(Random* rng) const;

 private:
  double h(double x) const;
  double H(double x) const;
  double HInv(double y) const;
  double n_, a_, h_x1_, h_n_, s_;
};

struct SynthSlot {
  uint64_t vocab;         // distinct ids
  double zipf = 1.15;     // popularity exponent (> 1)
  uint32_t max_keys = 1;  // > 1: multi-hot, 1..max_keys ids per row
  double missing = 0.04;  // probability that the slot is empty in a row
};

struct SynthOptions {
  // criteo: 26 slots, 13 dense (Criteo's vocabulary mix); slots: 16 slots, 4 of them
  // multi-hot, 4 dense; libsvm and libfm: the criteo layout as one field of idx:val features;
  // libffm: the criteo layout as field:idx:val with the dense values as fields 26..38.
  DataFormat format = DataFormat::kCriteo;
  uint64_t seed = 1;
  // Long-tail knobs for scale tests: every slot's vocabulary is multiplied by vocab_scale and
  // its Zipf exponent set to `zipf` (0: keep 1.15). A flatter law over larger vocabularies
  // yields many more distinct keys per row, as user, query and ad ids do in real logs.
  double vocab_scale = 1.0;
  double zipf = 0.0;
  KeySlots key_slots;  // model.shared_slots
  // Time, for streams of partitions (gen --partitions): `period` is the partition's index.
  // The base click rate drifts by ctr_drift * sin(2 pi period / 24) on the logit (a daily
  // cycle of hourly partitions), and an id is, with probability new_id_share, one of the
  // period's own new ids (a Zipf draw of its own range: ids appear and fade over time).
  uint64_t period = 0;
  double ctr_drift = 0.0;
  double new_id_share = 0.0;
};

class SynthGenerator {
 public:
  explicit SynthGenerator(SynthOptions options);

  // The schema of the rows as a reader of `format` sees them.
  Schema schema() const;

  // Rows [begin, end) as a Batch equal to what the format's parser returns for the text
  // form; probs (if not null) receives the planted click probabilities.
  void GenerateBatch(uint64_t begin, uint64_t end, Batch* out, std::vector<double>* probs) const;
  // GenerateBatch's rows appended to *out (of schema()'s rows).
  void AppendRows(uint64_t begin, uint64_t end, Batch* out, std::vector<double>* probs) const;
  // Rows [begin, end) as text lines in the format.
  void GenerateText(uint64_t begin, uint64_t end, std::string* out,
                    std::vector<double>* probs) const;

 private:
  struct Row {
    float label;
    double prob;
    std::vector<float> dense;  // raw values
    std::vector<bool> dense_missing;
    std::vector<std::vector<uint64_t>> ids;  // per slot
  };
  void MakeRow(uint64_t index, Row* row) const;
  std::string CriteoValue(uint32_t slot, uint64_t id) const;

  SynthOptions options_;
  std::vector<SynthSlot> slots_;
  std::vector<ZipfSampler> zipf_;
  uint32_t num_dense_;
  std::vector<uint64_t> index_base_;  // libsvm: first feature index of each slot
};

}  // namespace ctrbox

#endif  // CTRBOX_IO_SYNTH_H_
