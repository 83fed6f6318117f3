// Instantiations and raw launch of Kernel::cp_async_wgmma
// (flash_fwd_wgmma_kernel.cuh). Status messages are built in flash_fwd.cpp:
// fmt's compile-time format strings do not compile under nvcc.
#include <cuda_runtime.h>

#include "cuda/prefill/flash_fwd_launch.hpp"
#include "cuda/prefill/flash_fwd_wgmma_kernel.cuh"

namespace mla::cuda::prefill {

template <class KernelFn>
static cudaError_t launch(KernelFn kernel, const FlashFwdParams& p, cudaStream_t stream) {
  using Tr = FlashWgmmaTraits;
  // The dynamic shared-memory limit is per function; setting it on every call
  // costs about a microsecond and keeps the launcher free of static state.
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid((p.max_seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM, p.heads, p.batch);
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_flash_fwd_cp_async(const FlashFwdParams& p, cudaStream_t stream) {
  return p.out_f32 ? launch(flash_fwd_wgmma_kernel<true>, p, stream)
                   : launch(flash_fwd_wgmma_kernel<false>, p, stream);
}

}  // namespace mla::cuda::prefill
