// CPU reference of absorbed MLA decode (docs/design.md section 1): exact softmax
// attention in fp64 over a paged latent cache, the oracle for every GPU decode
// kernel and the CPU backend of mla_decode / mla_decode_partial.
#pragma once
#include <cstdint>

#include "mla/decode.hpp"

namespace mla::reference {

// One query row against n keys (softmax_attend of reference/softmax_ref.hpp):
//   q        576 values
//   keys     n entries of 576 values [c_kv ; k_rope], row-major
//   out512   sum_j p_j c_kv_j (0 when n == 0)
//   returns  lse = log sum_j exp(scale * q . k_j) (-inf when n == 0)
// `scores` is scratch of at least n doubles.
double attend_row(const double* q, const double* keys, int64_t n, double scale, double* scores,
                  double* out512);

// The keys of request b that query i (0 <= i < s_q) may see, given the
// request's length: the first len - (s_q - 1 - i) under causal masking, all len
// otherwise; never negative.
inline int64_t visible_keys(int64_t len, int64_t s_q, int64_t i, bool causal) {
  const int64_t n = causal ? len - (s_q - 1 - i) : len;
  return n < 0 ? 0 : n;
}

// CPU backends (arguments already validated, CPU tensors).
Status mla_decode(const DecodeArgs& args);
Status mla_decode_partial(const DecodePartialArgs& args);

}  // namespace mla::reference
