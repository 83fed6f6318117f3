// Lightning-indexer logits, prefill form: the launch of Kernel::flat_tma_wgmma
// (the kernel with the logits sink, indexer_prefill_wgmma_kernel.cuh, which
// describes it) and the TMA maps that the fused select's launch shares.
#include <cuda.h>

#include "cuda/indexer/indexer_prefill_wgmma_kernel.cuh"

namespace mla::cuda::indexer {
namespace prefill_wgmma {

Status prefill_tma_maps(const IndexerLogitsParams& p, CUtensorMap* q_map, CUtensorMap* k_map) {
  if (p.num_keys > INT32_MAX || p.num_tokens > INT32_MAX)
    return value_error(Errc::unsupported, "indexer logits prefill (TMA): keys", p.num_keys,
                       "or the tokens are past 2^31 (TMA coordinates are 32-bit)");
  if (reinterpret_cast<uintptr_t>(p.q) % 16 != 0 || p.q_stride % 16 != 0 ||
      (p.num_keys > 0 && reinterpret_cast<uintptr_t>(p.flat_keys) % 16 != 0))
    return value_error(Errc::misaligned, "indexer logits prefill (TMA): q token stride (bytes)",
                       p.q_stride, "or the q / keys base is not a multiple of 16");
  // The queries as [T][64 heads][128 bytes] (a token per box) and the keys as
  // [1][N][128 bytes] (64 keys per box, rows past N read as zeros). With no
  // keys every CTA writes only -inf and reads no map.
  *q_map = {}, *k_map = {};
  {
    const int64_t dims[3] = {kIndexerDim, kIndexerHeads, p.num_tokens};
    const int64_t strides[2] = {kIndexerDim, p.q_stride};
    const uint32_t box[3] = {kIndexerDim, kIndexerHeads, 1};
    if (!encode_u8_3d_map(q_map, p.q, dims, strides, box))
      return value_error(Errc::unsupported,
                         "indexer logits prefill (TMA): no TMA map for q; its token stride",
                         p.q_stride, "bytes");
  }
  if (p.num_keys > 0) {
    const int64_t dims[3] = {kIndexerDim, p.num_keys, 1};
    const int64_t strides[2] = {kIndexerDim, p.num_keys * kIndexerDim};
    const uint32_t box[3] = {kIndexerDim, kTileKeys, 1};
    if (!encode_u8_3d_map(k_map, p.flat_keys, dims, strides, box))
      return value_error(Errc::unsupported, "indexer logits prefill (TMA): no TMA map for keys",
                         p.num_keys, "keys");
  }
  return Status::Ok();
}

}  // namespace prefill_wgmma

using namespace prefill_wgmma;

Status launch_indexer_logits_flat_wgmma(const IndexerLogitsParams& p, cudaStream_t stream,
                                        const LogitsOptions& opt) {
  if (p.num_tokens == 0 || p.width == 0) return Status::Ok();
  prefill_wgmma::Grid grid;
  MLA_TRY(grid_for(p, opt.keys_per_cta, &grid));
  return launch_with_sink<LogitsSink>(p, grid, LogitsSink::Args{}, stream,
                                      "indexer_prefill_wgmma_kernel");
}

}  // namespace mla::cuda::indexer
