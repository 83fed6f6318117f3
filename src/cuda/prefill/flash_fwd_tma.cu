// Instantiations and raw launch of Kernel::tma_warp_specialized
// (flash_fwd_ws_kernel.cuh). Status messages are built in flash_fwd.cpp: fmt's
// compile-time format strings do not compile under nvcc.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "cuda/prefill/flash_fwd_launch.hpp"
#include "cuda/prefill/flash_fwd_ws_kernel.cuh"

namespace mla::cuda::prefill {

// A 1-D grid in the order of ws_block, heads grouped by how many heads' K/V
// fit in FlashWsTraits::kL2GroupBytes (with varlen, sized from all keys of the
// batch: a conservative group).
template <class KernelFn>
static cudaError_t launch_ws(KernelFn kernel, const FlashFwdParams& p, const FlashWsMaps& maps,
                             cudaStream_t stream) {
  using Tr = FlashWsTraits;
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
  if (e != cudaSuccess) return e;
  const int64_t m_blocks = (p.max_seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM;
  const int64_t blocks = m_blocks * p.heads * p.batch;
  if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
  const int64_t keys = p.total_k > 0 ? p.total_k : p.seqlen_k;
  const int64_t head_bytes = std::max<int64_t>(keys, 1) * (Tr::kDnope + Tr::kDv) * 2;
  const int head_group =
      int(std::clamp<int64_t>(Tr::kL2GroupBytes / head_bytes, 1, std::max(p.heads, 1)));
  kernel<<<unsigned(blocks), Tr::kThreads, Tr::kSmemBytes, stream>>>(p, maps, head_group);
  return cudaGetLastError();
}

cudaError_t launch_flash_fwd_tma(const FlashFwdParams& p, const FlashWsMaps& maps,
                                 cudaStream_t stream) {
  return p.out_f32 ? launch_ws(flash_fwd_ws_kernel<true>, p, maps, stream)
                   : launch_ws(flash_fwd_ws_kernel<false>, p, maps, stream);
}

}  // namespace mla::cuda::prefill
