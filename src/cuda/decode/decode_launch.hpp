// Launcher of the main decode kernel (decode_kernel.cuh), one explicit
// instantiation per (key source, cache type) in its own .cu file:
//   decode_bf16.cu         PagedKeys, bf16 (cp.async and TMA tiles)
//   decode_fp8.cu          PagedKeys, fp8_ds_mla (64-row and narrow math)
//   decode_fp8_e4m3.cu     PagedKeys, fp8_e4m3 (64-row and narrow math)
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
// kNarrow: the transposed math of row blocks with <= kNarrowRows rows
// (decode_narrow.cuh; fp8 paged caches), two tiles of raw entries in the
// producer's registers.
template <class KeySrc, KvFormat kFormat, bool kTma, bool kNarrow = false>
cudaError_t launch_decode_kernel(const DecodeParams& p, int row_blocks, cudaStream_t stream,
                                 const CUtensorMap& kv_map);

// One line per instantiation (each defined in the .cu file listed above).
#define MLA_DECODE_EXTERN(KeySrc, kFormat, kTma, kNarrow)                                     \
  extern template cudaError_t launch_decode_kernel<KeySrc, KvFormat::kFormat, kTma, kNarrow>( \
      const DecodeParams&, int, cudaStream_t, const CUtensorMap&)
MLA_DECODE_EXTERN(PagedKeys, bf16, false, false);
MLA_DECODE_EXTERN(PagedKeys, bf16, true, false);
MLA_DECODE_EXTERN(PagedKeys, fp8_ds_mla, false, false);
MLA_DECODE_EXTERN(PagedKeys, fp8_ds_mla, false, true);
MLA_DECODE_EXTERN(PagedKeys, fp8_e4m3, false, false);
MLA_DECODE_EXTERN(PagedKeys, fp8_e4m3, false, true);
MLA_DECODE_EXTERN(IndexedKeys, bf16, false, false);
MLA_DECODE_EXTERN(IndexedKeys, fp8_ds_mla, false, false);
MLA_DECODE_EXTERN(IndexedKeys, fp8_e4m3, false, false);
#undef MLA_DECODE_EXTERN

}  // namespace mla::cuda::decode
