// Lightning-indexer logits, decode form (paged cache): Kernel::paged_tma_wgmma.
//
// A CTA (one warpgroup) owns request blockIdx.y and a run of its pages
// (indexer_decode_config.cuh), so each key is read from memory once per
// request and the request's s_q queries only add MMAs on data already in
// shared memory.
//
// Copies: thread 0 issues each page as one TMA box (the 64 x 128 e4m3 codes,
// 128-byte swizzle: the SW128 tile the wgmma descriptors read) plus one bulk
// copy of the 64 scales, completing on the stage's mbarrier; a ring of
// kStages pages, all of them in flight while a page's epilogue runs. A stage
// is refilled (page it + kStages) right after the barrier that follows the
// last read of page it (its wgmma and its scales), before the epilogue.
//
// Math: D[64 keys x 64 heads] = K[64 x 128] . q8[64 x 128]^T (keys as the A
// operand, the query as B; both K-major SW128 in shared memory), so thread
// (warp w, g, t) holds keys 16w + g and 16w + g + 8 of heads 8j + 2t, +1. The
// weighted ReLU sum over heads is 16 products per key in registers and two
// shuffles over the 4 lanes of a quad; lanes t = 0 and 1 apply the key scale
// and the causal limit and store. No shared-memory reduction, one barrier per
// page.
//
// Page ids outside the cache are never read: thread 0 zero-fills the stage
// with ordinary stores (then a proxy fence: the tensor cores read it) and
// arrives without transaction bytes; the zero keys and scales give logit 0.
#include <cuda.h>

#include <climits>

#include "cuda/common/mbarrier.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/tma_map.hpp"
#include "cuda/common/wgmma.cuh"
#include "cuda/indexer/indexer_decode_config.cuh"

namespace mla::cuda::indexer {
namespace {

using namespace decode;
using ptx::cp_async_bulk_g2s;
using ptx::mbar_arrive;
using ptx::mbar_arrive_expect_tx;
using ptx::mbar_fence_init;
using ptx::mbar_init;
using ptx::mbar_wait;
using ptx::tma_load_3d;

// Ring depth: 5 at s_q 1 and 4 above keep 4 CTAs on an SM (228 KB) for
// s_q <= 2; s_q 3 and 4 fit 3.
template <int kQ>
constexpr int kStagesFor = kQ == 1 ? 5 : 4;

// Shared memory of one CTA: kQ queries (SW128), the ring of kStages pages, the
// weights of the kQ queries, the ring's mbarriers.
template <int kQ>
struct TmaSmem {
  static constexpr int kStages = kStagesFor<kQ>;
  static constexpr int kQueryOff = 0;
  static constexpr int kStageOff = kQ * kQueryBytes;
  static constexpr int kWeightOff = kStageOff + kStages * kStageBytes;  // [kQ][64] f32
  static constexpr int kBarOff = kWeightOff + kQ * kIndexerHeads * 4;
  static constexpr int kBytes = kBarOff + kStages * 8;
  static constexpr int kAlloc = kBytes + 1024;  // room to align the base to 1024
  static_assert(kStageOff % 1024 == 0, "TMA's 128-byte swizzle needs 1024-byte aligned stages");
  static_assert(kBarOff % 8 == 0, "mbarriers are 8-byte aligned");
  static_assert(kQ > 2 || 4 * (kAlloc + 1024) <= 228 * 1024,
                "s_q 1 and 2 keep 4 CTAs per SM (1 KB reserved per CTA)");
  static_assert(kStages >= 2, "a page in flight while one is computed");
};

template <int kQ>
__global__ void __launch_bounds__(kThreads)
    indexer_decode_kernel(const __grid_constant__ IndexerLogitsParams p,
                          const __grid_constant__ CUtensorMap keys_map, int pages_per_cta) {
  using S = TmaSmem<kQ>;
  constexpr int kSt = S::kStages;
  extern __shared__ uint8_t smem_raw[];
  const RingSmem sm = carve_ring_smem<S>(smem_raw);
  uint8_t* sq = sm.q;
  uint8_t* stages = sm.stages;
  float* sw = sm.w;
  uint64_t* full = sm.bars;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const DecodeRun<kQ> run(p, pages_per_cta, tid);  // also fills the columns without keys
  const int nload = run.nload;
  if (nload == 0) return;

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < kSt; ++s) mbar_init(&full[s], 1);
    mbar_fence_init();
  }
  // Queries (swizzled) by cp.async; the weights by plain stores.
  for (int c = tid; c < kQ * (kQueryBytes / 16); c += kThreads) {
    const int q = c / (kQueryBytes / 16), row = (c / 8) % kIndexerHeads, part = c % 8;
    cp_async_16(sq + q * kQueryBytes + sw128(row, part),
                p.q + (run.tok0 + q) * p.q_stride + row * kIndexerDim + part * 16, true);
  }
  cp_async_commit();
  for (int i = tid; i < kQ * kIndexerHeads; i += kThreads)
    sw[i] = p.w[(run.tok0 + i / kIndexerHeads) * p.w_stride + i % kIndexerHeads];

  // Page i of the run (cache page `page`, read from the block table by the
  // caller ahead of time) into stage i % kSt; thread 0 only. One phase of the
  // stage's barrier per page: the expect_tx arrival (count 1) and 8448 bytes.
  auto issue = [&](int i, int64_t page) {
    uint8_t* st = stages + (i % kSt) * kStageBytes;
    uint64_t* bar = &full[i % kSt];
    if (page >= 0 && page < p.cache.num_pages) {
      mbar_arrive_expect_tx(bar, kPageBytes);
      tma_load_3d(st, &keys_map, 0, 0, int(page), bar);
      cp_async_bulk_g2s(st + kCodeBytes, p.cache.base + page * p.cache.page_stride + kCodeBytes,
                        kPageKeys * 4, bar);
    } else {
      for (int c = 0; c < kPageChunks; ++c)
        reinterpret_cast<uint4*>(st)[c] = make_uint4(0u, 0u, 0u, 0u);
      wgmma::fence_proxy_async();  // these stores -> the tensor cores' reads (and later TMA writes)
      mbar_arrive(bar);
    }
  };

  __syncthreads();  // the barriers are initialised before anyone waits on them
  if (tid == 0)
#pragma unroll 1
    for (int s = 0; s < min(kSt, nload); ++s) issue(s, run.bt_row[s]);
  cp_async_wait<0>();
  wgmma::fence_proxy_async();  // this thread's query copies -> the tensor cores' reads
  __syncthreads();             // every thread's queries and weights are in place

  const uint32_t sq_addr = smem_addr(sq);
  float acc[kQ][8][4];
#pragma unroll
  for (int q = 0; q < kQ; ++q)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[q][j][e] = 0.f;
#pragma unroll 1
  for (int it = 0; it < nload; ++it) {
    const int s = it % kSt;
    // Thread 0 refills this stage below: its page id is loaded now, so that
    // the load's latency passes under the wait and the MMAs.
    const bool refill = tid == 0 && it + kSt < nload;
    const int64_t next_page = refill ? run.bt_row[it + kSt] : 0;
    mbar_wait(&full[s], uint32_t(it / kSt) & 1u);
    const uint8_t* st = stages + s * kStageBytes;
    const uint32_t st_addr = smem_addr(st);

    wgmma::fence();
#pragma unroll
    for (int q = 0; q < kQ; ++q)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma::m64n64k32_e4m3_ss(acc[q], wgmma::desc_sw128(st_addr + kk * 32, 16, 1024),
                                 wgmma::desc_sw128(sq_addr + q * kQueryBytes + kk * 32, 16, 1024),
                                 kk > 0);
    wgmma::commit();
    wgmma::wait<0>();
#pragma unroll
    for (int q = 0; q < kQ; ++q) wgmma::fence_regs(acc[q]);
    const float* scales = reinterpret_cast<const float*>(st + kCodeBytes);
    const int key = 16 * warp + g + 8 * (t & 1);  // the key lanes t = 0, 1 store
    const float scale = scales[key];
    __syncthreads();  // every read of stage s is done (wgmma waited, scales loaded)
    if (refill) issue(it + kSt, next_page);

    const int64_t pos = (run.pg0 + it) * kPageKeys + key;
#pragma unroll
    for (int q = 0; q < kQ; ++q) {
      float s0 = 0.f, s1 = 0.f;  // keys 16w + g and + 8, heads 8j + 2t, +1
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 w = *reinterpret_cast<const float2*>(sw + q * kIndexerHeads + 8 * j + 2 * t);
        s0 += fmaxf(acc[q][j][0], 0.f) * w.x + fmaxf(acc[q][j][1], 0.f) * w.y;
        s1 += fmaxf(acc[q][j][2], 0.f) * w.x + fmaxf(acc[q][j][3], 0.f) * w.y;
      }
      s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
      s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
      s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
      s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
      // Keys past the query's limit (or the request's length, whose codes are
      // whatever the page holds) are -inf by selection, never by arithmetic.
      if (t < 2 && pos < run.c1)
        p.logits[(run.tok0 + q) * p.logits_stride + pos] =
            pos < run.key_end(q) ? (t == 0 ? s0 : s1) * scale : -INFINITY;
    }
  }
}

template <int kQ>
Status launch_q(const IndexerLogitsParams& p, const CUtensorMap& map, int pages_per_cta,
                cudaStream_t stream) {
  DecodeGrid grid;
  MLA_TRY(decode_grid(p, pages_per_cta, &grid));
  auto kernel = indexer_decode_kernel<kQ>;
  constexpr int smem = TmaSmem<kQ>::kAlloc;
  // The whole 228 KB as shared memory: 4 CTAs of ~55 KB per SM at s_q 1 and 2.
  static const cudaError_t attr = [&] {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                int(cudaSharedmemCarveoutMaxShared));
  }();
  MLA_TRY(cuda_status(attr, "cudaFuncSetAttribute(indexer_decode_kernel)"));
  kernel<<<dim3(unsigned(grid.splits), unsigned(p.batch), 1u), kThreads, smem, stream>>>(
      p, map, grid.pages_per_cta);
  return check_launch("indexer_decode_kernel");
}

}  // namespace

Status launch_indexer_logits_paged(const IndexerLogitsParams& p, cudaStream_t stream,
                                   const LogitsOptions& opt) {
  if (p.cache.page_size != kPageKeys)
    return value_error(Errc::unsupported, "indexer logits decode: page_size", p.cache.page_size,
                       "is not 64 (the indexer cache layout of mla/indexer.hpp)");
  if (p.s_q < 1)
    return value_error(Errc::invalid_value, "indexer logits decode: s_q", p.s_q, "is below 1");
  if (p.batch == 0 || p.width == 0) return Status::Ok();
  if (p.cache.page_stride % 16 != 0)
    return value_error(Errc::misaligned, "indexer logits decode: cache page stride (bytes)",
                       p.cache.page_stride, "is not a multiple of 16");
  // The cache as [num_pages][64 rows][128 bytes], read a page (64 x 128 box,
  // 128-byte swizzle) at a time. Page ids outside [0, num_pages) are never
  // issued, so a cache without pages needs no map (the kernel never reads it).
  CUtensorMap map{};
  if (p.cache.num_pages > 0) {
    const int64_t dims[3] = {kIndexerDim, kPageKeys, p.cache.num_pages};
    const int64_t strides[2] = {kIndexerDim, p.cache.page_stride};
    const uint32_t box[3] = {kIndexerDim, kPageKeys, 1};
    if (p.cache.num_pages > INT32_MAX || reinterpret_cast<uintptr_t>(p.cache.base) % 16 != 0 ||
        !encode_u8_3d_map(&map, p.cache.base, dims, strides, box))
      return value_error(Errc::unsupported,
                         "indexer logits decode: no TMA map for the cache (base 16-byte aligned, "
                         "at most 2^31 pages, page stride below 2^40 bytes); its page stride",
                         p.cache.page_stride, "bytes");
  }
  return for_each_token_chunk(p, [&](const IndexerLogitsParams& c) {
    switch (c.s_q) {
      case 1: return launch_q<1>(c, map, opt.pages_per_cta, stream);
      case 2: return launch_q<2>(c, map, opt.pages_per_cta, stream);
      case 3: return launch_q<3>(c, map, opt.pages_per_cta, stream);
      default: return launch_q<4>(c, map, opt.pages_per_cta, stream);
    }
  });
}

}  // namespace mla::cuda::indexer
