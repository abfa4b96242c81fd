#include "dist/collectives.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "util/pairwise_sum.h"

namespace ctrbox {
namespace {

// Chunk c of n elements split over N ranks: [n c / N, n (c + 1) / N).
size_t ChunkBegin(size_t n, int c, int N) { return n * static_cast<size_t>(c) / N; }

template <typename T, typename Combine>
Status AllReduceChunks(Comm* comm, T* data, size_t n, Combine combine) {
  const int N = comm->size(), me = comm->rank();
  if (N == 1 || n == 0) return Status::OK();  // every rank passes the same n
  std::vector<std::string> send(N), recv;
  for (int c = 0; c < N; ++c) {
    const size_t b = ChunkBegin(n, c, N), e = ChunkBegin(n, c + 1, N);
    send[c].assign(reinterpret_cast<const char*>(data + b), (e - b) * sizeof(T));
  }
  RETURN_IF_ERROR(comm->AllToAll(send, &recv));
  const size_t b = ChunkBegin(n, me, N), e = ChunkBegin(n, me + 1, N);
  std::vector<T> mine(e - b);
  std::vector<const T*> parts(N);
  for (int from = 0; from < N; ++from) {
    if (recv[from].size() != mine.size() * sizeof(T)) {
      return InternalError("all-reduce: rank " + std::to_string(from) + " sent " +
                           std::to_string(recv[from].size()) + " bytes for a chunk of " +
                           std::to_string(mine.size() * sizeof(T)));
    }
    parts[from] = reinterpret_cast<const T*>(recv[from].data());
  }
  combine(&mine, parts);
  std::vector<std::string> all;
  RETURN_IF_ERROR(comm->AllGather(
      std::string_view(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(T)), &all));
  for (int c = 0; c < N; ++c) {
    const size_t cb = ChunkBegin(n, c, N), ce = ChunkBegin(n, c + 1, N);
    if (all[c].size() != (ce - cb) * sizeof(T)) return InternalError("all-reduce: short chunk");
    if (!all[c].empty()) std::memcpy(data + cb, all[c].data(), all[c].size());
  }
  return Status::OK();
}

// combine(mine, parts): this rank's chunk from every rank's part of it (parts[r], r in rank
// order), written into mine.
template <typename T, typename Op>
Status AllReduce(Comm* comm, T* data, size_t n, Op op) {
  return AllReduceChunks<T>(comm, data, n,
                            [&](std::vector<T>* mine, const std::vector<const T*>& parts) {
                              for (size_t from = 0; from < parts.size(); ++from) {
                                const T* x = parts[from];
                                if (from == 0) {
                                  std::copy(x, x + mine->size(), mine->begin());
                                } else {
                                  for (size_t i = 0; i < mine->size(); ++i)
                                    (*mine)[i] = op((*mine)[i], x[i]);
                                }
                              }
                            });
}
}  // namespace

Status AllReduceSum(Comm* comm, float* data, size_t n) {
  return AllReduce(comm, data, n, [](float a, float b) { return a + b; });
}
Status AllReduceSum(Comm* comm, double* data, size_t n) {
  return AllReduce(comm, data, n, [](double a, double b) { return a + b; });
}
Status AllReduceSum(Comm* comm, uint64_t* data, size_t n) {
  return AllReduce(comm, data, n, [](uint64_t a, uint64_t b) { return a + b; });
}
Status AllReduceSumPairwise(Comm* comm, float* data, size_t n,
                            const std::vector<uint8_t>& present) {
  return AllReduceChunks<float>(
      comm, data, n, [&](std::vector<float>* mine, const std::vector<const float*>& parts) {
        const size_t m = mine->size();
        std::vector<std::vector<float>> slots;
        PairwiseStack stack;
        auto merge = [&](int into, int from) {
          for (size_t i = 0; i < m; ++i) slots[into][i] += slots[from][i];
        };
        for (size_t r = 0; r < parts.size(); ++r) {
          if (!present.empty() && present[r] == 0) continue;
          const int s = stack.Push(r, merge);
          if (slots.size() <= static_cast<size_t>(s)) slots.resize(s + 1);
          slots[s].assign(parts[r], parts[r] + m);
        }
        stack.Finish(merge);
        if (stack.empty()) {
          std::fill(mine->begin(), mine->end(), 0.0f);
        } else {
          *mine = std::move(slots[0]);
        }
      });
}
Status AllReduceMax(Comm* comm, uint64_t* data, size_t n) {
  return AllReduce(comm, data, n, [](uint64_t a, uint64_t b) { return std::max(a, b); });
}

}  // namespace ctrbox
