// Instantiations (bf16 and fp8 caches) and the launcher of the v5 kernel.
#include "cuda/decode/decode_wgmma.hpp"
#include "cuda/decode/decode_wgmma5.hpp"
#include "cuda/decode/decode_wgmma5_kernel.cuh"

namespace mla::cuda::decode {

static_assert(kWgmmaRows == v5::kM, "v5 runs on v4's row blocks and workspace");

namespace {
template <bool kFp8>
cudaError_t launch_t(const DecodeParams& p, int row_blocks, cudaStream_t stream) {
  auto* kernel = v5::decode_wgmma5_kernel<kFp8>;
  // Per-function attribute, legal during stream capture: set on every launch.
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(v4::kSmemBytes));
  if (e != cudaSuccess) return e;
  kernel<<<dim3(p.num_workers, row_blocks), v5::kThreads, v4::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}
}  // namespace

cudaError_t launch_decode_main_wgmma5(const DecodeParams& p, bool fp8, int row_blocks,
                                      cudaStream_t stream) {
  return fp8 ? launch_t<true>(p, row_blocks, stream) : launch_t<false>(p, row_blocks, stream);
}

}  // namespace mla::cuda::decode
