#include "cuda/prefill/flash_fwd.hpp"

#include <algorithm>

#include "common/validate.hpp"
#include "cuda/common/tma_map.hpp"
#include "cuda/prefill/flash_fwd_launch.hpp"

namespace mla::cuda::prefill {

bool encode_flash_ws_maps(const FlashFwdParams& p, FlashWsMaps* m) {
  const int64_t tq = p.total_q > 0 ? p.total_q : (p.cu_seqlens_q ? 0 : p.max_seqlen_q);
  // No keys at all: every tile count is 0 and the maps are never read, but
  // the encoder needs a non-empty tensor.
  const int64_t tk =
      std::max<int64_t>(1, p.total_k > 0 ? p.total_k : (p.cu_seqlens_k ? 0 : p.seqlen_k));
  if (tq < 1 || (p.cu_seqlens_k != nullptr && p.total_k <= 0)) return false;
  const uint32_t box[3] = {64, 1, 128};
  const int64_t h = p.heads;
  const bool shared_rope = p.k_rope_head_stride == 0;
  const int64_t q_dims[3] = {192, h, tq}, kn_dims[3] = {128, h, tk},
                kr_dims[3] = {64, shared_rope ? 1 : h, tk}, v_dims[3] = {128, h, tk};
  // With one head the head stride is never stepped; any legal value will do.
  auto hs = [&](int64_t heads, int64_t head_stride, int64_t dim) {
    return heads > 1 ? head_stride * 2 : dim * 2;
  };
  const int64_t q_str[2] = {hs(h, p.q_head_stride, 192), p.q_row_stride * 2};
  const int64_t kn_str[2] = {hs(h, p.k_nope_head_stride, 128), p.k_nope_row_stride * 2};
  const int64_t kr_str[2] = {hs(kr_dims[1], p.k_rope_head_stride, 64), p.k_rope_row_stride * 2};
  const int64_t v_str[2] = {hs(h, p.v_head_stride, 128), p.v_row_stride * 2};
  return encode_bf16_3d_map(&m->q, p.q, q_dims, q_str, box) &&
         encode_bf16_3d_map(&m->k_nope, p.k_nope, kn_dims, kn_str, box) &&
         encode_bf16_3d_map(&m->k_rope, p.k_rope, kr_dims, kr_str, box) &&
         encode_bf16_3d_map(&m->v, p.v, v_dims, v_str, box);
}

Kernel choose_kernel(const FlashFwdParams& p, FlashWsMaps* maps) {
  return encode_flash_ws_maps(p, maps) ? Kernel::tma_warp_specialized : Kernel::cp_async_wgmma;
}

Status launch_flash_fwd(const FlashFwdParams& p, void* stream, std::optional<Kernel> kernel) {
  if (p.batch < 0 || p.heads < 0 || p.max_seqlen_q < 0)
    return detail::error(Errc::invalid_value,
                         "prefill attention: batch {}, heads {}, max_seqlen_q {} must be >= 0",
                         p.batch, p.heads, p.max_seqlen_q);
  if (p.batch == 0 || p.heads == 0 || p.max_seqlen_q == 0) return Status::Ok();
  if (p.heads > 65535 || p.batch > 65535)
    return detail::error(Errc::unsupported,
                         "prefill attention: heads {} or batch {} past the grid limit 65535",
                         p.heads, p.batch);
  // The maps are encoded once: they decide the choice, and the TMA kernel reads them.
  FlashWsMaps maps;
  const Kernel chosen = choose_kernel(p, &maps);
  const Kernel k = kernel.value_or(chosen);
  if (k == Kernel::tma_warp_specialized && chosen != k)
    return detail::error(
        Errc::unsupported,
        "prefill attention ({}): no TMA tensor maps for these tensors (total_q {}, "
        "total_k {} with varlen must be given; bases 16-byte aligned, strides multiples of 8 "
        "elements)",
        kernel_name(k), p.total_q, p.total_k);
  const auto s = static_cast<cudaStream_t>(stream);
  const cudaError_t e = k == Kernel::tma_warp_specialized ? launch_flash_fwd_tma(p, maps, s)
                                                          : launch_flash_fwd_cp_async(p, s);
  if (e != cudaSuccess)
    return detail::error(Errc::cuda_error,
                         "prefill attention launch ({}, B {}, h {}, max_seqlen_q {}): {}",
                         kernel_name(k), p.batch, p.heads, p.max_seqlen_q, cudaGetErrorString(e));
  return Status::Ok();
}

}  // namespace mla::cuda::prefill
