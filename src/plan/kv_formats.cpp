// Bytes per token per layer of each KV cache format (docs/design.md section 2).
#include "mla/plan.hpp"

namespace mla::plan {

const char* kv_format_name(KvFormat f) {
  switch (f) {
    case KvFormat::mha_bf16: return "mha-bf16";
    case KvFormat::gqa_bf16: return "gqa-bf16";
    case KvFormat::mla_bf16: return "mla-bf16";
    case KvFormat::mla_fp8: return "mla-fp8";
    case KvFormat::mla_fp4: return "mla-fp4";
  }
  return "?";
}

int64_t kv_bytes_per_token_layer(const ModelSpec& m, KvFormat f) {
  constexpr int64_t kBf16 = 2;
  switch (f) {
    case KvFormat::mha_bf16:  // every head's K and V
      return int64_t{m.heads} * (m.head_dim_k + m.head_dim_v) * kBf16;
    case KvFormat::gqa_bf16:  // K and V of the shared KV heads
      return int64_t{m.gqa_kv_heads} * 2 * m.head_dim_k * kBf16;
    case KvFormat::mla_bf16:  // [c_kv ; k_rope] in bf16: 576 x 2 = 1152
      return int64_t{m.d_c + m.d_r} * kBf16;
    case KvFormat::mla_fp8:
      // fp8_ds_mla: d_c e4m3 bytes + one fp32 scale per 128 latents + bf16 rope = 656.
      return int64_t{m.d_c} + int64_t{m.d_c / 128} * 4 + int64_t{m.d_r} * kBf16;
    case KvFormat::mla_fp4:
      // On paper: d_c e2m1 nibbles + one e4m3 scale per 16 + bf16 rope = 416 for d_c 512.
      return int64_t{m.d_c / 2} + int64_t{m.d_c / 16} + int64_t{m.d_r} * kBf16;
  }
  return 0;
}

}  // namespace mla::plan
