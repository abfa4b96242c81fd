// Runs a function on each rank of a LocalGroup, one thread per rank (dist tests).
#ifndef CTRBOX_DIST_DIST_TEST_UTIL_H_
#define CTRBOX_DIST_DIST_TEST_UTIL_H_

#include <functional>
#include <thread>
#include <vector>

#include "dist/comm.h"

namespace ctrbox {

// Calls fn(comm) on n ranks at once and waits for all; a rank whose fn returns an error aborts
// the group (so the others do not wait for it). Returns each rank's status.
inline std::vector<Status> RunRanks(int n, const std::function<Status(Comm*)>& fn) {
  LocalGroup group(n);
  std::vector<Status> status(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      status[r] = fn(group.rank(r));
      if (!status[r].ok()) group.rank(r)->Abort(status[r]);
    });
  }
  for (auto& t : threads) t.join();
  return status;
}

}  // namespace ctrbox

#endif  // CTRBOX_DIST_DIST_TEST_UTIL_H_
