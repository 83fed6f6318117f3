// The smallest program against an installed mla: one absorbed decode step on
// the CPU reference (2 requests, 16 heads, a paged f32 query over a bf16 cache),
// checked for finite output. Built and run by CI against `cmake --install`.
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
  std::printf("mla consumer: decode ok, out[0] = %.6f, lse[0] = %.6f\n", out[0], lse[0]);
  return 0;
}
