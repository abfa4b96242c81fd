// Runs a function on each rank of a LocalGroup, one thread per rank (dist tests).
#ifndef CTRBOX_DIST_DIST_TEST_UTIL_H_
#define CTRBOX_DIST_DIST_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "dist/comm.h"
#include "util/pairwise_sum.h"

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

// Canonical sums' references (CtrModel::SumOrder). A vector summed element-wise up the
// pairwise tree over (leaf, value) pairs given in increasing leaf order; empty: no pair.
using LeafValue = std::pair<uint32_t, std::vector<float>>;
inline std::vector<float> TreeSum(const std::vector<LeafValue>& in) {
  if (in.empty()) return {};
  std::vector<std::vector<float>> slots(PairwiseStack::kMaxSlots);
  PairwiseStack stack;
  auto merge = [&](int a, int b) {
    for (size_t i = 0; i < slots[a].size(); ++i) slots[a][i] += slots[b][i];
  };
  for (const LeafValue& lv : in) slots[stack.Push(lv.first, merge)] = lv.second;
  stack.Finish(merge);
  return slots[0];
}

// A share of leaves [b0, b1) of `leaves` (nullopt: an empty leaf) as a rank gives it: the
// largest dyadic nodes it is made of, each summed up the tree over its leaves, named by its
// first leaf; a node of empty leaves left out.
// The largest dyadic nodes [first, first + size) that leaves [b0, b1) are made of, in order.
inline std::vector<std::pair<uint32_t, uint32_t>> DyadicNodes(uint32_t b0, uint32_t b1) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (uint32_t b = b0; b < b1;) {
    uint32_t size = 1;
    while (b % (2 * size) == 0 && b + 2 * size <= b1) size *= 2;
    out.push_back({b, size});
    b += size;
  }
  return out;
}
inline std::vector<LeafValue> NodeSums(const std::vector<std::optional<std::vector<float>>>& leaves,
                                       uint32_t b0, uint32_t b1) {
  std::vector<LeafValue> out;
  for (auto [first, size] : DyadicNodes(b0, b1)) {
    std::vector<LeafValue> in;
    for (uint32_t l = first; l < first + size; ++l) {
      if (leaves[l]) in.push_back({l, *leaves[l]});
    }
    if (!in.empty()) out.push_back({first, TreeSum(in)});
  }
  return out;
}

}  // namespace ctrbox

#endif  // CTRBOX_DIST_DIST_TEST_UTIL_H_
