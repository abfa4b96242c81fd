#include "cli/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "util/logging.h"

namespace ctrbox {

ProgressPrinter::ProgressPrinter() : tty_(::isatty(STDERR_FILENO) == 1) {}

void ProgressPrinter::OnProgress(const TrainProgress& p) {
  std::string line =
      fmt::format("{:>12} examples  {:>9.0f} ex/s  auc {}  logloss {:.4f}", p.examples,
                  p.examples_per_s, p.running.AucText(), p.running.logloss);
  if (tty_) {
    std::fprintf(stderr, "\r%s\033[K", line.c_str());
    std::fflush(stderr);
    line_open_ = true;
  } else {
    LOG_INFO("{}", line);
  }
}

void ProgressPrinter::OnPass(const nlohmann::json& r) {
  if (line_open_) {
    std::fprintf(stderr, "\r\033[K");
    line_open_ = false;
  }
  const std::string auc = r["auc"].is_number()
                              ? fmt::format("{:.4f}", r["auc"].get<double>())
                              : "undefined (" + r.value("auc_undefined", std::string()) + ")";
  LOG_INFO("pass {}: {} examples, auc {}, logloss {:.4f}, copc {:.3f}, {:.0f} ex/s, {} keys",
           r["pass"].get<uint64_t>(), r["examples"].get<uint64_t>(), auc,
           r["logloss"].get<double>(), r["copc"].get<double>(), r["examples_per_s"].get<double>(),
           r["table_keys"].get<uint64_t>());
}

void ProgressPrinter::OnDone() {
  if (line_open_) std::fprintf(stderr, "\r\033[K");
  line_open_ = false;
}

}  // namespace ctrbox
