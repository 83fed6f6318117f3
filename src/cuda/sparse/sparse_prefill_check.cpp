// The host-side checks of the sparse prefill kernel's demands (fmt-formatted
// messages: kept out of the CUDA translation unit).
#include <cmath>
#include <cstdint>

#include "common/validate.hpp"
#include "cuda/sparse/sparse_prefill_config.hpp"
#include "cuda/sparse/sparse_prefill_launch.hpp"

namespace mla::cuda::sparse {

Status sparse_prefill_check(const SparsePrefillParams& p) {
  using detail::error;
  if (p.h_q < 1) return error(Errc::invalid_value, "q: h_q = {} must be at least 1", p.h_q);
  if (p.max_ctas < 0)
    return error(Errc::invalid_value, "max_ctas = {} must be >= 0 (0: one per SM)", p.max_ctas);
  if (p.topk < 1)
    return error(Errc::invalid_value, "indices: topk = {} must be at least 1", p.topk);
  if (reinterpret_cast<uintptr_t>(p.q) % 16 || p.q_ss % 8 || p.q_sh % 8)
    return error(
        Errc::misaligned,
        "q: base {} / token stride {} / head stride {} elements; the sparse prefill kernel "
        "loads 16-byte pieces (16-byte base, strides multiples of 8)",
        p.q, p.q_ss, p.q_sh);
  if (reinterpret_cast<uintptr_t>(p.kv) % 16 || p.kv_row_stride % (p.fp8 ? 16 : 8))
    return error(Errc::misaligned,
                 "kv: base {} / row stride {} elements; the sparse prefill kernel loads 16-byte "
                 "pieces (16-byte base, stride a multiple of 16 bytes)",
                 p.kv, p.kv_row_stride);
  if (reinterpret_cast<uintptr_t>(p.out) % 4 || p.out_ss % 2 || p.out_sh % 2)
    return error(Errc::misaligned,
                 "out: base {} / token stride {} / head stride {} elements; the sparse prefill "
                 "kernel writes bf16 pairs (4-byte base, even strides)",
                 p.out, p.out_ss, p.out_sh);
  if (!(p.softmax_scale > 0.f) || !std::isfinite(p.softmax_scale))
    return error(Errc::invalid_value,
                 "softmax_scale = {} must be finite and > 0 (the kernel takes row maxima of the "
                 "unscaled scores)",
                 p.softmax_scale);
  const int64_t ctas =
      int64_t(p.s_q) * ((p.h_q + SparsePrefillConfig::kRows - 1) / SparsePrefillConfig::kRows);
  if (ctas > INT32_MAX)
    return error(Errc::unsupported, "q: s_q = {} x h_q = {} past the kernel's 2^31 work items",
                 p.s_q, p.h_q);
  return Status::Ok();
}

Status launch_sparse_prefill(const SparsePrefillParams& p, cudaStream_t stream) {
  MLA_TRY(sparse_prefill_check(p));
  if (p.s_q == 0) return Status::Ok();
  return p.fp8 ? launch_sparse_prefill_as<true>(p, stream)
               : launch_sparse_prefill_as<false>(p, stream);
}

}  // namespace mla::cuda::sparse
