// Lightning-indexer logits, prefill form (flat keys, a key range per query):
// Kernel::flat_mma_sync, on FP8 tensor cores (mma.sync m16n8k32 e4m3, f32
// accumulation).
//
// A CTA owns a group of up to kQ queries and a chunk of key columns. It streams
// the chunk in tiles of 64 keys (8448 B: codes + scales) through a 3-stage
// cp.async pipeline, so each key is read from memory once per group. Warp w works on query w / 4
// and keys 16*(w % 4) .. +15 of the tile, with that query's 64x128 e4m3 q held in registers as the
// mma B operand. Per (key, head) the 128-dim dot product is one chain of 4 mma k-steps; ReLU, the
// head weight and the sum over heads follow in registers, and the sum over the 4 lanes of a quad
// finishes the head reduction.
//
// Dimension order inside a k-step: the mma multiplies logical k slots; we map
// thread t's slots of k-step kk to the physical dims t*32 + kk*8 + [0, 8), the
// same map for A (keys) and B (queries), so each lane reads 32 contiguous bytes
// per key row (two 16-byte shared loads) instead of 4-byte pieces. Rows are
// 128 B apart (all in the same banks); lanes of odd g load their two halves in
// the opposite order, which makes every 8-lane phase conflict-free.
#include <algorithm>
#include <cmath>

#include "cuda/indexer/indexer_device.cuh"
#include "cuda/indexer/indexer_params.hpp"

namespace mla::cuda::indexer {
namespace {

constexpr int kTile = 64;  // keys per pipeline stage
constexpr int kStages = 3;
constexpr int kTileCodeBytes = kTile * kIndexerDim;      // 8192
constexpr int kStageBytes = kTileCodeBytes + kTile * 4;  // + 64 fp32 scales
static_assert(kIndexerHeads == 64 && kIndexerDim == 128,
              "the warp layout assumes 64 heads (8 n-tiles) of 128 dims (4 k-steps of 32)");

struct QueryRange {
  int64_t lo, hi;  // keys [lo, hi) are seen; hi <= lo means none
};

// Where key `pos` is: its 128 codes and its scale.
__device__ __forceinline__ bool locate_key(const IndexerLogitsParams& p, int64_t pos,
                                           const uint8_t** codes, const float** scale) {
  *codes = p.flat_keys + pos * kIndexerDim;
  *scale = p.flat_scales + pos;
  return true;
}

template <int kQ>
__global__ void __launch_bounds__(kQ * 128)
    indexer_prefill_kernel(IndexerLogitsParams p, int64_t chunk) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kThreads = kQ * 128;
  const int grp = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int qi = warp / 4, mt = warp % 4;

  // ---- the group's queries and their key ranges ----
  const int64_t tok0 = int64_t(grp) * kQ;
  const int nq = int(p.num_tokens - tok0 < kQ ? p.num_tokens - tok0 : kQ);
  auto range_of = [&](int i) -> QueryRange { return {p.ks[tok0 + i], p.ke[tok0 + i]}; };
  int64_t glo = INT64_MAX, ghi = INT64_MIN;  // union of the group's ranges: keys to load
  for (int i = 0; i < nq; ++i) {
    const QueryRange r = range_of(i);
    if (r.hi > r.lo) glo = min(glo, r.lo), ghi = max(ghi, r.hi);
  }
  const bool q_active = qi < nq;
  const QueryRange my = q_active ? range_of(qi) : QueryRange{0, 0};
  const int64_t tok = tok0 + qi;

  const int64_t c0 = int64_t(blockIdx.y) * chunk;
  const int64_t c1 = min(p.width, c0 + chunk);
  if (c0 >= c1) return;
  const int num_tiles = int((c1 - c0 + kTile - 1) / kTile);
  auto tile_has_keys = [&](int it) {
    const int64_t b = c0 + int64_t(it) * kTile;
    return b < ghi && b + kTile > glo;
  };

  // ---- q fragments (mma B operand) and head weights, in registers ----
  uint32_t bq[8][4][2];
  float w0[8], w1[8];
  if (q_active) {
    const uint8_t* qrow = p.q + tok * p.q_stride;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const uint4* src = reinterpret_cast<const uint4*>(qrow + (nt * 8 + g) * kIndexerDim + t * 32);
      const uint4 x = src[0], y = src[1];
      const uint32_t wd[8] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) bq[nt][kk][0] = wd[2 * kk], bq[nt][kk][1] = wd[2 * kk + 1];
      w0[nt] = p.w[tok * p.w_stride + nt * 8 + 2 * t];
      w1[nt] = p.w[tok * p.w_stride + nt * 8 + 2 * t + 1];
    }
  }

  // ---- pipeline: load tile `it` into stage it % kStages ----
  auto load_tile = [&](int it) {
    if (it < num_tiles && tile_has_keys(it)) {
      uint8_t* st = smem + (it % kStages) * kStageBytes;
      const int64_t base = c0 + int64_t(it) * kTile;
      for (int c = threadIdx.x; c < kTile * 8; c += kThreads) {
        const int row = c / 8, part = c % 8;
        const int64_t pos = base + row;
        // Keys outside the group's ranges are zero-filled, never read.
        const uint8_t* codes = nullptr;
        const float* scale = nullptr;
        bool ok = pos >= glo && pos < ghi && locate_key(p, pos, &codes, &scale);
        cp_async_16(st + row * kIndexerDim + part * 16, ok ? codes + part * 16 : p.q, ok);
        if (part == 0)
          cp_async_4(st + kTileCodeBytes + row * 4, ok ? static_cast<const void*>(scale) : p.q, ok);
      }
    }
    cp_async_commit();  // an empty group keeps the wait counts uniform
  };

  ptx::noclobber::pipeline_prime<kStages>(load_tile);
  for (int it = 0; it < num_tiles; ++it) {
    ptx::noclobber::pipeline_step<kStages>(it, load_tile);
    if (!q_active) continue;
    const int64_t base = c0 + int64_t(it) * kTile;
    const int64_t pos_a = base + mt * 16 + g + (t & 1) * 8;  // the key this lane writes (t < 2)
    float result = -INFINITY;
    if (tile_has_keys(it) && base < my.hi && base + kTile > my.lo) {
      const uint8_t* st = smem + (it % kStages) * kStageBytes;
      const uint8_t* r0 = st + (mt * 16 + g) * kIndexerDim + t * 32;
      const uint8_t* r1 = r0 + 8 * kIndexerDim;
      const int first = g & 1;  // bank-conflict-free order (see the file comment)
      uint4 x0 = *reinterpret_cast<const uint4*>(r0 + first * 16);
      uint4 y0 = *reinterpret_cast<const uint4*>(r0 + (first ^ 1) * 16);
      uint4 x1 = *reinterpret_cast<const uint4*>(r1 + first * 16);
      uint4 y1 = *reinterpret_cast<const uint4*>(r1 + (first ^ 1) * 16);
      if (first) {
        const uint4 tmp0 = x0;
        x0 = y0;
        y0 = tmp0;
        const uint4 tmp1 = x1;
        x1 = y1;
        y1 = tmp1;
      }
      const uint32_t ra[8] = {x0.x, x0.y, x0.z, x0.w, y0.x, y0.y, y0.z, y0.w};
      const uint32_t rb[8] = {x1.x, x1.y, x1.z, x1.w, y1.x, y1.y, y1.z, y1.w};
      float s_lo = 0.f, s_hi = 0.f;  // keys g and g + 8
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const uint32_t a[4] = {ra[2 * kk], rb[2 * kk], ra[2 * kk + 1], rb[2 * kk + 1]};
          mma_e4m3_16832(c, a, bq[nt][kk][0], bq[nt][kk][1]);
        }
        s_lo += fmaxf(c[0], 0.f) * w0[nt] + fmaxf(c[1], 0.f) * w1[nt];
        s_hi += fmaxf(c[2], 0.f) * w0[nt] + fmaxf(c[3], 0.f) * w1[nt];
      }
      s_lo += __shfl_xor_sync(0xffffffffu, s_lo, 1);
      s_lo += __shfl_xor_sync(0xffffffffu, s_lo, 2);
      s_hi += __shfl_xor_sync(0xffffffffu, s_hi, 1);
      s_hi += __shfl_xor_sync(0xffffffffu, s_hi, 2);
      const float* scales = reinterpret_cast<const float*>(st + kTileCodeBytes);
      const int row = mt * 16 + g + (t & 1) * 8;
      if (pos_a >= my.lo && pos_a < my.hi) result = ((t & 1) ? s_hi : s_lo) * scales[row];
    }
    if (t < 2 && pos_a < c1) p.logits[tok * p.logits_stride + pos_a] = result;
  }
  cp_async_wait<0>();
}

template <int kQ>
Status launch(const IndexerLogitsParams& p, int groups, cudaStream_t stream) {
  if (groups == 0 || p.width == 0) return Status::Ok();
  // Enough CTAs for several waves; each chunk a multiple of the tile.
  const int64_t want_ctas = int64_t(current_sm_count()) * 8;
  int64_t splits = std::max<int64_t>(1, (want_ctas + groups - 1) / groups);
  int64_t chunk = (p.width + splits - 1) / splits;
  chunk = std::max<int64_t>(kTile * 4, (chunk + kTile - 1) / kTile * kTile);
  splits = (p.width + chunk - 1) / chunk;
  if (splits > 65535)
    return value_error(Errc::invalid_value, "indexer logits: width", p.width,
                       "needs more than 65535 chunks");
  const size_t smem = size_t(kStages) * kStageBytes;
  const dim3 grid{unsigned(groups), unsigned(splits), 1u};
  indexer_prefill_kernel<kQ><<<grid, kQ * 128, smem, stream>>>(p, chunk);
  return check_launch("indexer_prefill_kernel");
}

}  // namespace

Status launch_indexer_logits_flat(const IndexerLogitsParams& p, cudaStream_t stream) {
  constexpr int kGroup = 4;
  return launch<kGroup>(p, int((p.num_tokens + kGroup - 1) / kGroup), stream);
}

}  // namespace mla::cuda::indexer
