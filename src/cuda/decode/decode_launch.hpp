// Launcher of the main decode kernel (decode_kernel.cuh), one explicit
// instantiation per (key source, cache type) in its own .cu file:
//   decode_bf16.cu         PagedKeys, bf16 (cp.async and TMA tiles)
//   decode_fp8.cu          PagedKeys, fp8_ds_mla
//   decode_fp8_e4m3.cu     PagedKeys, fp8_e4m3
//   sparse/sparse_decode_{bf16,fp8,fp8_e4m3}.cu   IndexedKeys
// Grid (p.num_workers, row_blocks), row_blocks = ceil(rows / kM); it runs
// after split::launch_schedule and before split::launch_combine.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda/decode/decode_params.hpp"
#include "mla/kv_cache.hpp"

namespace mla::cuda::decode {

struct PagedKeys;    // decode_keys.cuh
struct IndexedKeys;  // decode_keys.cuh

// kv_map: the bf16 cache's tensor map when kTma (tma_map.hpp), unread otherwise.
template <class KeySrc, KvFormat kFormat, bool kTma>
cudaError_t launch_decode_kernel(const DecodeParams& p, int row_blocks, cudaStream_t stream,
                                 const CUtensorMap& kv_map);

extern template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::bf16, false>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);
extern template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::bf16, true>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);
extern template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::fp8_ds_mla, false>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);
extern template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::fp8_e4m3, false>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);
extern template cudaError_t launch_decode_kernel<IndexedKeys, KvFormat::bf16, false>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);
extern template cudaError_t launch_decode_kernel<IndexedKeys, KvFormat::fp8_ds_mla, false>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);
extern template cudaError_t launch_decode_kernel<IndexedKeys, KvFormat::fp8_e4m3, false>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);

}  // namespace mla::cuda::decode
