// Host side of the mma_sync sparse attention kernel (sparse_mma_kernel.cuh):
// the split of each index list over CTAs, the launch, and the combine of the
// split lists' partials.
#include <cuda_bf16.h>

#include <cmath>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/ptx.cuh"
#include "cuda/sparse/sparse_mma_config.hpp"
#include "cuda/sparse/sparse_mma_launch.hpp"

namespace mla::cuda::sparse {
namespace {

using ptx::pack_bf16x2;

__global__ void sparse_mma_combine_kernel(SparseAttnParams p, int splits, int rows,
                                          const float* part_o, const float* part_lse) {
  const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= int64_t(rows) * p.h_q) return;
  const int row = int(w / p.h_q), h = int(w % p.h_q);
  const int b = row / p.s_q, qi = row % p.s_q;
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, part_lse[(int64_t(s) * rows + row) * p.h_q + h]);
  float acc[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) acc[i] = 0.f;
  float wsum = 0.f;
  for (int s = 0; s < splits; ++s) {
    const int64_t prow = (int64_t(s) * rows + row) * p.h_q + h;
    const float l = part_lse[prow];
    if (l == -INFINITY) continue;
    const float wt = __expf(l - m);
    wsum += wt;
    const float* src = part_o + prow * kDv;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 v = reinterpret_cast<const float4*>(src)[i * 32 + lane];
      acc[4 * i] += wt * v.x, acc[4 * i + 1] += wt * v.y, acc[4 * i + 2] += wt * v.z,
          acc[4 * i + 3] += wt * v.w;
    }
  }
  const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
  __nv_bfloat16* out =
      static_cast<__nv_bfloat16*>(p.out) + b * p.out_sb + qi * p.out_ss + int64_t(h) * p.out_sh;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = (i * 32 + lane) * 4;
    reinterpret_cast<uint32_t*>(out + c)[0] = pack_bf16x2(acc[4 * i] * inv, acc[4 * i + 1] * inv);
    reinterpret_cast<uint32_t*>(out + c)[1] =
        pack_bf16x2(acc[4 * i + 2] * inv, acc[4 * i + 3] * inv);
  }
  if (lane == 0)
    p.lse[b * p.lse_sb + int64_t(h) * p.lse_sh + qi * p.lse_ss] =
        wsum > 0.f ? m + logf(wsum) : -INFINITY;
}

// How many CTAs split each row's list: enough CTAs for one wave at least, and
// at least 4 tiles per split.
int choose_splits(const SparseAttnParams& p) {
  const int hb = mma::head_block(p.h_q);
  if (hb == 0) return 1;
  const int64_t ctas = int64_t(p.batch) * p.s_q * (p.h_q / hb);
  const int tiles = (p.topk + mma::tile_keys(hb) - 1) / mma::tile_keys(hb);
  int splits = 1;
  while (ctas * splits < current_sm_count() && tiles / (splits * 2) >= 4) splits *= 2;
  return splits;
}

}  // namespace

size_t sparse_mma_workspace_size(const SparseAttnParams& p) {
  const int splits = choose_splits(p);
  if (splits == 1) return 0;
  return size_t(splits) * p.batch * p.s_q * p.h_q * (kDv + 1) * sizeof(float);
}

Status launch_sparse_mma(const SparseAttnParams& p, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream) {
  const int hb = mma::head_block(p.h_q);
  if (hb == 0)
    return value_error(Errc::invalid_value, "sparse attention: h_q", p.h_q,
                       "is not a multiple of 16");
  if (int64_t(p.batch) * p.s_q == 0 || p.h_q == 0) return Status::Ok();
  if (int64_t(p.batch) * p.s_q > 65535)
    return value_error(Errc::invalid_value, "sparse attention: B * s_q", int64_t(p.batch) * p.s_q,
                       "exceeds 65535");
  int splits = choose_splits(p);
  if (splits > 1 && (workspace == nullptr || workspace_bytes < sparse_mma_workspace_size(p)))
    splits = 1;
  float* part_o = nullptr;
  float* part_lse = nullptr;
  const int rows = p.batch * p.s_q;
  if (splits > 1) {
    part_o = static_cast<float*>(workspace);
    part_lse = part_o + size_t(splits) * rows * p.h_q * kDv;
  }
  const Status launched = [&]() -> Status {
    switch (hb * 2 + (p.fp8 ? 1 : 0)) {
      case 128: return mma::launch_kernel<64, false>(p, splits, part_o, part_lse, stream);
      case 129: return mma::launch_kernel<64, true>(p, splits, part_o, part_lse, stream);
      case 64: return mma::launch_kernel<32, false>(p, splits, part_o, part_lse, stream);
      case 65: return mma::launch_kernel<32, true>(p, splits, part_o, part_lse, stream);
      case 32: return mma::launch_kernel<16, false>(p, splits, part_o, part_lse, stream);
      default: return mma::launch_kernel<16, true>(p, splits, part_o, part_lse, stream);
    }
  }();
  MLA_TRY(launched);
  if (splits > 1) {
    const int64_t warps = int64_t(rows) * p.h_q;
    sparse_mma_combine_kernel<<<unsigned((warps * 32 + 255) / 256), 256, 0, stream>>>(
        p, splits, rows, part_o, part_lse);
    MLA_TRY(check_launch("sparse_mma_combine_kernel"));
  }
  return Status::Ok();
}

}  // namespace mla::cuda::sparse
