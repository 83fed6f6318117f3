#include "reference/mha_ref.hpp"

#include <algorithm>
#include <vector>

#include "reference/softmax_ref.hpp"
#include "reference/tensor_read.hpp"

namespace mla::reference {

Status decompress_kv(const DecompressKvArgs& a) {
  const int64_t N = a.c_kv.shape[0], d_c = a.c_kv.shape[1], H = a.w_uk.shape[0];
  const int64_t d_nope = a.w_uk.shape[1], d_v = a.w_uv.shape[1];
  std::vector<double> c(d_c);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < d_c; ++i) c[i] = read(a.c_kv, {n, i});
    for (int64_t h = 0; h < H; ++h) {
      auto project = [&](const TensorView& w, const TensorView& dst, int64_t d_out) {
        for (int64_t d = 0; d < d_out; ++d) {
          double acc = 0.0;
          for (int64_t i = 0; i < d_c; ++i) acc += read(w, {h, d, i}) * c[i];
          write(dst, {n, h, d}, acc);
        }
      };
      project(a.w_uk, a.k_nope, d_nope);
      project(a.w_uv, a.v, d_v);
    }
  }
  return Status::Ok();
}

Status mha_prefill(const MhaPrefillArgs& a) {
  const int64_t B = a.cu_seqlens_q.shape[0] - 1, H = a.q.shape[1];
  const int64_t d_qk = a.q.shape[2], d_v = a.v.shape[2];
  const double scale = a.softmax_scale;
  std::vector<double> q(d_qk), scores, o(d_v);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t q0 = read_int(a.cu_seqlens_q, {b}),
                  len_q = read_int(a.cu_seqlens_q, {b + 1}) - q0;
    const int64_t k0 = read_int(a.cu_seqlens_k, {b}),
                  len_k = read_int(a.cu_seqlens_k, {b + 1}) - k0;
    scores.resize(std::max<int64_t>(len_k, 1));
    for (int64_t i = 0; i < len_q; ++i) {
      // Bottom-right causal: query i is token len_k - len_q + i of the sequence.
      const int64_t n = a.causal ? std::clamp<int64_t>(len_k - len_q + i + 1, 0, len_k) : len_k;
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t d = 0; d < d_qk; ++d) q[d] = read(a.q, {q0 + i, h, d});
        const double lse = softmax_attend(
            n, d_v,
            [&](int64_t j) {
              double dot = 0.0;
              for (int64_t d = 0; d < d_qk; ++d) dot += q[d] * read(a.k, {k0 + j, h, d});
              return scale * dot;
            },
            [&](int64_t j, int64_t d) {
              return read(a.v, {k0 + j, h, d});
            },
            scores.data(), o.data());
        for (int64_t d = 0; d < d_v; ++d) write(a.out, {q0 + i, h, d}, o[d]);
        write(a.lse, {h, q0 + i}, lse);
      }
    }
  }
  return Status::Ok();
}

}  // namespace mla::reference
