#include "reference/topk_ref.hpp"

#include <algorithm>
#include <cmath>

#include "reference/tensor_read.hpp"

namespace mla::reference {

std::vector<int64_t> topk_positions(const double* scores, int64_t n, int64_t k) {
  std::vector<int64_t> cand;
  for (int64_t p = 0; p < n; ++p)
    if (!std::isnan(scores[p]) && scores[p] != -INFINITY) cand.push_back(p);
  auto better = [&](int64_t a, int64_t b) {
    return scores[a] != scores[b] ? scores[a] > scores[b] : a < b;
  };
  const int64_t m = std::min<int64_t>(k, static_cast<int64_t>(cand.size()));
  std::partial_sort(cand.begin(), cand.begin() + m, cand.end(), better);
  cand.resize(m);
  return cand;
}

Status topk_indices(const TopkArgs& a) {
  const int64_t R = a.logits.shape[0], N = a.logits.shape[1];
  const bool translate = a.block_table.defined();
  std::vector<double> row(N);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t len = a.lengths.defined() ? read_int(a.lengths, {r}) : N;
    for (int64_t p = 0; p < len; ++p) row[p] = read(a.logits, {r, p});
    std::vector<int64_t> best = topk_positions(row.data(), len, a.k);
    if (a.order == TopkOrder::by_position) std::sort(best.begin(), best.end());
    for (int64_t j = 0; j < a.k; ++j) {
      int64_t v = -1;
      if (j < static_cast<int64_t>(best.size())) {
        const int64_t p = best[j];
        v = translate ? read_int(a.block_table, {r / a.rows_per_request, p / a.page_size}) *
                                int64_t(a.page_size) +
                            p % a.page_size
                      : p;
      }
      write_int(a.indices, {r, j}, v);
    }
  }
  return Status::Ok();
}

}  // namespace mla::reference
