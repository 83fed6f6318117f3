// The bf16 instantiation of the sparse prefill kernel and its launch.
#include <algorithm>
#include <cstdint>

#include "cuda/common/cuda_status.hpp"
#include "cuda/sparse/sparse_prefill_kernel.cuh"
#include "cuda/sparse/sparse_prefill_launch.hpp"

namespace mla::cuda::sparse {

Status launch_sparse_prefill(const SparsePrefillParams& p, cudaStream_t stream) {
  using C = SparsePrefillConfig;
  MLA_TRY(sparse_prefill_check(p));
  if (p.s_q == 0) return Status::Ok();
  static const cudaError_t attr = cudaFuncSetAttribute(
      sparse_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  MLA_CUDA_TRY(attr, "cudaFuncSetAttribute(sparse_prefill_kernel)");
  DeviceFacts dev;
  int id = 0;
  MLA_CUDA_TRY(cudaGetDevice(&id), "cudaGetDevice");
  MLA_TRY(device_facts(id, &dev));
  // Persistent: one CTA per SM (the shared memory allows one), items round-robin.
  const int items = int(int64_t(p.s_q) * ((p.h_q + C::kRows - 1) / C::kRows));
  const int ctas = std::min(items, p.max_ctas > 0 ? p.max_ctas : dev.sm_count);
  sparse_prefill_kernel<<<ctas, C::kThreads, C::kSmemBytes, stream>>>(p, items);
  return check_launch("sparse_prefill_kernel");
}

}  // namespace mla::cuda::sparse
