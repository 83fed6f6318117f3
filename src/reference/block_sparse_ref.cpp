#include "reference/block_sparse_ref.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mla/dims.hpp"
#include "reference/kv_cache_ref.hpp"
#include "reference/tensor_read.hpp"

namespace mla::reference {

int64_t num_compressed_blocks(const BlockSparseParams& p, int64_t n) {
  return n < p.block_size ? 0 : (n - p.block_size) / p.stride + 1;
}

std::vector<int64_t> block_sparse_positions(const BlockSparseParams& p, int64_t n,
                                            const std::vector<double>& c) {
  if (n <= 0) return {};
  const int64_t sel = p.selected_block_size;
  const int64_t nJ = (n + sel - 1) / sel;
  const int64_t nc = num_compressed_blocks(p, n);
  // Selection block scores: max over overlapping complete compressed blocks.
  const double none = -std::numeric_limits<double>::infinity();
  std::vector<double> S(nJ, none);
  for (int64_t j = 0; j < nc; ++j) {
    const int64_t lo = j * p.stride, hi = lo + p.block_size;  // [lo, hi)
    for (int64_t J = lo / sel; J < nJ && J * sel < hi; ++J) S[J] = std::max(S[J], c[j]);
  }
  std::vector<bool> chosen(nJ, false);
  int64_t count = 0;
  for (int64_t J = 0; J < nJ; ++J)
    if (J < p.initial_blocks || J >= nJ - p.local_blocks) chosen[J] = true, ++count;
  std::vector<int64_t> rest;
  for (int64_t J = 0; J < nJ; ++J)
    if (!chosen[J] && S[J] != none) rest.push_back(J);
  std::stable_sort(rest.begin(), rest.end(), [&](int64_t a, int64_t b) { return S[a] > S[b]; });
  for (int64_t J : rest) {
    if (count >= p.num_selected_blocks) break;
    chosen[J] = true;
    ++count;
  }
  std::vector<bool> take(n, false);
  for (int64_t J = 0; J < nJ; ++J)
    if (chosen[J])
      for (int64_t t = J * sel; t < std::min(n, (J + 1) * sel); ++t) take[t] = true;
  for (int64_t t = std::max<int64_t>(0, n - p.sliding_window); t < n; ++t) take[t] = true;
  std::vector<int64_t> pos;
  for (int64_t t = 0; t < n; ++t)
    if (take[t]) pos.push_back(t);
  return pos;
}

Status block_sparse_select(const BlockSparseSelectArgs& a) {
  const BlockSparseParams& p = a.params;
  const int64_t B = a.q.shape[0], s_q = a.q.shape[1], h_q = a.q.shape[2];
  const int64_t C = a.indices.shape[2], page = a.kv.page_size();
  std::vector<double> entry(kDqk), keys, qv(kDqk);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = read_int(a.cache_seqlens, {b});
    auto slot_of = [&](int64_t pos) {
      return read_int(a.block_table, {b, pos / page}) * page + pos % page;
    };
    // Compressed keys of the request's complete blocks (a query sees a prefix).
    const int64_t nc = num_compressed_blocks(p, len);
    keys.assign(nc * kDqk, 0.0);
    for (int64_t j = 0; j < nc; ++j) {
      for (int64_t t = j * p.stride; t < j * p.stride + p.block_size; ++t) {
        load_kv_entry(a.kv, slot_of(t), entry.data());
        for (int c = 0; c < kDqk; ++c) keys[j * kDqk + c] += entry[c];
      }
      for (int c = 0; c < kDqk; ++c) keys[j * kDqk + c] /= p.block_size;
    }
    for (int64_t i = 0; i < s_q; ++i) {
      const int64_t n = std::max<int64_t>(len - (s_q - 1 - i), 0);
      const int64_t nci = num_compressed_blocks(p, n);
      std::vector<double> score(nci, -std::numeric_limits<double>::infinity());
      for (int64_t h = 0; h < h_q; ++h) {
        for (int c = 0; c < kDqk; ++c) qv[c] = read(a.q, {b, i, h, c});
        for (int64_t j = 0; j < nci; ++j) {
          double d = 0.0;
          for (int c = 0; c < kDqk; ++c) d += qv[c] * keys[j * kDqk + c];
          score[j] = std::max(score[j], d);
        }
      }
      const std::vector<int64_t> pos = block_sparse_positions(p, n, score);
      for (int64_t k = 0; k < C; ++k)
        write_int(a.indices, {b, i, k},
                  k < static_cast<int64_t>(pos.size()) ? slot_of(pos[k]) : -1);
      if (a.num_selected.defined())
        write_int(a.num_selected, {b, i}, static_cast<int64_t>(pos.size()));
    }
  }
  return Status::Ok();
}

}  // namespace mla::reference
