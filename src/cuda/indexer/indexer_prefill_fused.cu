// The fused prefill select's device pieces (indexer_select.hpp): the indexer
// kernel with the candidate sink (indexer_prefill_candidates.cuh), the gather
// from buffer index to position, and the row copies of the unfused fallback.
#include <cuda.h>

#include "cuda/indexer/indexer_prefill_candidates.cuh"
#include "cuda/indexer/indexer_select.hpp"

namespace mla::cuda::indexer {
namespace {

__global__ void gather_positions_kernel(int32_t* out, int64_t out_stride, int64_t rows, int k,
                                        const int32_t* pos, int64_t cap) {
  const int64_t n = rows * k;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / k;
    int32_t* o = out + r * out_stride + i % k;
    const int32_t j = *o;
    if (j >= 0) *o = pos[r * cap + j];
  }
}

__global__ void copy_rows_kernel(uint8_t* dst, int64_t dst_stride, const uint8_t* src,
                                 int64_t src_stride, int64_t words, const int32_t* list, int64_t n,
                                 bool scatter) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t d = scatter ? list[i] : i, s = scatter ? i : list[i];
    auto* to = reinterpret_cast<uint32_t*>(dst + d * dst_stride);
    const auto* from = reinterpret_cast<const uint32_t*>(src + s * src_stride);
    for (int64_t w = threadIdx.x; w < words; w += blockDim.x) to[w] = from[w];
  }
}

}  // namespace

using namespace prefill_wgmma;

Status launch_prefill_candidates(const IndexerLogitsParams& p, const CandidateArgs& a,
                                 cudaStream_t stream) {
  MLA_CUDA_TRY(cudaMemsetAsync(a.over_n, 0, sizeof(int32_t), stream), "cudaMemsetAsync(over_n)");
  if (p.num_tokens == 0) return Status::Ok();
  if (p.width != p.num_keys)
    return value_error(Errc::invalid_value, "prefill select: width", p.width,
                       "must be the number of keys");
  Grid grid;
  MLA_TRY(grid_for(p, std::max<int64_t>(p.width, kTileKeys), &grid));
  grid.splits = 1;  // one CTA per token block over all of its keys, in order (also at width 0)
  return launch_with_sink<CandidateSink>(p, grid, a, stream,
                                         "indexer_prefill_wgmma_kernel<CandidateSink>");
}

Status launch_gather_positions(int32_t* out, int64_t out_stride, int64_t rows, int k,
                               const int32_t* pos, int64_t cap, cudaStream_t stream) {
  if (rows == 0) return Status::Ok();
  const int64_t blocks = std::min<int64_t>((rows * k + 255) / 256, 8192);
  gather_positions_kernel<<<unsigned(blocks), 256, 0, stream>>>(out, out_stride, rows, k, pos, cap);
  return check_launch("gather_positions_kernel");
}

Status launch_copy_rows(void* dst, int64_t dst_stride, const void* src, int64_t src_stride,
                        int64_t row_bytes, const int32_t* list, int64_t n, bool scatter,
                        cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  if (row_bytes % 4 || dst_stride % 4 || src_stride % 4)
    return value_error(Errc::misaligned, "prefill select: row copy of", row_bytes,
                       "bytes needs rows and strides in whole 4-byte words");
  copy_rows_kernel<<<unsigned(std::min<int64_t>(n, 65535)), 256, 0, stream>>>(
      static_cast<uint8_t*>(dst), dst_stride, static_cast<const uint8_t*>(src), src_stride,
      row_bytes / 4, list, n, scatter);
  return check_launch("copy_rows_kernel");
}

}  // namespace mla::cuda::indexer
