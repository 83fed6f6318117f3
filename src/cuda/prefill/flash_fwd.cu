// Kernel instantiations and the raw launch. Host logic that builds Status
// messages lives in flash_fwd.cpp: fmt's compile-time format strings do not
// compile under nvcc, so .cu files stay free of fmt.
#include <cuda_runtime.h>

#include "cuda/prefill/flash_fwd_kernel.cuh"
#include "cuda/prefill/flash_fwd_launch.hpp"

namespace mla::cuda::prefill {

template <bool kOutF32>
static cudaError_t launch(const FlashFwdParams& p, cudaStream_t stream) {
  using T = FlashFwdTraits;
  auto kernel = flash_fwd_kernel<kOutF32>;
  // The dynamic shared-memory limit is per function; setting it on every call
  // costs about a microsecond and keeps the launcher free of static state.
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid((p.max_seqlen_q + T::kBlockM - 1) / T::kBlockM, p.heads, p.batch);
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t flash_fwd_launch_raw(const FlashFwdParams& p, cudaStream_t stream) {
  return p.out_f32 ? launch<true>(p, stream) : launch<false>(p, stream);
}

}  // namespace mla::cuda::prefill
