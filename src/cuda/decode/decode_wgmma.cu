// Instantiations (bf16 and fp8 caches) and the launcher of the wgmma kernel.
#include "cuda/decode/decode_wgmma.hpp"
#include "cuda/decode/decode_wgmma_kernel.cuh"

namespace mla::cuda::decode {

static_assert(kWgmmaRows == v4::kM, "one constant for the launcher and the kernel");

size_t wgmma_kernel_smem_bytes() {
  return v4::kSmemBytes;
}

namespace {
template <bool kFp8, bool kFp8Prefetch>
cudaError_t launch_t(const DecodeParams& p, int row_blocks, cudaStream_t stream) {
  auto* kernel = v4::decode_wgmma_kernel<kFp8, kFp8Prefetch>;
  // Per-function attribute, legal during stream capture: set on every launch.
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(v4::kSmemBytes));
  if (e != cudaSuccess) return e;
  kernel<<<dim3(p.num_workers, row_blocks), v4::kThreads, v4::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}
}  // namespace

cudaError_t launch_decode_main_wgmma(const DecodeParams& p, bool fp8, int row_blocks,
                                     cudaStream_t stream, bool fp8_prefetch) {
  if (!fp8) return launch_t<false, false>(p, row_blocks, stream);
  return fp8_prefetch ? launch_t<true, true>(p, row_blocks, stream)
                      : launch_t<true, false>(p, row_blocks, stream);
}

}  // namespace mla::cuda::decode
