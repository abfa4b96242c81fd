// Progress display for train: one updating status line on a terminal, plain log lines
// otherwise (standard error; standard output stays for the JSON result).
#ifndef CTRBOX_CLI_PROGRESS_H_
#define CTRBOX_CLI_PROGRESS_H_

#include "pipeline/trainer.h"

namespace ctrbox {

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
