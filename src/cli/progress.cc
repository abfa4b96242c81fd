#include "cli/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "util/logging.h"

namespace ctrbox {

ProgressPrinter::ProgressPrinter() : tty_(::isatty(STDERR_FILENO) == 1) {}

std::string FormatDuration(double seconds) {
  const uint64_t s = static_cast<uint64_t>(std::max(0.0, seconds) + 0.5);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
}

std::string ProgressLine(const TrainProgress& p, bool bar) {
  std::string line;
  if (p.fraction >= 0) {
    if (bar) {
      constexpr int kWidth = 24;
      const int full = static_cast<int>(p.fraction * kWidth + 0.5);
      line += "[" + std::string(full, '#') + std::string(kWidth - full, '.') + "] ";
    }
    line += fmt::format("{:5.1f}%  ", 100.0 * p.fraction);
    if (p.eta_seconds >= 0) line += "ETA " + FormatDuration(p.eta_seconds) + "  ";
  }
  line += fmt::format("{} examples  {:.0f} ex/s  auc {}  logloss {:.4f}", p.examples,
                      p.examples_per_s, p.running.AucText(), p.running.logloss);
  return line;
}

void ProgressPrinter::OnProgress(const TrainProgress& p) {
  std::string line = ProgressLine(p, tty_);
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
