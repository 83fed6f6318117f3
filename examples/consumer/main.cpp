// The smallest program against an installed mla: one absorbed decode step on
// the CPU reference (2 requests, 16 heads, a paged f32 query over a bf16 cache),
// one output row checked against attention written out here. Built and run by CI
// against `cmake --install` (scripts/package_check.sh).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "mla/decode.hpp"

int main() {
  constexpr int B = 2, s_q = 1, h_q = 16, page = 16, pages_per_req = 2;
  std::vector<float> q(B * s_q * h_q * 576);
  for (size_t i = 0; i < q.size(); ++i) q[i] = float(std::sin(0.37 * double(i)));
  // bf16 cache entries: the upper 16 bits of an f32.
  std::vector<uint16_t> cache(B * pages_per_req * page * 576);
  for (size_t i = 0; i < cache.size(); ++i) {
    const float v = float(std::cos(0.11 * double(i)));
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    cache[i] = uint16_t(bits >> 16);
  }
  std::vector<int32_t> block_table = {0, 1, 2, 3};
  std::vector<int32_t> seqlens = {20, 9};
  std::vector<float> out(B * s_q * h_q * 512, NAN), lse(B * h_q * s_q, NAN);

  mla::DecodeArgs a;
  a.q = mla::TensorView::make(q.data(), mla::DType::f32, {B, s_q, h_q, 576});
  a.kv.data = mla::TensorView::make(cache.data(), mla::DType::bf16,
                                    {B * pages_per_req, page, 1, 576});
  a.kv.format = mla::KvFormat::bf16;
  a.block_table = mla::TensorView::make(block_table.data(), mla::DType::i32, {B, pages_per_req});
  a.cache_seqlens = mla::TensorView::make(seqlens.data(), mla::DType::i32, {B});
  a.softmax_scale = 1.0f / std::sqrt(576.0f);
  a.out = mla::TensorView::make(out.data(), mla::DType::f32, {B, s_q, h_q, 512});
  a.lse = mla::TensorView::make(lse.data(), mla::DType::f32, {B, h_q, s_q});
  const mla::Status st = mla::mla_decode(a);
  if (!st.ok()) {
    std::fprintf(stderr, "mla_decode: %s\n", st.message().c_str());
    return 1;
  }
  for (float v : out)
    if (!std::isfinite(v)) return std::fprintf(stderr, "non-finite output\n"), 1;
  // Request 1 (9 keys on its first page, id 2), head 3, by hand: softmax over the scores,
  // then the weighted sum of the first 512 values of each key.
  auto key = [&](int t, int d) {
    const uint32_t bits = uint32_t(cache[(2 * page + t) * 576 + d]) << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return double(v);
  };
  const float* qr = &q[(1 * h_q + 3) * 576];
  std::vector<double> p(9);
  double m = -INFINITY, sum = 0;
  for (int t = 0; t < 9; ++t) {
    for (int d = 0; d < 576; ++d) p[t] += double(qr[d]) * key(t, d);
    p[t] *= a.softmax_scale;
    m = std::max(m, p[t]);
  }
  for (double& x : p) sum += (x = std::exp(x - m));
  double worst = 0;
  for (int d = 0; d < 512; ++d) {
    double o = 0;
    for (int t = 0; t < 9; ++t) o += p[t] / sum * key(t, d);
    worst = std::max(worst, std::fabs(o - out[(1 * h_q + 3) * 512 + d]));
  }
  // f32 output of an fp64 computation: rounding only (|out| <= 1).
  if (worst > 1e-6) return std::fprintf(stderr, "out differs by %g\n", worst), 1;
  std::printf("mla consumer: decode ok, out[0] = %.6f, lse[0] = %.6f\n", out[0], lse[0]);
  return 0;
}
