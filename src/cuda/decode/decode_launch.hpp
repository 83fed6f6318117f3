// Launcher of the main decode kernel (decode_kernel.cuh), one explicit
// instantiation per (key source, cache type) in its own .cu file:
//   decode_bf16.cu         PagedKeys, bf16 (cp.async and TMA tiles)
//   decode_fp8.cu          PagedKeys, fp8_ds_mla
//   decode_fp8_e4m3.cu     PagedKeys, fp8_e4m3
//   decode_fp8_narrow.cu   PagedKeys, both fp8 formats, the narrow math
//   sparse/sparse_decode_{bf16,fp8,fp8_e4m3}.cu   IndexedKeys
// and the math warpgroups' one-way form (kOneWay, decode_kernel.cuh) of each:
//   decode_oneway_bf16.cu, decode_oneway_fp8.cu, sparse/sparse_decode_oneway.cu
// and the fp8 producer's sector-pair loads (kSectorPairs, decode_kernel.cuh;
// selectable until measured): the dense one-way form and the sparse seesaw:
//   decode_fp8_sector_pairs.cu, sparse/sparse_decode_sector_pairs.cu
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
// The math warpgroups' form (decode_kernel.cuh): the seesaw (each warpgroup S
// of half the tile's keys, row maxima exchanged), the one-way form (one
// warpgroup does S and the softmax, the other only its half of P.V), or the
// narrow transposed math of row blocks with <= kNarrowRows rows
// (decode_narrow.cuh; fp8 paged caches).
enum class MathForm { seesaw, oneway, narrow };

// kSectorPairs: the fp8 producer reads a key's entry in sector pairs (fp8
// caches, not the narrow form, whose producer always does).
template <class KeySrc, KvFormat kFormat, bool kTma, MathForm kForm, bool kSectorPairs = false>
cudaError_t launch_decode_kernel(const DecodeParams& p, int row_blocks, cudaStream_t stream,
                                 const CUtensorMap& kv_map);

// One line per instantiation (each defined in the .cu file listed above).
#define MLA_DECODE_EXTERN(KeySrc, kFormat, kTma, kForm)                   \
  extern template cudaError_t                                             \
  launch_decode_kernel<KeySrc, KvFormat::kFormat, kTma, MathForm::kForm>( \
      const DecodeParams&, int, cudaStream_t, const CUtensorMap&)
MLA_DECODE_EXTERN(PagedKeys, bf16, false, seesaw);
MLA_DECODE_EXTERN(PagedKeys, bf16, true, seesaw);
MLA_DECODE_EXTERN(PagedKeys, bf16, false, oneway);
MLA_DECODE_EXTERN(PagedKeys, bf16, true, oneway);
MLA_DECODE_EXTERN(PagedKeys, fp8_ds_mla, false, seesaw);
MLA_DECODE_EXTERN(PagedKeys, fp8_ds_mla, false, oneway);
MLA_DECODE_EXTERN(PagedKeys, fp8_ds_mla, false, narrow);
MLA_DECODE_EXTERN(PagedKeys, fp8_e4m3, false, seesaw);
MLA_DECODE_EXTERN(PagedKeys, fp8_e4m3, false, oneway);
MLA_DECODE_EXTERN(PagedKeys, fp8_e4m3, false, narrow);
MLA_DECODE_EXTERN(IndexedKeys, bf16, false, seesaw);
MLA_DECODE_EXTERN(IndexedKeys, bf16, false, oneway);
MLA_DECODE_EXTERN(IndexedKeys, fp8_ds_mla, false, seesaw);
MLA_DECODE_EXTERN(IndexedKeys, fp8_ds_mla, false, oneway);
MLA_DECODE_EXTERN(IndexedKeys, fp8_e4m3, false, seesaw);
MLA_DECODE_EXTERN(IndexedKeys, fp8_e4m3, false, oneway);
#undef MLA_DECODE_EXTERN
#define MLA_DECODE_EXTERN_SECTOR_PAIRS(KeySrc, kFormat, kForm)                   \
  extern template cudaError_t                                                    \
  launch_decode_kernel<KeySrc, KvFormat::kFormat, false, MathForm::kForm, true>( \
      const DecodeParams&, int, cudaStream_t, const CUtensorMap&)
MLA_DECODE_EXTERN_SECTOR_PAIRS(PagedKeys, fp8_ds_mla, oneway);
MLA_DECODE_EXTERN_SECTOR_PAIRS(PagedKeys, fp8_e4m3, oneway);
MLA_DECODE_EXTERN_SECTOR_PAIRS(IndexedKeys, fp8_ds_mla, seesaw);
MLA_DECODE_EXTERN_SECTOR_PAIRS(IndexedKeys, fp8_e4m3, seesaw);
#undef MLA_DECODE_EXTERN_SECTOR_PAIRS

}  // namespace mla::cuda::decode
