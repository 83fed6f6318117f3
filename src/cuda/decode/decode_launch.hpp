// Launcher of the main decode kernel (decode_kernel.cuh), one explicit
// instantiation per (key source, cache type) in its own .cu file:
//   decode_bf16.cu         PagedKeys, bf16 (cp.async and TMA tiles)
//   decode_fp8.cu          PagedKeys, fp8_ds_mla
//   sparse/sparse_decode_bf16.cu, sparse_decode_fp8.cu   IndexedKeys
// Grid (p.num_workers, row_blocks), row_blocks = ceil(rows / kM); it runs
// after split::launch_schedule and before split::launch_combine.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda/decode/decode_params.hpp"

namespace mla::cuda::decode {

struct PagedKeys;    // decode_keys.cuh
struct IndexedKeys;  // decode_keys.cuh

// kv_map: the bf16 cache's tensor map when kTma (tma_map.hpp), unread otherwise.
template <class KeySrc, bool kFp8, bool kTma>
cudaError_t launch_decode_kernel(const DecodeParams& p, int row_blocks, cudaStream_t stream,
                                 const CUtensorMap& kv_map);

extern template cudaError_t launch_decode_kernel<PagedKeys, false, false>(const DecodeParams&, int,
                                                                          cudaStream_t,
                                                                          const CUtensorMap&);
extern template cudaError_t launch_decode_kernel<PagedKeys, false, true>(const DecodeParams&, int,
                                                                         cudaStream_t,
                                                                         const CUtensorMap&);
extern template cudaError_t launch_decode_kernel<PagedKeys, true, false>(const DecodeParams&, int,
                                                                         cudaStream_t,
                                                                         const CUtensorMap&);
extern template cudaError_t launch_decode_kernel<IndexedKeys, false, false>(const DecodeParams&,
                                                                            int, cudaStream_t,
                                                                            const CUtensorMap&);
extern template cudaError_t launch_decode_kernel<IndexedKeys, true, false>(const DecodeParams&, int,
                                                                           cudaStream_t,
                                                                           const CUtensorMap&);

}  // namespace mla::cuda::decode
