#include "metrics/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "util/json_text.h"

namespace ctrbox {

nlohmann::json MetricSummary::ToJson() const {
  nlohmann::json j{{"examples", examples}, {"auc", AucJson()},
                   {"logloss", logloss},   {"copc", copc},
                   {"ctr", ctr},           {"mean_prediction", mean_prediction}};
  if (auc_undefined) j["auc_undefined"] = auc_undefined;
  return j;
}

std::string MetricSummary::AucText() const {
  if (auc_undefined) return std::string("undefined (") + auc_undefined + ")";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4f", auc);
  return buf;
}

double ExactSum::value() const {
  if (nan_) return std::nan("");
  return std::ldexp(static_cast<double>(v_), -64);
}

void ExactSum::Encode(std::string* out) const {
  const auto u = static_cast<unsigned __int128>(v_);
  const uint64_t words[3] = {static_cast<uint64_t>(u), static_cast<uint64_t>(u >> 64),
                             nan_ ? 1u : 0u};
  out->append(reinterpret_cast<const char*>(words), sizeof(words));
}

bool ExactSum::Decode(std::string_view* bytes) {
  uint64_t words[3];
  if (bytes->size() < sizeof(words)) return false;
  std::memcpy(words, bytes->data(), sizeof(words));
  if (words[2] > 1) return false;
  bytes->remove_prefix(sizeof(words));
  v_ = static_cast<__int128>((static_cast<unsigned __int128>(words[1]) << 64) | words[0]);
  nan_ = words[2] != 0;
  return true;
}

void MetricAccumulator::Add(float label, double p) {
  auc_.Add(label, p);
  ++examples_;
  clicks_.Add(label);
  sum_pred_.Add(p);
  double q = std::clamp(p, 1e-7, 1.0 - 1e-7);
  sum_loss_.Add(label > 0.5f ? -std::log(q) : -std::log1p(-q));
}

void MetricAccumulator::Merge(const MetricAccumulator& o) {
  auc_.Merge(o.auc_);
  examples_ += o.examples_;
  clicks_.Merge(o.clicks_);
  sum_pred_.Merge(o.sum_pred_);
  sum_loss_.Merge(o.sum_loss_);
}

std::string MetricAccumulator::Encode() const {
  std::string out(reinterpret_cast<const char*>(&examples_), sizeof(examples_));
  for (const ExactSum* v : {&clicks_, &sum_pred_, &sum_loss_}) v->Encode(&out);
  auc_.Encode(&out);
  return out;
}

bool MetricAccumulator::MergeEncoded(std::string_view bytes) {
  uint64_t examples;
  ExactSum v[3];
  if (bytes.size() < sizeof(examples)) return false;
  std::memcpy(&examples, bytes.data(), sizeof(examples));
  bytes.remove_prefix(sizeof(examples));
  for (ExactSum& x : v) {
    if (!x.Decode(&bytes)) return false;
  }
  if (!auc_.MergeEncoded(bytes)) return false;
  examples_ += examples;
  clicks_.Merge(v[0]);
  sum_pred_.Merge(v[1]);
  sum_loss_.Merge(v[2]);
  return true;
}

MetricSummary MetricAccumulator::Summary() const {
  MetricSummary s;
  s.examples = examples_;
  if (examples_ == 0) {
    s.auc_undefined = "no examples";
    return s;
  }
  const double n = static_cast<double>(examples_);
  const double clicks = clicks_.value(), sum_pred = sum_pred_.value();
  s.auc = auc_.Auc();
  if (clicks == 0) s.auc_undefined = "every label is 0";
  if (clicks == n) s.auc_undefined = "every label is 1";
  s.logloss = sum_loss_.value() / n;
  s.copc = sum_pred > 0 ? clicks / sum_pred : 0;
  s.ctr = clicks / n;
  s.mean_prediction = sum_pred / n;
  return s;
}

void MetricAccumulator::Reset() {
  auc_.Reset();
  examples_ = 0;
  clicks_ = sum_pred_ = sum_loss_ = ExactSum();
}

StatusOr<std::unique_ptr<MetricsLog>> MetricsLog::Open(Env* env, const std::string& path) {
  return std::unique_ptr<MetricsLog>(new MetricsLog(env, path));
}

Status MetricsLog::Write(const nlohmann::json& record) {
  if (path_.empty()) return Status::OK();
  if (!file_) {
    RETURN_IF_ERROR(env_->CreateDirs(DirName(path_)));
    ASSIGN_OR_RETURN(file_, env_->NewAppendableFile(path_));
  }
  RETURN_IF_ERROR(file_->Append(JsonText(record) + "\n"));
  return file_->Flush();
}

Status MetricsLog::Close() {
  if (!file_) return Status::OK();
  return file_->Close();
}

}  // namespace ctrbox
