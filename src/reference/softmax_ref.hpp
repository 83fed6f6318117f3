// The one softmax-attention row of the CPU reference, shared by absorbed decode
// and non-absorbed MHA: fp64, two passes (max, then exp-sum), no online
// rescaling: the plainest form, because it is the oracle.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace mla::reference {

// logit(j): the scaled score of key j (j < n); value(j, c): component c < d_v
// of value j. Writes out[0..d_v) = sum_j p_j value_j and returns
// lse = log sum_j exp(logit_j); n == 0 gives out 0 and -inf. `scores` holds
// at least n doubles of scratch.
template <class Logit, class Value>
double softmax_attend(int64_t n, int64_t d_v, Logit logit, Value value, double* scores,
                      double* out) {
  std::fill(out, out + d_v, 0.0);
  double m = -std::numeric_limits<double>::infinity();
  if (n <= 0) return m;
  for (int64_t j = 0; j < n; ++j) {
    scores[j] = logit(j);
    m = std::max(m, scores[j]);
  }
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const double p = std::exp(scores[j] - m);
    sum += p;
    for (int64_t c = 0; c < d_v; ++c) out[c] += p * value(j, c);
  }
  for (int64_t c = 0; c < d_v; ++c) out[c] /= sum;
  return m + std::log(sum);
}

}  // namespace mla::reference
