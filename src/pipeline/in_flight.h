// InFlight: the registry of the passes pulled and not yet pushed, with their working tables,
// and the shrink barrier (docs/pipeline.md, "Correctness across overlapping passes").
//
// A pull takes a Snapshot of the tables in flight before it reads the sparse table, and
// patches the keys it shares with them before training; pushes happen in pass order and move
// the `pushed` counter; a pull after a shrink waits (WaitPushed) until every earlier pass is
// pushed. A discarded pass (Ctrl-C, a failure) cancels the barrier: no later pass is pushed,
// so a pull waiting at it would wait forever.
//
// Thread safety: every method may be called concurrently.
#ifndef CTRBOX_PIPELINE_IN_FLIGHT_H_
#define CTRBOX_PIPELINE_IN_FLIGHT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "util/mutex.h"
#include "working/working_table.h"

namespace ctrbox {

class InFlight {
 public:
  // `pushed`: the passes pushed before this run (a resumed job's).
  explicit InFlight(uint64_t pushed) : pushed_(pushed) {}
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

  using Tables = std::vector<std::pair<uint64_t, std::shared_ptr<const WorkingTable>>>;
  // The working tables of the passes in flight now, by ascending pass.
  Tables Snapshot() const EXCLUDES(mu_);
  // Registers pass `pass` as in flight with its table.
  void Add(uint64_t pass, std::shared_ptr<const WorkingTable> table) EXCLUDES(mu_);
  // Pass `pass` was pushed (and shrunk after, if due) when `pushed`, else discarded, which
  // cancels the barrier.
  void Remove(uint64_t pass, bool pushed) EXCLUDES(mu_);
  // The shrink barrier: waits until every pass before `pass` is pushed. Returns false if the
  // barrier was cancelled (before or while waiting).
  bool WaitPushed(uint64_t pass) EXCLUDES(mu_);
  // Cancels the barrier: every waiter returns false, and every later WaitPushed too.
  void Cancel() EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  CondVar cv_{&mu_};
  std::map<uint64_t, std::shared_ptr<const WorkingTable>> tables_ GUARDED_BY(mu_);
  uint64_t pushed_ GUARDED_BY(mu_);  // passes [0, pushed_) are wholly in the sparse table
  bool cancelled_ GUARDED_BY(mu_) = false;
};

}  // namespace ctrbox

#endif  // CTRBOX_PIPELINE_IN_FLIGHT_H_
