#include "dist/key_routes.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "dist/collectives.h"
#include "util/pairwise_sum.h"

namespace ctrbox {
namespace {

template <typename T>
void Append(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <typename T>
T Read(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Counts what this rank sent to and received from other ranks.
void Count(const Comm& comm, const std::vector<std::string>& send,
           const std::vector<std::string>& recv, KeyRoutes* routes) {
  for (int r = 0; r < comm.size(); ++r) {
    if (r == comm.rank()) continue;
    routes->bytes_sent += send[r].size();
    routes->bytes_received += recv[r].size();
  }
}

Status Malformed(const char* what, int from) {
  return InternalError(std::string(what) + ": rank " + std::to_string(from) +
                       " sent a message of the wrong size");
}

// The records of touched[0..m) to their owners: (position, record) entries, or with
// routes->pairwise (position, leaf, record) for each of a key's records not all zeros;
// count[o]: the entries to owner o.
void AppendRecords(const KeyRoutes& routes, const uint32_t* touched, const float* records, size_t m,
                   uint32_t width, std::vector<std::string>* send, std::vector<uint32_t>* count) {
  const size_t rec_bytes = size_t{width} * sizeof(float);
  const size_t per_key = routes.pairwise ? std::max<size_t>(routes.leaves.size(), 1) : 1;
  for (size_t t = 0; t < m; ++t) {
    const KeyRoutes::Where w = routes.where[touched[t]];
    for (size_t i = 0; i < per_key; ++i) {
      const float* rec = records + (t * per_key + i) * width;
      if (routes.pairwise) {
        if (std::all_of(rec, rec + width,
                        [](float x) { return std::bit_cast<uint32_t>(x) == 0; })) {
          continue;  // the key has no rows in this node
        }
        Append(&(*send)[w.owner], w.pos);
        Append(&(*send)[w.owner], routes.leaves.empty() ? 0u : routes.leaves[i]);
      } else {
        Append(&(*send)[w.owner], w.pos);
      }
      (*send)[w.owner].append(reinterpret_cast<const char*>(rec), rec_bytes);
      if (count != nullptr) ++(*count)[w.owner];
    }
  }
}

// The bytes of one entry AppendRecords wrote.
size_t EntryBytes(const KeyRoutes& routes, uint32_t width) {
  return sizeof(uint32_t) * (routes.pairwise ? 2 : 1) + size_t{width} * sizeof(float);
}

// Adds requester r's `count` entries (AppendRecords) at p to the owner's sums in out->served /
// served_records (a key's first record starts its sum).
Status SumAtOwner(const char* p, size_t count, int r, uint32_t width, KeyRoutes* routes,
                  ReducedRecords* out) {
  const size_t rec_bytes = size_t{width} * sizeof(float);
  for (size_t e = 0; e < count; ++e, p += EntryBytes(*routes, width)) {
    const auto pos = Read<uint32_t>(p);
    if (pos >= routes->asked[r].size()) return Malformed("gradients", r);
    const uint32_t s = routes->asked[r][pos];
    int32_t& slot = routes->slot_of[s];
    if (routes->pairwise) {  // summed once every rank's are in (SumPending)
      if (slot < 0) {
        slot = static_cast<int32_t>(out->served.size());
        out->served.push_back(s);
      }
      const auto leaf = Read<uint32_t>(p + sizeof(uint32_t));
      routes->pending.push_back({static_cast<uint32_t>(slot), leaf, p + 2 * sizeof(uint32_t)});
      continue;
    }
    const char* rec = p + sizeof(uint32_t);
    if (slot < 0) {
      slot = static_cast<int32_t>(out->served.size());
      out->served.push_back(s);
      out->served_records.resize(out->served_records.size() + width);
      std::memcpy(out->served_records.data() + size_t(slot) * width, rec, rec_bytes);
      continue;
    }
    float* acc = out->served_records.data() + size_t(slot) * width;
    for (uint32_t d = 0; d < width; ++d) acc[d] += Read<float>(rec + d * sizeof(float));
  }
  return Status::OK();
}

// With routes->pairwise: each served key's records (routes->pending, in rank order and so in
// leaf order) summed up the pairwise tree into out->served_records.
Status SumPending(uint32_t width, KeyRoutes* routes, ReducedRecords* out) {
  if (!routes->pairwise) return Status::OK();
  const size_t keys = out->served.size(), rec_bytes = size_t{width} * sizeof(float);
  out->served_records.assign(keys * width, 0.0f);
  // The pending records grouped by key, each key's in rank order (a stable counting sort).
  std::vector<uint32_t> begin(keys + 1, 0);
  for (const KeyRoutes::Pending& e : routes->pending) ++begin[e.slot + 1];
  for (size_t k = 0; k < keys; ++k) begin[k + 1] += begin[k];
  std::vector<uint32_t> at(begin.begin(), begin.end() - 1);
  std::vector<const KeyRoutes::Pending*> by_key(routes->pending.size());
  for (const KeyRoutes::Pending& e : routes->pending) by_key[at[e.slot]++] = &e;
  std::vector<float> slots;
  auto slot = [&](int i) { return slots.data() + size_t(i) * width; };
  auto merge = [&](int into, int from) {
    float* a = slot(into);
    const float* b = slot(from);
    for (uint32_t d = 0; d < width; ++d) a[d] += b[d];
  };
  for (size_t k = 0; k < keys; ++k) {
    PairwiseStack stack;
    int64_t last = -1;
    for (uint32_t i = begin[k]; i < begin[k + 1]; ++i) {
      if (int64_t{by_key[i]->leaf} <= last) {
        return InternalError("gradients: leaf " + std::to_string(by_key[i]->leaf) + " after leaf " +
                             std::to_string(last) + " (the ranks' sum nodes are out of order)");
      }
      last = by_key[i]->leaf;
      const int s = stack.Push(by_key[i]->leaf, merge);
      if (slots.size() < size_t(s + 1) * width) slots.resize(size_t(s + 1) * width);
      std::memcpy(slot(s), by_key[i]->record, rec_bytes);
    }
    stack.Finish(merge);
    std::memcpy(out->served_records.data() + k * width, slot(0), rec_bytes);
  }
  routes->pending.clear();
  return Status::OK();
}

// The requester's side of an owner's (position, record) messages: each record decoded into the
// key at that position of what this rank sent the owner; `what` names them in errors.
Status DecodePositioned(const std::vector<std::string>& recv, const KeyRoutes& routes,
                        const std::function<size_t(uint32_t key, const char* p, size_t n)>& decode,
                        const char* what) {
  for (int o = 0; o < static_cast<int>(recv.size()); ++o) {
    const char* p = recv[o].data();
    size_t left = recv[o].size();
    while (left > 0) {
      if (left < sizeof(uint32_t)) return Malformed(what, o);
      const auto pos = Read<uint32_t>(p);
      if (pos >= routes.sent[o].size()) return Malformed(what, o);
      const size_t used =
          decode(routes.sent[o][pos], p + sizeof(uint32_t), left - sizeof(uint32_t));
      if (used == 0) return Malformed(what, o);
      p += sizeof(uint32_t) + used;
      left -= sizeof(uint32_t) + used;
    }
  }
  return Status::OK();
}

}  // namespace

StatusOr<KeyRoutes> RouteKeys(Comm* comm, const uint64_t* keys, size_t n, const KeyOrder& before) {
  const KeyOrder less = before ? before : KeyOrder([](uint64_t a, uint64_t b) { return a < b; });
  const int N = comm->size();
  KeyRoutes routes;
  routes.ranks = N;
  routes.sent.resize(N);
  routes.where.resize(n);
  std::vector<std::string> send(N), recv;
  for (size_t i = 0; i < n; ++i) {
    const int o = OwnerOf(keys[i], N);
    routes.where[i] = {static_cast<uint32_t>(o), static_cast<uint32_t>(routes.sent[o].size())};
    routes.sent[o].push_back(static_cast<uint32_t>(i));
    Append(&send[o], keys[i]);
  }
  RETURN_IF_ERROR(comm->AllToAll(send, &recv));
  Count(*comm, send, recv, &routes);
  for (int r = 0; r < N; ++r) {
    if (recv[r].size() % sizeof(uint64_t) != 0) return Malformed("route keys", r);
    for (size_t p = 0; p < recv[r].size(); p += sizeof(uint64_t)) {
      routes.served.push_back(Read<uint64_t>(recv[r].data() + p));
    }
  }
  std::sort(routes.served.begin(), routes.served.end(), less);
  routes.served.erase(std::unique(routes.served.begin(), routes.served.end()), routes.served.end());
  // asked[r] and the holders of each served key (requesters in rank order).
  routes.asked.resize(N);
  std::vector<uint32_t> count(routes.served.size() + 1, 0);
  for (int r = 0; r < N; ++r) {
    const size_t m = recv[r].size() / sizeof(uint64_t);
    routes.asked[r].resize(m);
    for (size_t j = 0; j < m; ++j) {
      const uint64_t key = Read<uint64_t>(recv[r].data() + j * sizeof(uint64_t));
      const auto s = static_cast<uint32_t>(
          std::lower_bound(routes.served.begin(), routes.served.end(), key, less) -
          routes.served.begin());
      routes.asked[r][j] = s;
      ++count[s + 1];
    }
  }
  for (size_t s = 0; s < routes.served.size(); ++s) count[s + 1] += count[s];
  routes.holder_begin = count;
  routes.holders.resize(count.back());
  for (int r = 0; r < N; ++r) {
    for (size_t j = 0; j < routes.asked[r].size(); ++j) {
      const uint32_t s = routes.asked[r][j];
      routes.holders[count[s]++] = {static_cast<uint32_t>(r), static_cast<uint32_t>(j)};
    }
  }
  routes.slot_of.assign(routes.served.size(), -1);
  routes.changed_at.assign(routes.served.size(), 0);
  routes.synced.resize(N);
  for (int r = 0; r < N; ++r) routes.synced[r].assign(routes.asked[r].size(), 0);
  return routes;
}

Status SendToHolders(Comm* comm, KeyRoutes* routes,
                     const std::function<void(uint32_t served, std::string* out)>& encode,
                     const std::function<size_t(uint32_t key, const char* p, size_t n)>& decode) {
  const int N = comm->size();
  std::vector<std::string> send(N), recv;
  for (int r = 0; r < N; ++r) {
    for (uint32_t s : routes->asked[r]) encode(s, &send[r]);
  }
  RETURN_IF_ERROR(comm->AllToAll(send, &recv));
  Count(*comm, send, recv, routes);
  for (int o = 0; o < N; ++o) {
    const char* p = recv[o].data();
    size_t left = recv[o].size();
    for (uint32_t i : routes->sent[o]) {
      const size_t used = decode(i, p, left);
      if (used == 0) return Malformed("rows of the pass", o);
      p += used;
      left -= used;
    }
    if (left != 0) return Malformed("rows of the pass", o);
  }
  return Status::OK();
}

Status SendSomeToHolders(
    Comm* comm, KeyRoutes* routes, const std::vector<uint32_t>& subset,
    const std::function<void(uint32_t served, std::string* out)>& encode,
    const std::function<size_t(uint32_t key, const char* p, size_t n)>& decode) {
  const int N = comm->size();
  std::vector<std::string> send(N), recv;
  std::string record;
  for (uint32_t s : subset) {
    record.clear();
    encode(s, &record);
    for (uint32_t h = routes->holder_begin[s]; h < routes->holder_begin[s + 1]; ++h) {
      const KeyRoutes::Where holder = routes->holders[h];
      Append(&send[holder.owner], holder.pos);
      send[holder.owner] += record;
    }
  }
  RETURN_IF_ERROR(comm->AllToAll(send, &recv));
  Count(*comm, send, recv, routes);
  return DecodePositioned(recv, *routes, decode, "rows of the pass");
}

Status ReduceToHolders(Comm* comm, KeyRoutes* routes, const uint32_t* touched, const float* records,
                       size_t m, uint32_t width, ReducedRecords* out) {
  const int N = comm->size();
  const size_t rec_bytes = size_t{width} * sizeof(float), entry = sizeof(uint32_t) + rec_bytes;
  std::vector<std::string> send(N), recv;
  AppendRecords(*routes, touched, records, m, width, &send, nullptr);
  RETURN_IF_ERROR(comm->AllToAll(send, &recv));
  Count(*comm, send, recv, routes);

  // The owner: each key's records summed in rank order (or up the tree).
  out->served.clear();
  out->served_records.clear();
  routes->pending.clear();
  const size_t sent_entry = EntryBytes(*routes, width);
  for (int r = 0; r < N; ++r) {
    if (recv[r].size() % sent_entry != 0) return Malformed("gradients", r);
    RETURN_IF_ERROR(SumAtOwner(recv[r].data(), recv[r].size() / sent_entry, r, width, routes, out));
  }
  RETURN_IF_ERROR(SumPending(width, routes, out));
  // The sums to every holder.
  std::vector<std::string> back(N);
  for (size_t i = 0; i < out->served.size(); ++i) {
    const uint32_t s = out->served[i];
    routes->slot_of[s] = -1;
    const char* sum = reinterpret_cast<const char*>(out->served_records.data() + i * width);
    for (uint32_t h = routes->holder_begin[s]; h < routes->holder_begin[s + 1]; ++h) {
      const KeyRoutes::Where holder = routes->holders[h];
      Append(&back[holder.owner], holder.pos);
      back[holder.owner].append(sum, rec_bytes);
    }
  }
  RETURN_IF_ERROR(comm->AllToAll(back, &recv));
  Count(*comm, back, recv, routes);
  out->keys.clear();
  out->records.clear();
  for (int o = 0; o < N; ++o) {
    if (recv[o].size() % entry != 0) return Malformed("summed gradients", o);
    for (size_t p = 0; p < recv[o].size(); p += entry) {
      const auto pos = Read<uint32_t>(recv[o].data() + p);
      if (pos >= routes->sent[o].size()) return Malformed("summed gradients", o);
      out->keys.push_back(routes->sent[o][pos]);
      const size_t at = out->records.size();
      out->records.resize(at + width);
      std::memcpy(out->records.data() + at, recv[o].data() + p + sizeof(uint32_t), rec_bytes);
    }
  }
  return Status::OK();
}

Status ReduceToOwners(Comm* comm, KeyRoutes* routes, const uint32_t* touched, const float* records,
                      size_t m, uint32_t width, const uint32_t* next, size_t n_next,
                      ReducedRecords* out) {
  const int N = comm->size();
  const size_t entry = EntryBytes(*routes, width);
  // To each owner: [entry count][entries (AppendRecords) ...][position of a next key ...].
  std::vector<std::string> send(N), recv;
  std::vector<uint32_t> count(N, 0);
  for (int o = 0; o < N; ++o) Append(&send[o], count[o]);  // (filled in below)
  AppendRecords(*routes, touched, records, m, width, &send, &count);
  for (int o = 0; o < N; ++o) std::memcpy(send[o].data(), &count[o], sizeof(uint32_t));
  for (size_t t = 0; t < n_next; ++t) {
    const KeyRoutes::Where w = routes->where[next[t]];
    Append(&send[w.owner], w.pos);
  }
  RETURN_IF_ERROR(comm->AllToAll(send, &recv));
  Count(*comm, send, recv, routes);

  ++routes->version;
  out->keys.clear();
  out->records.clear();
  out->served.clear();
  out->served_records.clear();
  out->next.resize(N);
  routes->pending.clear();
  for (int r = 0; r < N; ++r) {
    const char* p = recv[r].data();
    const size_t size = recv[r].size();
    if (size < sizeof(uint32_t)) return Malformed("gradients", r);
    const auto touched_count = Read<uint32_t>(p);
    const size_t sums = touched_count * entry;
    if (size < sizeof(uint32_t) + sums ||
        (size - sizeof(uint32_t) - sums) % sizeof(uint32_t) != 0) {
      return Malformed("gradients", r);
    }
    RETURN_IF_ERROR(SumAtOwner(p + sizeof(uint32_t), touched_count, r, width, routes, out));
    out->next[r].clear();
    for (size_t at = sizeof(uint32_t) + sums; at < size; at += sizeof(uint32_t)) {
      const auto pos = Read<uint32_t>(p + at);
      if (pos >= routes->asked[r].size()) return Malformed("gradients", r);
      out->next[r].push_back(pos);
    }
  }
  RETURN_IF_ERROR(SumPending(width, routes, out));
  for (uint32_t s : out->served) {
    routes->slot_of[s] = -1;
    routes->changed_at[s] = routes->version;
  }
  return Status::OK();
}

Status RefreshHolders(Comm* comm, KeyRoutes* routes, const std::vector<std::vector<uint32_t>>& next,
                      const std::function<void(uint32_t served, std::string* out)>& encode,
                      const std::function<size_t(uint32_t key, const char* p, size_t n)>& decode) {
  const int N = comm->size();
  std::vector<std::string> send(N), recv;
  for (int r = 0; r < N && r < static_cast<int>(next.size()); ++r) {
    for (uint32_t pos : next[r]) {
      const uint32_t s = routes->asked[r][pos];
      uint32_t& have = routes->synced[r][pos];
      if (routes->changed_at[s] <= have) continue;  // r holds the current row
      have = routes->version;
      Append(&send[r], pos);
      encode(s, &send[r]);
    }
  }
  RETURN_IF_ERROR(comm->AllToAll(send, &recv));
  Count(*comm, send, recv, routes);
  return DecodePositioned(recv, *routes, decode, "refreshed rows");
}

}  // namespace ctrbox
