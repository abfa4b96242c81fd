#include "working/working_set.h"

#include <algorithm>
#include <bit>
#include <cassert>

namespace ctrbox {
namespace {

// Key occurrences per piece at most: a piece's table stays in a core's cache.
constexpr size_t kPieceUses = size_t{1} << 16;

using Piece = WorkingSetScratch::Piece;
using Ids = WorkingSetScratch::Ids;

// Numbers the distinct keys of occurrences [piece->begin, piece->end) in first-occurrence
// order (piece->keys, with their key ranges) and writes each occurrence's number to
// in_piece; counts the distinct keys per key range into counts[0, kKeyRanges).
void DedupPiece(const uint64_t* keys, Ids* table, Piece* piece, uint32_t* in_piece,
                uint32_t* counts) {
  table->Reset(false);
  for (uint32_t p = piece->begin; p < piece->end; ++p) in_piece[p] = table->IdOf(keys[p]);
  table->SwapKeys(&piece->keys);
  piece->part.resize(piece->keys.size());
  for (size_t d = 0; d < piece->keys.size(); ++d) {
    const size_t q = KeyRangeOf(piece->keys[d]);
    piece->part[d] = static_cast<uint8_t>(q);
    ++counts[q];
  }
}

// Minibatch b, whose occurrences are in pieces [j0, j1): its cells, its distinct local ids in
// first-occurrence order and each one's occurrence list. seen: the calling thread's marks over
// local ids, (b + 1) << 32 | uniq place where met in this minibatch (several pieces only).
void BuildMinibatch(const Batch& pass, size_t b, std::vector<Piece>& pieces, size_t j0, size_t j1,
                    const uint32_t* in_piece, std::vector<uint64_t>* seen, WorkingSet* out) {
  const uint32_t S = pass.schema.num_slots;
  Minibatch& mb = out->batches[b];
  uint32_t* cell = out->cell.data();
  const uint32_t* offsets = pass.offsets.data();
  for (uint32_t r = mb.row_begin; r < mb.row_end; ++r) {
    for (uint32_t s = 0; s < S; ++s) {
      const uint32_t c = (r - mb.row_begin) * S + s;
      for (uint32_t p = offsets[size_t{r} * S + s]; p < offsets[size_t{r} * S + s + 1]; ++p) {
        cell[p] = c;
      }
    }
  }
  // The minibatch's uniq place of each piece's distinct keys: the pieces' own numbers when
  // it is one piece; else the pieces' lists merged in order.
  const bool one = j1 - j0 == 1;
  mb.uniq.clear();
  if (one) {
    mb.uniq.assign(pieces[j0].id.begin(), pieces[j0].id.end());
  } else if (j1 > j0) {
    if (seen->size() < out->keys.size()) seen->assign(out->keys.size(), 0);
    uint64_t* mark = seen->data();
    const uint64_t tag = uint64_t{b + 1} << 32;
    for (size_t j = j0; j < j1; ++j) {
      Piece& piece = pieces[j];
      piece.uniq.resize(piece.id.size());
      for (size_t d = 0; d < piece.id.size(); ++d) {
        const uint32_t l = piece.id[d];
        if ((mark[l] & ~uint64_t{0xFFFFFFFF}) != tag) {
          mark[l] = tag | mb.uniq.size();
          mb.uniq.push_back(l);
        }
        piece.uniq[d] = static_cast<uint32_t>(mark[l]);
      }
    }
  }
  // Occurrence lists: counted, then filled in occurrence order.
  mb.occ_begin.assign(mb.uniq.size() + 1, 0);
  uint32_t* count = mb.occ_begin.data() + 1;
  for (size_t j = j0; j < j1; ++j) {
    const uint32_t* to = one ? nullptr : pieces[j].uniq.data();
    for (uint32_t p = pieces[j].begin; p < pieces[j].end; ++p) {
      ++count[one ? in_piece[p] : to[in_piece[p]]];
    }
  }
  for (size_t i = 0; i < mb.uniq.size(); ++i) mb.occ_begin[i + 1] += mb.occ_begin[i];
  std::vector<uint32_t> fill(mb.occ_begin.begin(), mb.occ_begin.end() - 1);
  mb.occ.resize(mb.key_end - mb.key_begin);
  for (size_t j = j0; j < j1; ++j) {
    const uint32_t* to = one ? nullptr : pieces[j].uniq.data();
    for (uint32_t p = pieces[j].begin; p < pieces[j].end; ++p) {
      mb.occ[fill[one ? in_piece[p] : to[in_piece[p]]]++] = p - mb.key_begin;
    }
  }
}

}  // namespace

void WorkingSetScratch::Ids::Reset(bool key_range) {
  key_range_ = key_range;
  keys_.clear();
  if (buckets_.empty() || ++stamp_ == 0) {
    buckets_.assign(std::max<size_t>(buckets_.size(), 256), Bucket{});
    stamp_ = 1;
  }
  mask_ = buckets_.size() - 1;
  shift_ = 64 - std::countr_zero(buckets_.size());
}

void WorkingSetScratch::Ids::Grow() {
  buckets_.assign(buckets_.size() * 2, Bucket{});
  stamp_ = 1;
  mask_ = buckets_.size() - 1;
  shift_ = 64 - std::countr_zero(buckets_.size());
  for (uint32_t i = 0; i < keys_.size(); ++i) {
    size_t s = static_cast<size_t>(Hash(keys_[i]) >> shift_);
    while (buckets_[s].stamp == stamp_) s = (s + 1) & mask_;
    buckets_[s] = {keys_[i], i, stamp_};
  }
}

size_t WorkingSet::MemoryBytes() const {
  size_t b = keys.capacity() * 8 + local.capacity() * 4 + cell.capacity() * 4;
  for (const Minibatch& m : batches) {
    b += (m.uniq.capacity() + m.occ_begin.capacity() + m.occ.capacity()) * 4;
  }
  return b;
}

size_t WorkingSetScratch::MemoryBytes() const {
  size_t b = batch_piece.capacity() * 4 + in_piece.capacity() * 4 + counts.capacity() * 4 +
             grouped_key.capacity() * 8 + grouped_id.capacity() * 4;
  for (const Piece& p : pieces) {
    b += sizeof(Piece) + p.keys.capacity() * 8 + p.part.capacity() +
         (p.id.capacity() + p.uniq.capacity()) * 4;
  }
  for (const Ids& t : tables) b += t.MemoryBytes();
  for (const Ids& t : key_ranges) b += t.MemoryBytes();
  for (const auto& v : seen) b += v.capacity() * 8;
  return b;
}

void BuildWorkingSet(const Batch& pass, size_t batch_size, ThreadPool* pool, WorkingSet* out,
                     WorkingSetScratch* scratch) {
  assert(batch_size > 0);
  WorkingSetScratch own;
  WorkingSetScratch& sc = scratch != nullptr ? *scratch : own;
  const size_t n = pass.keys.size();
  const uint64_t* keys = pass.keys.data();
  const int threads = pool ? pool->num_threads() : 1;
  if (sc.tables.size() < static_cast<size_t>(threads)) {
    sc.tables.resize(threads);
    sc.seen.resize(threads);
  }

  // 1. Minibatches and their pieces: each minibatch's occurrences cut into equal pieces of at
  // most kPieceUses.
  const uint32_t S = pass.schema.num_slots;
  const size_t rows = pass.rows();
  const size_t num_batches = (rows + batch_size - 1) / batch_size;
  out->batches.resize(num_batches);
  size_t num_pieces = 0;
  sc.batch_piece.assign(num_batches + 1, 0);
  for (size_t b = 0; b < num_batches; ++b) {
    Minibatch& mb = out->batches[b];
    mb.row_begin = static_cast<uint32_t>(b * batch_size);
    mb.row_end = static_cast<uint32_t>(std::min(rows, (b + 1) * batch_size));
    mb.key_begin = pass.offsets[size_t{mb.row_begin} * S];
    mb.key_end = pass.offsets[size_t{mb.row_end} * S];
    const size_t uses = mb.key_end - mb.key_begin;
    const size_t cut = (uses + kPieceUses - 1) / kPieceUses;
    if (sc.pieces.size() < num_pieces + cut) sc.pieces.resize(num_pieces + cut);
    for (size_t k = 0; k < cut; ++k) {
      Piece& piece = sc.pieces[num_pieces + k];
      piece.begin = static_cast<uint32_t>(mb.key_begin + uses * k / cut);
      piece.end = static_cast<uint32_t>(mb.key_begin + uses * (k + 1) / cut);
    }
    num_pieces += cut;
    sc.batch_piece[b + 1] = static_cast<uint32_t>(num_pieces);
  }
  std::vector<Piece>& pieces = sc.pieces;

  // 2. Each piece's distinct keys, and each occurrence's place among them.
  sc.in_piece.resize(n);
  sc.counts.assign(num_pieces * kKeyRanges, 0);
  RunParallel(pool, num_pieces, [&](size_t j, int t) {
    DedupPiece(keys, &sc.tables[t], &pieces[j], sc.in_piece.data(),
               sc.counts.data() + j * kKeyRanges);
  });
  // 3. The pieces' distinct keys grouped by key range, in piece order within each: so a
  // key range meets its keys in the pass's first-occurrence order.
  std::vector<uint32_t> part_begin(kKeyRanges + 1, 0);
  size_t at = 0;
  for (size_t q = 0; q < kKeyRanges; ++q) {
    part_begin[q] = static_cast<uint32_t>(at);
    for (size_t j = 0; j < num_pieces; ++j) {
      const uint32_t k = sc.counts[j * kKeyRanges + q];
      sc.counts[j * kKeyRanges + q] = static_cast<uint32_t>(at);
      at += k;
    }
  }
  part_begin[kKeyRanges] = static_cast<uint32_t>(at);
  sc.grouped_key.resize(at);
  sc.grouped_id.resize(at);
  RunParallel(pool, num_pieces, [&](size_t j, int) {
    Piece& piece = pieces[j];
    uint32_t* next = sc.counts.data() + j * kKeyRanges;
    piece.id.resize(piece.keys.size());
    for (size_t d = 0; d < piece.keys.size(); ++d) {
      const uint32_t i = next[piece.part[d]]++;
      sc.grouped_key[i] = piece.keys[d];
      piece.id[d] = i;
    }
  });
  // 4. Each key range numbers its distinct keys in that order (its table stays small: one
  // key range's keys); the local ids are those numbers offset by the key ranges' bases.
  sc.key_ranges.resize(kKeyRanges);
  RunParallel(pool, kKeyRanges, [&](size_t q, int) {
    Ids& ids = sc.key_ranges[q];
    ids.Reset(true);
    for (uint32_t i = part_begin[q]; i < part_begin[q + 1]; ++i) {
      sc.grouped_id[i] = ids.IdOf(sc.grouped_key[i]);
    }
  });
  std::vector<uint32_t> base(kKeyRanges + 1, 0);
  for (size_t q = 0; q < kKeyRanges; ++q) {
    base[q + 1] = base[q] + static_cast<uint32_t>(sc.key_ranges[q].keys().size());
  }
  out->keys.resize(base[kKeyRanges]);
  RunParallel(pool, kKeyRanges, [&](size_t q, int) {
    const std::vector<uint64_t>& k = sc.key_ranges[q].keys();
    std::copy(k.begin(), k.end(), out->keys.begin() + base[q]);
  });
  // 5. Each piece's local ids, and each occurrence's.
  out->local.resize(n);
  RunParallel(pool, num_pieces, [&](size_t j, int) {
    Piece& piece = pieces[j];
    for (size_t d = 0; d < piece.id.size(); ++d) {
      piece.id[d] = sc.grouped_id[piece.id[d]] + base[piece.part[d]];
    }
    const uint32_t* in_piece = sc.in_piece.data();
    uint32_t* local = out->local.data();
    for (uint32_t p = piece.begin; p < piece.end; ++p) local[p] = piece.id[in_piece[p]];
  });

  // 6. Minibatches: cells, and the per-key occurrence lists.
  out->cell.resize(n);
  for (auto& m : sc.seen) m.clear();  // marks are per build: stale ones would match a tag
  RunParallel(pool, num_batches, [&](size_t b, int t) {
    BuildMinibatch(pass, b, pieces, sc.batch_piece[b], sc.batch_piece[b + 1], sc.in_piece.data(),
                   &sc.seen[t], out);
  });
}

}  // namespace ctrbox
