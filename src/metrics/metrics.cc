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

void MetricAccumulator::Add(float label, double p) {
  auc_.Add(label, p);
  ++examples_;
  clicks_ += label;
  sum_pred_ += p;
  double q = std::clamp(p, 1e-7, 1.0 - 1e-7);
  sum_loss_ -= label > 0.5f ? std::log(q) : std::log1p(-q);
}

void MetricAccumulator::Merge(const MetricAccumulator& o) {
  auc_.Merge(o.auc_);
  examples_ += o.examples_;
  clicks_ += o.clicks_;
  sum_pred_ += o.sum_pred_;
  sum_loss_ += o.sum_loss_;
}

std::string MetricAccumulator::Encode() const {
  std::string out(reinterpret_cast<const char*>(&examples_), sizeof(examples_));
  for (double v : {clicks_, sum_pred_, sum_loss_}) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  auc_.Encode(&out);
  return out;
}

bool MetricAccumulator::MergeEncoded(std::string_view bytes) {
  uint64_t examples;
  double v[3];
  if (bytes.size() < sizeof(examples) + sizeof(v)) return false;
  std::memcpy(&examples, bytes.data(), sizeof(examples));
  std::memcpy(v, bytes.data() + sizeof(examples), sizeof(v));
  bytes.remove_prefix(sizeof(examples) + sizeof(v));
  if (!auc_.MergeEncoded(bytes)) return false;
  examples_ += examples;
  clicks_ += v[0];
  sum_pred_ += v[1];
  sum_loss_ += v[2];
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
  s.auc = auc_.Auc();
  if (clicks_ == 0) s.auc_undefined = "every label is 0";
  if (clicks_ == n) s.auc_undefined = "every label is 1";
  s.logloss = sum_loss_ / n;
  s.copc = sum_pred_ > 0 ? clicks_ / sum_pred_ : 0;
  s.ctr = clicks_ / n;
  s.mean_prediction = sum_pred_ / n;
  return s;
}

void MetricAccumulator::Reset() {
  auc_.Reset();
  examples_ = 0;
  clicks_ = sum_pred_ = sum_loss_ = 0;
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
