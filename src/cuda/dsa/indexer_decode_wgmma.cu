// Lightning-indexer logits, decode form, on Hopper's FP8 warpgroup MMA (wgmma
// m64n64k32 e4m3 -> f32, both operands in shared memory).
//
// One CTA = one warpgroup (128 threads) owns request b and a run of pages of its
// paged indexer cache. A page (64 keys: 64 x 128 e4m3 codes, then 64 fp32
// scales; 8448 contiguous bytes) is one pipeline stage, copied with 16-byte
// cp.async into a 128-byte-swizzled tile, several pages in flight. Per page and
// query token: D[64 heads x 64 keys] = q8[64 x 128] . K[64 x 128]^T, four k32
// steps. So each key is read from memory once per request, and the s_q queries
// of a request only add MMAs on data already in shared memory.
//
// Epilogue (why it is cheap): the m64n64 accumulator gives thread (warp w, g, t)
// heads 16w + g and 16w + g + 8 of columns 8j + 2t (+1), j = 0..7. ReLU and the
// head weight turn those 32 values into 16 per-column partial sums; a
// reduce-scatter over the 8 lanes that share t (3 shuffle levels, halving the
// values each time) leaves lane g with columns 8g + 2t, +1 summed over its
// warp's 16 heads; the 4 warps meet in shared memory, and 64 threads per query
// apply the key scale and the query's key range and store 64 contiguous logits.
//
// Keys of the last page past the request's length are loaded (they are inside
// the page) but masked to -inf before anything reads their values; invalid page
// ids are zero-filled and never read (as the mma.sync kernel does).
#include <algorithm>
#include <cmath>

#include "cuda/common/wgmma.cuh"
#include "cuda/dsa/indexer_decode_common.cuh"

namespace mla::cuda::dsa {
namespace {

using namespace indexer_decode;
constexpr int kStages = 4;  // 3 pages in flight per CTA

// One level of the reduce-scatter below: lanes whose `kMask` bit is set keep
// the upper kHalf values, the others the lower, each adding its partner's.
template <int kMask, int kHalf>
__device__ __forceinline__ void reduce_scatter_level(float (&v)[16], int lane) {
  const bool upper = (lane & kMask) != 0;
#pragma unroll
  for (int i = 0; i < kHalf; ++i) {
    const float keep = upper ? v[i + kHalf] : v[i];
    const float send = upper ? v[i] : v[i + kHalf];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, kMask);
  }
}
// Reduce-scatter of v[16] (index 2j + e) over the 8 lanes sharing lane % 4
// (lane bits 4, 3, 2 = g bits 2, 1, 0): afterwards v[0], v[1] of lane (g, t)
// hold index 2g, 2g + 1 summed over the 8 lanes.
__device__ __forceinline__ void reduce_scatter_g(float (&v)[16], int lane) {
  reduce_scatter_level<16, 8>(v, lane);
  reduce_scatter_level<8, 4>(v, lane);
  reduce_scatter_level<4, 2>(v, lane);
}

template <int kQ>
struct DecodeSmem {
  static constexpr int kQueryOff = 0;                                // kQ x 8192, swizzled
  static constexpr int kStageOff = kQ * kQueryBytes;                 // kStages x 9216
  static constexpr int kRedOff = kStageOff + kStages * kStageBytes;  // [kQ][4 warps][64] f32
  static constexpr int kBytes = kRedOff + kQ * 4 * kPageKeys * 4;
  static constexpr int kAlloc = kBytes + 1024;  // room to align the base to 1024
};

template <int kQ>
__global__ void __launch_bounds__(kThreads)
    indexer_decode_wgmma_kernel(IndexerLogitsParams p, int pages_per_cta) {
  using S = DecodeSmem<kQ>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint8_t* sq = smem + S::kQueryOff;
  uint8_t* stages = smem + S::kStageOff;
  float* red = reinterpret_cast<float*>(smem + S::kRedOff);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const DecodeRun<kQ> run(p, pages_per_cta, tid);  // also fills the columns without keys
  const int64_t len = run.len, pg0 = run.pg0, c1 = run.c1, tok0 = run.tok0, tail = run.tail;
  const int nload = run.nload;
  if (nload == 0) return;

  // Queries into shared memory (swizzled; they join the first page's copy group).
  for (int c = tid; c < kQ * (kQueryBytes / 16); c += kThreads) {
    const int q = c / (kQueryBytes / 16), row = (c / 8) % kIndexerHeads, part = c % 8;
    cp_async_16(sq + q * kQueryBytes + sw128(row, part),
                p.q + (tok0 + q) * p.q_stride + row * kIndexerDim + part * 16, true);
  }
  float wa[kQ], wb[kQ];  // this thread's heads 16 * warp + g and + 8
#pragma unroll
  for (int q = 0; q < kQ; ++q) {
    wa[q] = p.w[(tok0 + q) * p.w_stride + 16 * warp + g];
    wb[q] = p.w[(tok0 + q) * p.w_stride + 16 * warp + g + 8];
  }

  const int32_t* bt_row = run.bt_row;
  auto load_page = [&](int i) {
    if (i < nload) {
      const int64_t page = bt_row[i];
      const bool ok = page >= 0 && page < p.cache.num_pages;
      const uint8_t* src = p.cache.base + (ok ? page : 0) * p.cache.page_stride;
      uint8_t* st = stages + (i % kStages) * kStageBytes;
      for (int c = tid; c < kPageChunks; c += kThreads) {
        const int off = c < kCodeBytes / 16 ? sw128(c / 8, c % 8) : c * 16;
        cp_async_16(st + off, ok ? src + c * 16 : p.q, ok);
      }
    }
    cp_async_commit();  // an empty group keeps the wait counts uniform
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) load_page(s);

  const uint32_t sq_addr = smem_addr(sq);
  float acc[kQ][8][4];
#pragma unroll
  for (int q = 0; q < kQ; ++q)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[q][j][e] = 0.f;

  for (int it = 0; it < nload; ++it) {
    cp_async_wait<kStages - 2>();
    wgmma::fence_proxy_async();  // this thread's copies -> the tensor cores' reads
    __syncthreads();
    load_page(it + kStages - 1);  // into the stage every thread finished with
    if (p.timing_variant == 1) continue;
    const uint8_t* st = stages + (it % kStages) * kStageBytes;
    const uint32_t st_addr = smem_addr(st);

    wgmma::fence();
#pragma unroll
    for (int q = 0; q < kQ; ++q)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma::m64n64k32_e4m3_ss(acc[q],
                                 wgmma::desc_sw128(sq_addr + q * kQueryBytes + kk * 32, 16, 1024),
                                 wgmma::desc_sw128(st_addr + kk * 32, 16, 1024), kk > 0);
    wgmma::commit();
    wgmma::wait<0>();
#pragma unroll
    for (int q = 0; q < kQ; ++q) wgmma::fence_regs(acc[q]);
    if (p.timing_variant == 2) continue;

#pragma unroll
    for (int q = 0; q < kQ; ++q) {
      float v[16];
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          v[2 * j + e] = fmaxf(acc[q][j][e], 0.f) * wa[q] + fmaxf(acc[q][j][2 + e], 0.f) * wb[q];
      reduce_scatter_g(v, lane);
      *reinterpret_cast<float2*>(red + (q * 4 + warp) * kPageKeys + 8 * g + 2 * t) =
          make_float2(v[0], v[1]);
    }
    __syncthreads();

    const int64_t key0 = (pg0 + it) * kPageKeys;
    const float* scales = reinterpret_cast<const float*>(st + kCodeBytes);
#pragma unroll
    for (int idx = tid; idx < kQ * kPageKeys; idx += kThreads) {
      const int q = idx / kPageKeys, col = idx % kPageKeys;
      const int64_t pos = key0 + col;
      if (pos < c1) {
        const int64_t hi = len - tail - (kQ - 1 - q);  // query q sees keys [0, hi)
        float r = -INFINITY;
        if (pos < hi) {
          const float* rq = red + q * 4 * kPageKeys + col;
          r = ((rq[0] + rq[kPageKeys]) + (rq[2 * kPageKeys] + rq[3 * kPageKeys])) * scales[col];
        }
        p.logits[(tok0 + q) * p.logits_stride + pos] = r;
      }
    }
  }
  cp_async_wait<0>();
}

template <int kQ>
Status launch_q(const IndexerLogitsParams& p, cudaStream_t stream) {
  if (p.batch == 0 || p.width == 0) return Status::Ok();
  DecodeGrid grid;
  MLA_TRY(decode_grid(p, &grid));
  auto kernel = indexer_decode_wgmma_kernel<kQ>;
  constexpr int smem = DecodeSmem<kQ>::kAlloc;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  MLA_TRY(cuda_status(attr, "cudaFuncSetAttribute(indexer_decode_wgmma_kernel)"));
  kernel<<<dim3(unsigned(grid.splits), unsigned(p.batch), 1u), kThreads, smem, stream>>>(
      p, grid.pages_per_cta);
  return launch_status("indexer_decode_wgmma_kernel");
}

}  // namespace

Status launch_indexer_logits_decode_wgmma(const IndexerLogitsParams& p, cudaStream_t stream) {
  if (indexer_decode_v2_chosen(p)) {
    bool taken = false;
    MLA_TRY(launch_indexer_logits_decode_tma(p, stream, &taken));
    if (taken) return Status::Ok();  // else no TMA map for this cache: v1 below
  }
  return for_each_token_chunk(p, [&](const IndexerLogitsParams& c) {
    switch (c.s_q) {
      case 1: return launch_q<1>(c, stream);
      case 2: return launch_q<2>(c, stream);
      case 3: return launch_q<3>(c, stream);
      default: return launch_q<4>(c, stream);
    }
  });
}

}  // namespace mla::cuda::dsa
