// Lightning-indexer logits, prefill form (flat keys, a key range per query):
// the kernel of Kernel::flat_tma_wgmma, on FP8 wgmma with the keys streamed by
// TMA, templated on what its epilogue does with each logit (the sink):
// LogitsSink (below) stores them (indexer_prefill_wgmma.cu), CandidateSink
// (indexer_prefill_candidates.cuh) keeps only those that can still be in a
// row's top-k (the fused prefill select, indexer_prefill_fused.cu). Both sinks
// see the same logits, bit for bit: the math below is shared.
//
// A CTA owns a block of 8 query tokens and a chunk of key columns
// (indexer_prefill_wgmma_config.cuh). It computes only the 64-key tiles that
// meet the union of its tokens' ranges (for causal prefill: the keys up to its
// last token); the logits sink writes -inf to its other columns with plain stores.
//
// Copies: the producer warpgroup's thread 0 loads the 8 tokens' queries (one
// 64 x 128 e4m3 TMA box each, 128-byte swizzle) on one mbarrier, then each key
// tile (a 64 x 128 box of the flat keys, rows past the last key zero-filled)
// into a ring of kStages tiles: full[s] completes on the box's bytes, empty[s]
// on one arrival per consumer warp after its MMAs on the tile completed.
//
// Math, as the decode kernel (indexer_decode.cu) but four tokens per MMA:
// consumer c computes D[64 keys x 256] = K[64 x 128] . Q[tokens 4c..4c+3, 64
// heads, 128]^T with 4 m64n256k32 wgmmas (keys as the A operand, both K-major
// SW128), so thread (warp w, g, t) holds keys 16w + g and 16w + g + 8 of heads
// 8j + 2t, +1 of all four tokens. The weighted ReLU sum over heads is 16
// products per (token, key) in registers; a transposing reduction over the 4
// lanes of a quad (6 shuffles for 8 sums) leaves lane t the two keys of token
// t, which it scales by the keys' scales (read from global memory while the
// MMAs run) and hands to the sink with the token's range test.
//
// Turns (the two consumers' MMAs alternate on the tensor cores): consumer c
// waits at named barrier kBarTurn + c before issuing a tile's MMAs and arrives
// at the other's right after, so while one consumer's MMAs run the other runs
// its epilogue. Consumer 1 opens the first turn for consumer 0 and skips its
// last arrival, so every named-barrier generation completes (both consumers
// walk the same tiles). scripts/models/indexer_prefill_barriers.py models the
// protocol (ring + turns, and the candidate sink's barrier and shared words).
//
// A sink S provides: S::Args (a kernel argument), S::kSmemBytes (shared memory
// after the kernel's own, 16-byte aligned), static S::before(args, p, blk, c,
// wtid) run by every consumer thread of every CTA (also those without a tile),
// a constructor run by each consumer thread before its weights barrier,
// tile(i, pos0, pos1, in0, in1, v0, v1) per tile in the epilogue (after the
// turn barrier of tile i: every thread of the consumer finished tile i - 1),
// and finish() after the last tile.
#pragma once
#include <cuda.h>

#include <cmath>

#include "cuda/common/mbarrier.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/tma_map.hpp"
#include "cuda/common/wgmma.cuh"
#include "cuda/indexer/indexer_device.cuh"
#include "cuda/indexer/indexer_prefill_wgmma_config.cuh"

namespace mla::cuda::indexer::prefill_wgmma {

using ptx::mbar_arrive;
using ptx::mbar_arrive_expect_tx;
using ptx::mbar_fence_init;
using ptx::mbar_init;
using ptx::mbar_wait;
using ptx::named_barrier_arrive;
using ptx::named_barrier_sync;
using ptx::tma_load_3d;

// The CTA's tokens, its chunk of columns and the tiles it computes.
struct Block {
  int64_t tok0;    // first token
  int nq;          // tokens of the block (<= kTokens at the end)
  int64_t c0, c1;  // the chunk's columns [c0, c1)
  int64_t lo, hi;  // columns [lo, hi) are covered by tiles: [c0, lo) and [hi, c1) are -inf
  int ntiles;      // tiles of kTileKeys keys from lo

  __device__ __forceinline__ Block(const IndexerLogitsParams& p, int64_t chunk) {
    // Later token blocks first: under a causal mask they see the most keys,
    // and starting the longest CTAs first shortens the last wave.
    tok0 = int64_t(gridDim.x - 1 - blockIdx.x) * kTokens;
    nq = int(min(int64_t(kTokens), p.num_tokens - tok0));
    c0 = int64_t(blockIdx.y) * chunk;
    c1 = min(p.width, c0 + chunk);
    int64_t glo = INT64_MAX, ghi = INT64_MIN;  // union of the block's ranges (hull)
    for (int i = 0; i < nq; ++i) {
      const int64_t a = p.ks[tok0 + i], b = p.ke[tok0 + i];
      if (b > a) glo = min(glo, a), ghi = max(ghi, b);
    }
    ghi = min(ghi, p.num_keys);  // never a tile past the keys (ranges end at N anyway)
    glo = max(glo, c0), ghi = min(ghi, c1);
    if (ghi > glo) {
      lo = c0 + (glo - c0) / kTileKeys * kTileKeys;
      ntiles = int((ghi - lo + kTileKeys - 1) / kTileKeys);
      hi = min(c1, lo + int64_t(ntiles) * kTileKeys);
    } else {
      lo = hi = c1, ntiles = 0;
    }
  }
};

// The logits sink (Kernel::flat_tma_wgmma): every column of the CTA's chunk
// is written, -inf outside the token's range.
struct LogitsSink {
  struct Args {};
  static constexpr int kSmemBytes = 0;
  float* out_row;
  int64_t c1;
  bool q_valid;

  // The -inf columns outside the tiles: consumer c writes its tokens' rows.
  __device__ static void before(const Args&, const IndexerLogitsParams& p, const Block& blk, int c,
                                int wtid) {
    for (int q = c * kTokensPerWg; q < min(blk.nq, (c + 1) * kTokensPerWg); ++q) {
      float* row = p.logits + (blk.tok0 + q) * p.logits_stride;
      for (int64_t col = blk.c0 + wtid; col < blk.lo; col += 128) row[col] = -INFINITY;
      for (int64_t col = blk.hi + wtid; col < blk.c1; col += 128) row[col] = -INFINITY;
    }
  }
  __device__ LogitsSink(const Args&, const IndexerLogitsParams& p, uint8_t*, const Block& blk, int,
                        int, int, bool valid, int64_t tok)
      : out_row(p.logits + (valid ? tok : 0) * p.logits_stride), c1(blk.c1), q_valid(valid) {}
  __device__ __forceinline__ void tile(int, int64_t pos0, int64_t pos1, bool in0, bool in1,
                                       float v0, float v1) {
    if (q_valid) {
      if (pos0 < c1) out_row[pos0] = in0 ? v0 : -INFINITY;
      if (pos1 < c1) out_row[pos1] = in1 ? v1 : -INFINITY;
    }
  }
  __device__ __forceinline__ void finish() {}
};

template <class Sink>
__global__ void __launch_bounds__(kThreads, 1)
    indexer_prefill_wgmma_kernel(const __grid_constant__ IndexerLogitsParams p,
                                 const __grid_constant__ CUtensorMap q_map,
                                 const __grid_constant__ CUtensorMap k_map, int64_t chunk,
                                 const __grid_constant__ typename Sink::Args sink_args) {
  extern __shared__ uint8_t smem_raw[];
  const RingSmem sm = carve_ring_smem<Smem>(smem_raw);
  uint8_t* sink_smem = ptx::align_smem_1024(smem_raw) + Smem::kSinkOff;
  uint64_t* full = sm.bars;
  uint64_t* empty = full + kStages;
  uint64_t* q_full = empty + kStages;

  const Block blk(p, chunk);
  const int tid = threadIdx.x, wg = tid / 128;

  if (wg > 0) Sink::before(sink_args, p, blk, wg - 1, tid % 128);
  if (blk.ntiles == 0) return;  // CTA-uniform: no barrier is used

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(&full[s], 1), mbar_init(&empty[s], kEmptyArrivals);
    mbar_init(q_full, 1);
    mbar_fence_init();
  }
  __syncthreads();  // the barriers are initialised before anyone waits on them

  if (wg == 0) {
    wgmma::setmaxnreg_dec<kProducerRegs>();
    if (tid != 0) return;
    // The queries (tokens past the last are not loaded: their rows are never stored).
    mbar_arrive_expect_tx(q_full, uint32_t(blk.nq) * kQueryBytes);
    for (int q = 0; q < blk.nq; ++q)
      tma_load_3d(sm.q + q * kQueryBytes, &q_map, 0, 0, int(blk.tok0 + q), q_full);
#pragma unroll 1
    for (int i = 0; i < blk.ntiles; ++i) {
      const int s = i % kStages;
      if (i >= kStages) mbar_wait(&empty[s], uint32_t(i / kStages - 1) & 1u);
      mbar_arrive_expect_tx(&full[s], kTileBytes);
      tma_load_3d(sm.stages + s * kTileBytes, &k_map, 0, int(blk.lo + int64_t(i) * kTileKeys), 0,
                  &full[s]);
    }
    return;
  }

  wgmma::setmaxnreg_inc<kConsumerRegs>();
  const int c = wg - 1, wtid = tid % 128, warp = wtid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  // The consumer's weights (0 for tokens past the last: their sums are never stored).
  for (int i = wtid; i < kTokensPerWg * kIndexerHeads; i += 128) {
    const int q = c * kTokensPerWg + i / kIndexerHeads;
    sm.w[c * kTokensPerWg * kIndexerHeads + i] =
        q < blk.nq ? p.w[(blk.tok0 + q) * p.w_stride + i % kIndexerHeads] : 0.f;
  }
  // Lane t hands on token 4c + t: its range, and whether it exists.
  const int q_mine = c * kTokensPerWg + t;
  const bool q_valid = q_mine < blk.nq;
  const int64_t tok = blk.tok0 + q_mine;
  const int64_t r_lo = q_valid ? p.ks[tok] : 0, r_hi = q_valid ? p.ke[tok] : 0;
  Sink sink(sink_args, p, sink_smem, blk, c, warp, lane, q_valid, tok);
  named_barrier_sync(kBarWeights + c, 128);  // also orders the sink's shared-memory setup
  const float* my_w = sm.w + c * kTokensPerWg * kIndexerHeads;

  const uint32_t b_addr = smem_addr(sm.q + c * kWgQueryBytes);
  mbar_wait(q_full, 0);
  if (c == 1) named_barrier_arrive(kBarTurn + 0, 2 * 128);  // consumer 0 goes first

  float acc[kTokensPerWg * 8][4];
#pragma unroll 1
  for (int i = 0; i < blk.ntiles; ++i) {
    const int s = i % kStages;
    const int64_t base = blk.lo + int64_t(i) * kTileKeys;
    const int64_t pos0 = base + 16 * warp + g, pos1 = pos0 + 8;  // this thread's two keys
    // The keys' scales, loaded now so that the latency passes under the MMAs.
    const float sc0 = pos0 < p.num_keys ? __ldg(p.flat_scales + pos0) : 0.f;
    const float sc1 = pos1 < p.num_keys ? __ldg(p.flat_scales + pos1) : 0.f;
    mbar_wait(&full[s], uint32_t(i / kStages) & 1u);
    named_barrier_sync(kBarTurn + c, 2 * 128);
    const uint32_t a_addr = smem_addr(sm.stages + s * kTileBytes);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma::mma_ss_e4m3<kTokensPerWg * kIndexerHeads>(
          acc, wgmma::desc_sw128(a_addr + kk * 32, 16, 1024),
          wgmma::desc_sw128(b_addr + kk * 32, 16, 1024), kk > 0);
    wgmma::commit();
    if (c == 0 || i + 1 < blk.ntiles) named_barrier_arrive(kBarTurn + (1 - c), 2 * 128);
    wgmma::wait<0>();
    wgmma::fence_regs(acc);
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[s]);  // this warp's reads of tile s are done

    // v[q][k]: token q's weighted ReLU sum over this thread's 16 heads, key k.
    float v[kTokensPerWg][2];
#pragma unroll
    for (int q = 0; q < kTokensPerWg; ++q) {
      float s0 = 0.f, s1 = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 w = *reinterpret_cast<const float2*>(my_w + q * kIndexerHeads + 8 * j + 2 * t);
        const float* d = acc[q * 8 + j];
        s0 = fmaf(fmaxf(d[0], 0.f), w.x, s0);
        s0 = fmaf(fmaxf(d[1], 0.f), w.y, s0);
        s1 = fmaf(fmaxf(d[2], 0.f), w.x, s1);
        s1 = fmaf(fmaxf(d[3], 0.f), w.y, s1);
      }
      v[q][0] = s0, v[q][1] = s1;
    }
    // Sum over the quad, transposed: after the xor-2 step lane t holds the
    // partial sums of tokens 2 * (t >> 1) + {0, 1}, after the xor-1 step the
    // full sums of token t.
    const bool b1 = t & 2, b0 = t & 1;
    float r[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float keep = b1 ? v[2 + e / 2][e % 2] : v[e / 2][e % 2];
      const float send = b1 ? v[e / 2][e % 2] : v[2 + e / 2][e % 2];
      r[e] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
    }
    float sum[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const float keep = b0 ? r[2 + k] : r[k];
      const float send = b0 ? r[k] : r[2 + k];
      sum[k] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
    }
    // Columns outside the token's range are -inf by selection, never by arithmetic.
    const bool in0 = q_valid && pos0 >= r_lo && pos0 < r_hi;
    const bool in1 = q_valid && pos1 >= r_lo && pos1 < r_hi;
    sink.tile(i, pos0, pos1, in0, in1, sum[0] * sc0, sum[1] * sc1);
  }
  sink.finish();
}

// The TMA maps of the queries and the keys (indexer_prefill_wgmma.cu).
Status prefill_tma_maps(const IndexerLogitsParams& p, CUtensorMap* q_map, CUtensorMap* k_map);

// Launches the kernel with the epilogue Sink over `grid` (x: token blocks, y:
// key chunks): its TMA maps, its shared-memory size (set once per Sink) and
// the launch check, `name` naming it in the errors.
template <class Sink>
Status launch_with_sink(const IndexerLogitsParams& p, const Grid& grid,
                        const typename Sink::Args& args, cudaStream_t stream, const char* name) {
  CUtensorMap q_map, k_map;
  MLA_TRY(prefill_tma_maps(p, &q_map, &k_map));
  auto kernel = indexer_prefill_wgmma_kernel<Sink>;
  constexpr int smem = Smem::alloc(Sink::kSmemBytes);
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  MLA_TRY(cuda_status(attr, name));
  kernel<<<dim3(unsigned(grid.blocks), unsigned(grid.splits), 1u), kThreads, smem, stream>>>(
      p, q_map, k_map, grid.chunk, args);
  return check_launch(name);
}

}  // namespace mla::cuda::indexer::prefill_wgmma
