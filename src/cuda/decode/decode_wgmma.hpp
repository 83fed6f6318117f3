// Launcher of the wgmma main decode kernel (decode_wgmma_kernel.cuh, "v4" and
// its versions). It runs on the same schedule, params and workspace as the
// mma.sync kernel (grid (p.num_workers, row_blocks) with row_blocks =
// ceil(rows / 64)).
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/decode/decode_traits.hpp"

namespace mla::cuda::decode {

inline constexpr int kWgmmaRows = 64;  // query rows per CTA of the wgmma kernel
size_t wgmma_kernel_smem_bytes();

// Versions of the wgmma kernel (docs/perf-log.md): v4; v6 = v4 whose fp8
// producer keeps the next tile's loads in flight (bf16: v4); v7 = v6 whose
// S splits the 576 dims between the math warpgroups (bf16; fp8: v6). The *_stamps
// forms (bf16 only; builds with MLA_DECODE_STAMPS) print per-phase cycles.
// v7b: v7 that skips the O rescale where no row max of a warp moved.
// v8 / v8b: v6 / v7b whose bf16 producer loads whole tiles by TMA through
// kv_map (tma_map.hpp; nullptr, e.g. page_size % 64 != 0: their cp.async twins).
// v9: the math warpgroups take alternate tiles for S (decode_pair_kernel.cuh),
// bf16 with kv_map only; otherwise (fp8, no map) it runs v8's kernel.
// v9b: v9 whose warpgroup 0 runs its own P.V before tile b's max is known
// (chained max, P_a and O rescaled after). v9_stamps / v9b_stamps: printing
// their phase cycles (every build; no map: not supported).
enum class WgmmaVersion {
  v4,
  v6,
  v7,
  v7b,
  v8,
  v8b,
  v9,
  v9b,
  v9_stamps,
  v9b_stamps,
  v4_stamps,
  v7_stamps,
  v7b_stamps,
  v8_stamps,
  v8b_stamps
};
cudaError_t launch_decode_main_wgmma(const DecodeParams& p, bool fp8, int row_blocks,
                                     cudaStream_t stream, WgmmaVersion version,
                                     const CUtensorMap* kv_map);
// The v9 kernel (bf16 cache, tiles by TMA through kv_map): decode_pair.cu.
cudaError_t launch_decode_main_pair(const DecodeParams& p, int row_blocks, cudaStream_t stream,
                                    const CUtensorMap& kv_map, bool chained, bool stamps);
// The same kernel with the Indexed key source (sparse decode): p carries
// tokens_per_batch > 0, indices, num_slots and token_len (decode_traits.hpp).
// fp8_prefetch (fp8 caches only): v6's producer; false: v4's.
cudaError_t launch_decode_main_wgmma_indexed(const DecodeParams& p, bool fp8, int row_blocks,
                                             cudaStream_t stream, bool fp8_prefetch);

}  // namespace mla::cuda::decode
