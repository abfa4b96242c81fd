#include "io/synth.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "util/hash.h"
#include "util/random.h"

namespace ctrbox {
namespace {

// Criteo's mix of tiny, medium and huge vocabularies.
constexpr uint64_t kCriteoVocab[26] = {
    1000, 500,   3000000, 800000, 300,  24,   12000, 600,     3,  90000, 5000,   2000000, 3100,
    27,   14000, 1500000, 10,     5600, 2100, 4,     1800000, 18, 15,    140000, 100,     70000};
// Pairs of slots whose ids interact in the planted model.
constexpr uint32_t kPairs[4][2] = {{2, 3}, {11, 15}, {0, 20}, {6, 23}};
constexpr int kRank = 4;
constexpr size_t kMaxSlots = 32;
constexpr uint64_t kModelSeed = 0x706c616e746564ULL;  // "planted": fixed, independent of --seed

double HashGaussian(uint64_t h) {
  double u1 = (static_cast<double>(h >> 38) + 0.5) / static_cast<double>(1 << 26);
  double u2 =
      (static_cast<double>((h >> 12) & ((1 << 26) - 1)) + 0.5) / static_cast<double>(1 << 26);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

uint64_t IdHash(uint32_t slot, uint64_t id, uint64_t salt) {
  return Mix64(kModelSeed ^ Mix64((uint64_t{slot} << 48) ^ id ^ (salt << 56)) ^ salt);
}

std::string FormatFloat(float v) { return fmt::format("{:.9g}", v); }

}  // namespace

ZipfSampler::ZipfSampler(uint64_t n, double a) : n_(static_cast<double>(n)), a_(a) {
  h_x1_ = H(1.5) - 1.0;
  h_n_ = H(n_ + 0.5);
  s_ = 2.0 - HInv(H(2.5) - h(2.0));
}

uint64_t ZipfSampler::Sample(Random* rng) const {
  while (true) {
    double u = h_n_ + rng->Uniform() * (h_x1_ - h_n_);
    double x = HInv(u);
    double k = std::floor(x + 0.5);
    if (k < 1) k = 1;
    if (k > n_) k = n_;
    if (k - x <= s_ || u >= H(k + 0.5) - h(k)) return static_cast<uint64_t>(k) - 1;
  }
}

double ZipfSampler::h(double x) const { return std::exp(-a_ * std::log(x)); }
double ZipfSampler::H(double x) const {
  return (std::exp((1.0 - a_) * std::log(x)) - 1.0) / (1.0 - a_);
}
double ZipfSampler::HInv(double y) const {
  return std::exp(std::log(1.0 + y * (1.0 - a_)) / (1.0 - a_));
}

SynthGenerator::SynthGenerator(SynthOptions options) : options_(options) {
  if (options_.format == DataFormat::kSlots) {
    const uint64_t vocab[16] = {50000, 2000000, 300, 800000, 20,   100000, 5000, 1000000,
                                12,    40000,   600, 250000, 3000, 90000,  7,    500000};
    for (uint32_t s = 0; s < 16; ++s) {
      SynthSlot slot{vocab[s]};
      if (s % 4 == 1) slot.max_keys = 4;  // slots 1, 5, 9, 13 are multi-hot
      slots_.push_back(slot);
    }
    num_dense_ = 4;
  } else {
    for (uint64_t v : kCriteoVocab) slots_.push_back(SynthSlot{v});
    num_dense_ = 13;
  }
  for (SynthSlot& s : slots_) {
    s.vocab = std::max<uint64_t>(
        1, static_cast<uint64_t>(static_cast<double>(s.vocab) * options_.vocab_scale));
    if (options_.zipf > 1.0) s.zipf = options_.zipf;
  }
  uint64_t base = num_dense_;
  for (const SynthSlot& s : slots_) {
    zipf_.emplace_back(s.vocab, s.zipf);
    index_base_.push_back(base);
    base += s.vocab;
  }
}

Schema SynthGenerator::schema() const {
  switch (options_.format) {
    case DataFormat::kLibsvm:
    case DataFormat::kLibfm:
      return Schema{1, 0};
    case DataFormat::kLibffm:
      return Schema{static_cast<uint32_t>(slots_.size()) + num_dense_, 0};
    default:
      return Schema{static_cast<uint32_t>(slots_.size()), num_dense_};
  }
}

void SynthGenerator::MakeRow(uint64_t index, Row* row) const {
  Random rng(Mix64(options_.seed * 0x9E3779B97F4A7C15ULL + index));
  const uint32_t S = static_cast<uint32_t>(slots_.size());
  row->ids.resize(S);
  double logit = -1.6;              // base rate: about a fifth of the rows are clicks
  double latent[kMaxSlots][kRank];  // per slot, averaged over its ids
  for (uint32_t s = 0; s < S; ++s) {
    auto& ids = row->ids[s];
    ids.clear();
    for (int r = 0; r < kRank; ++r) latent[s][r] = 0;
    const SynthSlot& spec = slots_[s];
    if (rng.Uniform() < spec.missing) continue;
    uint32_t n = spec.max_keys == 1 ? 1 : 1 + static_cast<uint32_t>(rng.Below(spec.max_keys));
    for (uint32_t k = 0; k < n; ++k) {
      uint64_t id = zipf_[s].Sample(&rng);
      if (options_.new_id_share > 0 && rng.Uniform() < options_.new_id_share) {
        id += (options_.period + 1) << 32;  // this period's new ids, above every vocabulary
      }
      ids.push_back(id);
      logit += 0.2 * HashGaussian(IdHash(s, id, 1)) / std::sqrt(static_cast<double>(n));
      for (int r = 0; r < kRank; ++r) latent[s][r] += HashGaussian(IdHash(s, id, 100 + r)) / n;
    }
  }
  for (const auto& pair : kPairs) {
    if (pair[0] >= S || pair[1] >= S) continue;
    double dot = 0;
    for (int r = 0; r < kRank; ++r) dot += latent[pair[0]][r] * latent[pair[1]][r];
    logit += 0.25 * dot;
  }
  row->dense.assign(num_dense_, 0.0f);
  row->dense_missing.assign(num_dense_, false);
  for (uint32_t j = 0; j < num_dense_; ++j) {
    row->dense_missing[j] = rng.Uniform() < 0.2;
    double x = std::floor(std::exp(1.0 + 1.5 * rng.Gaussian()));
    if (!row->dense_missing[j]) row->dense[j] = static_cast<float>(x);
  }
  const uint32_t d1 = std::min(4u, num_dense_ - 1);
  logit += 0.5 * std::tanh(std::log1p(row->dense[0]) - 1.5) -
           0.4 * std::tanh(std::log1p(row->dense[d1]) - 1.0);
  if (options_.ctr_drift != 0) {
    logit +=
        options_.ctr_drift * std::sin(2.0 * M_PI * static_cast<double>(options_.period) / 24.0);
  }
  row->prob = 1.0 / (1.0 + std::exp(-logit));
  row->label = rng.Uniform() < row->prob ? 1.0f : 0.0f;
}

std::string SynthGenerator::CriteoValue(uint32_t slot, uint64_t id) const {
  return fmt::format("{:08x}", IdHash(slot, id, 7) & 0xFFFFFFFFULL);
}

void SynthGenerator::GenerateBatch(uint64_t begin, uint64_t end, Batch* out,
                                   std::vector<double>* probs) const {
  out->Reset(schema());
  AppendRows(begin, end, out, probs);
}

void SynthGenerator::AppendRows(uint64_t begin, uint64_t end, Batch* out,
                                std::vector<double>* probs) const {
  BatchBuilder b(out);
  Row row;
  const uint32_t S = static_cast<uint32_t>(slots_.size());
  if (options_.format == DataFormat::kCriteo && end > begin) {
    // One key per slot: the block's exact size, not the growth's up to twice it (a reader
    // keeps several blocks in flight, and reuses their memory).
    const size_t n = end - begin;
    out->labels.reserve(out->labels.size() + n);
    out->dense.reserve(out->dense.size() + n * num_dense_);
    out->offsets.reserve(out->offsets.size() + n * S + 1);
    out->keys.reserve(out->keys.size() + n * S);
  }
  for (uint64_t i = begin; i < end; ++i) {
    MakeRow(i, &row);
    if (probs) probs->push_back(row.prob);
    b.BeginRow(row.label);
    switch (options_.format) {
      case DataFormat::kCriteo:
        for (uint32_t j = 0; j < num_dense_; ++j) b.SetDense(j, row.dense[j]);
        for (uint32_t s = 0; s < S; ++s) {
          b.AddKey(s,
                   FeatureKey(KeySlotOf(options_.key_slots, s),
                              row.ids[s].empty() ? std::string() : CriteoValue(s, row.ids[s][0])));
        }
        break;
      case DataFormat::kSlots:
        for (uint32_t j = 0; j < num_dense_; ++j) b.SetDense(j, row.dense[j]);
        for (uint32_t s = 0; s < S; ++s) {
          for (uint64_t id : row.ids[s]) {
            b.AddKey(s, FeatureKey(KeySlotOf(options_.key_slots, s), id));
          }
        }
        break;
      case DataFormat::kLibsvm:
      case DataFormat::kLibfm:
      case DataFormat::kLibffm: {
        const bool fm = options_.format == DataFormat::kLibffm;
        for (uint32_t j = 0; j < num_dense_; ++j) {
          if (row.dense_missing[j]) continue;
          uint32_t slot = fm ? S + j : 0;
          b.AddKey(slot, FeatureKey(KeySlotOf(options_.key_slots, slot), uint64_t{j}),
                   std::log1p(row.dense[j]));
        }
        for (uint32_t s = 0; s < S; ++s) {
          for (uint64_t id : row.ids[s]) {
            uint32_t slot = fm ? s : 0;
            b.AddKey(slot,
                     FeatureKey(KeySlotOf(options_.key_slots, slot), fm ? id : index_base_[s] + id),
                     1.0f);
          }
        }
        break;
      }
      case DataFormat::kShards:
        break;
    }
    b.EndRow();
  }
}

void SynthGenerator::GenerateText(uint64_t begin, uint64_t end, std::string* out,
                                  std::vector<double>* probs) const {
  Row row;
  const uint32_t S = static_cast<uint32_t>(slots_.size());
  for (uint64_t i = begin; i < end; ++i) {
    MakeRow(i, &row);
    if (probs) probs->push_back(row.prob);
    out->append(row.label != 0 ? "1" : "0");
    switch (options_.format) {
      case DataFormat::kCriteo:
        for (uint32_t j = 0; j < num_dense_; ++j) {
          out->push_back('\t');
          if (!row.dense_missing[j])
            fmt::format_to(std::back_inserter(*out), "{}", static_cast<int64_t>(row.dense[j]));
        }
        for (uint32_t s = 0; s < S; ++s) {
          out->push_back('\t');
          if (!row.ids[s].empty()) out->append(CriteoValue(s, row.ids[s][0]));
        }
        break;
      case DataFormat::kSlots:
        out->append(" dense:");
        for (uint32_t j = 0; j < num_dense_; ++j) {
          if (j) out->push_back(',');
          fmt::format_to(std::back_inserter(*out), "{}", static_cast<int64_t>(row.dense[j]));
        }
        for (uint32_t s = 0; s < S; ++s) {
          for (uint64_t id : row.ids[s]) fmt::format_to(std::back_inserter(*out), " {}:{}", s, id);
        }
        break;
      case DataFormat::kLibsvm:
      case DataFormat::kLibfm:
      case DataFormat::kLibffm: {
        const bool fm = options_.format == DataFormat::kLibffm;
        for (uint32_t j = 0; j < num_dense_; ++j) {
          if (row.dense_missing[j]) continue;
          std::string v = FormatFloat(std::log1p(row.dense[j]));
          if (fm)
            fmt::format_to(std::back_inserter(*out), " {}:{}:{}", S + j, j, v);
          else
            fmt::format_to(std::back_inserter(*out), " {}:{}", j, v);
        }
        for (uint32_t s = 0; s < S; ++s) {
          for (uint64_t id : row.ids[s]) {
            if (fm)
              fmt::format_to(std::back_inserter(*out), " {}:{}:1", s, id);
            else
              fmt::format_to(std::back_inserter(*out), " {}:1", index_base_[s] + id);
          }
        }
        break;
      }
      case DataFormat::kShards:
        break;
    }
    out->push_back('\n');
  }
}

}  // namespace ctrbox
