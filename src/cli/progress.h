// Progress display for train: one updating status line on a terminal, plain log lines
// otherwise (standard error; standard output stays for the JSON result).
#ifndef CTRBOX_CLI_PROGRESS_H_
#define CTRBOX_CLI_PROGRESS_H_

#include <string>

#include "jobs/trainer.h"

namespace ctrbox {

// The progress line: with a known input size, a bar (on a terminal), the share done and the
// time left ("ETA 3m05s"), then examples, rate and the running metrics.
std::string ProgressLine(const TrainProgress& p, bool bar);
// "45s", "3m05s", "2h07m".
std::string FormatDuration(double seconds);

class ProgressPrinter : public ProgressSink {
 public:
  ProgressPrinter();
  void OnProgress(const TrainProgress& p) override;
  void OnPass(const nlohmann::json& record) override;
  void OnDone() override;

 private:
  bool tty_;
  bool line_open_ = false;
};

}  // namespace ctrbox

#endif  // CTRBOX_CLI_PROGRESS_H_
