// CPU reference of the log-sum-exp merge of split-KV partial attention results
// (the combine step of every split-KV decode kernel).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "mla/decode.hpp"

namespace mla::reference {

// Merge S partials of one row of width d, in fp64:
//   lse = log sum_s exp(lse_s),  out = sum_s exp(lse_s - lse) out_s.
// Partials with lse_s = -inf (no keys) contribute nothing and their out_s is
// not read (it may be garbage). All -inf: out 0, returns -inf.
// part_out(s, c) and part_lse(s) are accessors; out has d entries.
template <class PartOut, class PartLse>
double merge_row(int64_t S, int64_t d, PartOut part_out, PartLse part_lse, double* out);

// CPU backend of merge_attn_partials (arguments already validated). The row
// dims R may be several dims: partial_out [S, R..., D], partial_lse [S, R...].
Status merge_attn_partials(const MergeArgs& args);

// ---- implementation ----

template <class PartOut, class PartLse>
double merge_row(int64_t S, int64_t d, PartOut part_out, PartLse part_lse, double* out) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < d; ++c) out[c] = 0.0;
  double m = kNegInf;
  for (int64_t s = 0; s < S; ++s) m = std::max(m, part_lse(s));
  if (m == kNegInf) return kNegInf;
  double total = 0.0;
  for (int64_t s = 0; s < S; ++s) {
    const double l = part_lse(s);
    if (l == kNegInf) continue;
    const double w = std::exp(l - m);
    total += w;
    for (int64_t c = 0; c < d; ++c) out[c] += w * part_out(s, c);
  }
  for (int64_t c = 0; c < d; ++c) out[c] /= total;
  return m + std::log(total);
}

}  // namespace mla::reference
