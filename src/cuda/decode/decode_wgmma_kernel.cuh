// The Hopper-native main decode kernel ("v4"): wgmma + warp specialisation.
// Same contract as decode_main_kernel (decode_kernel.cuh): a persistent CTA
// runs its worker's pieces from the GPU scheduler, writes out/lse directly or
// an fp32 partial for the combine kernel; same params, workspace and combine.
//
// Roles (384 threads = 3 warpgroups, one CTA per SM):
//   WG 0, 1 (math): S = Q K^T, online softmax, O += P V. Each owns half of the
//     tile's 64 keys for S (m64n32k16, no duplicated Q.K^T work: S is 576/1088
//     of the FLOPs) and half of the 512 value columns for O (m64n256k16, 128
//     fp32 accumulators per thread). Both need the whole P (64 x 64), so each
//     writes its 64 x 32 half to shared memory and they meet at a named
//     barrier; the row maxima are exchanged the same way, so both warpgroups
//     hold the same running max and rescale identically.
//   WG 2 (producer, registers moved to the math WGs by setmaxnreg): streams
//     K/V tiles into two shared-memory stages, bf16 by cp.async, fp8 by
//     register loads dequantised (e4m3 x scale, exact in bf16) into the same
//     bf16 layout, so the math code is one for both caches. full/empty
//     mbarriers per stage.
// Why 64 query rows always (also for h_q 16/32, rows masked): wgmma's M is 64;
// at 16 rows the tensor work per 64-key tile (~1.5 us at the wgmma rate) still
// fits under the tile's memory time (~2.2 us for 73.7 KB at 1/132 of HBM), and
// with the loads on their own warpgroup it overlaps instead of adding to it.
// Shared memory: Q 72 KB + 2 stages x 72 KB + P 8 KB = 224 KB of the 227 KB;
// no room for a third stage or a raw fp8 staging tile, hence the register
// dequantisation.
// Variants (template argument Variant, docs/perf-log.md v4/v6/v7): the fp8
// producer with the next tile in flight (v6), S with the 576 dims split
// between the math warpgroups (v7), the lazy O rescale (v7b), bf16 tiles by
// TMA (v8, the default), and phase stamps (diagnostics).
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "cuda/common/fp8.cuh"
#include "cuda/common/mbarrier.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/decode/decode_keys.cuh"
#include "cuda/decode/decode_traits.hpp"

namespace mla::cuda::decode::v4 {

// What differs between the kernel's versions: bits of a template argument
// (each version is its own instantiation, no runtime switches in the loops;
// a plain integer because nvcc's host stubs cannot spell class-type ones).
using Variant = unsigned;
inline constexpr Variant kFp8Prefetch = 1;  // fp8 producer keeps the next tile in flight ("v6")
inline constexpr Variant kSplitK = 2;       // S: each warpgroup all 64 keys, half the dims ("v7")
inline constexpr Variant kStamps = 4;  // clock64 phase stamps printed per CTA (MLA_DECODE_STAMPS)
inline constexpr Variant kLazyRescale = 8;  // skip O *= alpha where no row max of the warp moved
inline constexpr Variant kTmaKv = 16;       // bf16 whole tiles by TMA, one producer thread ("v8")
inline constexpr Variant kV4 = 0, kV6 = kFp8Prefetch, kV7 = kFp8Prefetch | kSplitK;

inline constexpr int kM = 64;                             // query rows per CTA (wgmma M)
inline constexpr int kMathThreads = 256;                  // 2 math warpgroups
inline constexpr int kThreads = 384;                      // + 1 producer warpgroup
inline constexpr int kStages = 2;                         // K/V tiles in shared memory
inline constexpr int kBlockBytes = 64 * 128;              // one SW128 block: 64 rows x 64 bf16
inline constexpr int kBlocks = kDqk / 64;                 // 9 blocks across the 576 dims
inline constexpr int kTileBytes = kBlocks * kBlockBytes;  // 73728: 64 rows x 576 bf16
static_assert(kTileKeys == 64 && kM == 64, "tiles are one SW128 block tall");
// Register split. The CTA is launched with kLaunchRegs per thread (65536 /
// 384, rounded down to 8); setmaxnreg.inc blocks until the pool has the
// registers, which only setmaxnreg.dec of the producer returns, so
// 2 x (math - launch) <= launch - producer, or the math warpgroups wait
// forever (seen on the H200: a first 232/48 split hung).
// The math threads hold 128 O accumulators + 16 S + addressing; the fp8
// producer holds 10 16-byte loads and their conversions. Chosen by ptxas -v:
// these are the splits without spills (bf16 producer needs few registers).
inline constexpr int kLaunchRegs = 65536 / 384 / 8 * 8;  // 168
// The prefetching fp8 producer ("v6", produce_fp8_prefetch) holds a whole
// next tile's half entry (82 registers) across the conversion: 120, all the
// math split leaves (2 x (192 - 168) = 168 - 120).
template <bool kFp8, bool kPrefetch = false>
struct Regs {
  static constexpr int kMath = kFp8 ? 192 : 232;
  static constexpr int kProducer = kFp8 ? (kPrefetch ? 120 : 112) : 40;
  static_assert(!kPrefetch || kFp8, "only the fp8 producer prefetches (bf16 uses cp.async)");
  static_assert(2 * (kMath - kLaunchRegs) <= kLaunchRegs - kProducer,
                "the producer must free what the math warpgroups take");
};

// Shared-memory map (bytes). Every tile starts 1024-aligned (the swizzle).
inline constexpr size_t kQOff = 0;
inline constexpr size_t kKvOff = kQOff + kTileBytes;
inline constexpr size_t kPOff = kKvOff + size_t(kStages) * kTileBytes;
inline constexpr size_t kMaxOff = kPOff + kBlockBytes;         // f32 [2 parity][2 wg][64]
inline constexpr size_t kLOff = kMaxOff + 2 * 2 * kM * 4;      // f32 [2 wg][64]
inline constexpr size_t kFlagOff = kLOff + 2 * kM * 4;         // i32 [kStages][4 producer warps]
inline constexpr size_t kBarOff = kFlagOff + kStages * 4 * 4;  // u64 full[kStages], empty[kStages]
inline constexpr size_t kSmemBytes = kBarOff + 2 * kStages * 8;
static_assert(kBarOff % 8 == 0, "mbarriers are 8-byte aligned");
static_assert(kSmemBytes <= 227 * 1024, "one CTA must fit the 227 KB a Hopper block may use");

// Named barriers of the two math warpgroups (0 is __syncthreads); kBarX and
// kBarY frame the split-K exchange of S (v7); kBarProd: the producer
// warpgroup's threads before its one arrive on `full` (TMA kernels).
inline constexpr int kBarQ = 1, kBarMax = 2, kBarP = 3, kBarX = 4, kBarY = 5, kBarProd = 6;

// Byte offset of 16-byte chunk q (0..71) of row r in a 64-row SW128 tile.
__device__ __forceinline__ uint32_t tile_off(int r, int q) {
  return (q >> 3) * kBlockBytes + r * 128 + (((q & 7) ^ (r & 7)) << 4);
}

// Descriptors of the operands (addresses are shared-window byte addresses).
//   Q (A of S) / K (B of S): K-major, block kb, k16 step k4 inside it, first row row0.
__device__ __forceinline__ uint64_t desc_kmajor(uint32_t tile, int row0, int kb, int k4) {
  return wgmma::desc_sw128(tile + kb * kBlockBytes + row0 * 128 + k4 * 32, 16, 1024);
}
//   V (B of P.V): MN-major, 256 columns from col0 (a multiple of 64), keys kk*16..+16.
__device__ __forceinline__ uint64_t desc_v(uint32_t tile, int col0, int kk) {
  return wgmma::desc_sw128(tile + (col0 / 64) * kBlockBytes + kk * 16 * 128, kBlockBytes, 1024);
}

struct PieceInfo {
  int b, len, n_tiles, key_end;
  bool bad_request;
};
__device__ __forceinline__ PieceInfo piece_info(const DecodeParams& p, const Piece& pc) {
  PieceInfo r;
  r.b = pc.b;
  r.bad_request = pc.slot == kSlotBadRequest;
  r.len = r.bad_request ? 0 : p.seqlens[pc.b * p.seqlens_stride];
  r.n_tiles = pc.tile_end - pc.tile_begin;
  r.key_end = min(r.len, pc.tile_end * kTileKeys);
  return r;
}

// ---- producer: one tile into one stage; returns the thread's flag bit ----
// (KeySrc::stage_flag: Paged, a bad page id; Indexed, the key is valid).
// 2 threads per key (128 threads, 64 keys), each half of the entry: a bf16
// cp.async instruction of a warp reads 16 entries x 32 contiguous bytes
// (whole sectors).
template <bool kFp8, class KeySrc>
__device__ __forceinline__ bool produce_tile(const DecodeParams& p, uint8_t* stage, int b, int tile,
                                             int key_end, int ptid) {
  const int r = ptid >> 1, half = ptid & 1;  // key row r of the tile, half of its entry
  const int key = tile * kTileKeys + r;
  bool valid = key < key_end;
  bool bad = false;
  const uint8_t* src = valid ? KeySrc::entry(p, b, key, &bad) : nullptr;
  if (src == nullptr) valid = false;
  if constexpr (!kFp8) {
    if (!valid) src = p.kv;  // any mapped address: src-size 0 reads nothing, writes zeros
#pragma unroll
    for (int i = 0; i < kChunksPerRow / 2; ++i) {
      const int q = half + 2 * i;
      ptx::cp_async_16(stage + tile_off(r, q), src + q * 16, valid);
    }
  } else {
    // Half h: codes [256h, 256h+256) = bf16 chunks 32h..32h+31 (scale groups
    // 2h, 2h+1) and rope chunks 64+4h..+4. All loads of a group are issued
    // before the first conversion (8+2 16-byte loads in flight per thread).
#pragma unroll
    for (int grp = 0; grp < 2; ++grp) {
      const int sg = 2 * half + grp;  // scale group: codes 128 sg .. +128
      uint4 codes[8], rope[2];
      float s = 0.f;
      if (valid) {
#pragma unroll
        for (int i = 0; i < 8; ++i)
          codes[i] = __ldg(reinterpret_cast<const uint4*>(src + sg * 128 + i * 16));
        s = __ldg(reinterpret_cast<const float*>(src + 512 + sg * 4));
#pragma unroll
        for (int i = 0; i < 2; ++i)
          rope[i] =
              __ldg(reinterpret_cast<const uint4*>(src + 528 + (4 * half + 2 * grp + i) * 16));
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) codes[i] = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int i = 0; i < 2; ++i) rope[i] = make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {  // 16 codes -> 2 bf16 chunks; c * scale is exact in bf16
        const uint32_t c32[4] = {codes[i].x, codes[i].y, codes[i].z, codes[i].w};
        uint32_t w[8];
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          const float2 lo = e4m3x2_to_float2(uint16_t(c32[h] & 0xffff));
          const float2 hi = e4m3x2_to_float2(uint16_t(c32[h] >> 16));
          w[2 * h] = ptx::pack_bf16x2(lo.x * s, lo.y * s);
          w[2 * h + 1] = ptx::pack_bf16x2(hi.x * s, hi.y * s);
        }
        const int q = sg * 16 + 2 * i;
        *reinterpret_cast<uint4*>(stage + tile_off(r, q)) = make_uint4(w[0], w[1], w[2], w[3]);
        *reinterpret_cast<uint4*>(stage + tile_off(r, q + 1)) = make_uint4(w[4], w[5], w[6], w[7]);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
        *reinterpret_cast<uint4*>(stage + tile_off(r, 64 + 4 * half + 2 * grp + i)) = rope[i];
    }
  }
  return KeySrc::kIndexed ? valid : bad;
}

// ---- S with the 576 dims split between the warpgroups ("v7") ----
// v4's S gives each warpgroup 32 keys over all 576 dims: 36 m64n32k16 each,
// every one reading 2 KB of Q and 1 KB of K from shared memory for 16 cycles
// of MMA (216 KB per tile); the stamps measured ~2700 cycles per tile for S
// against 1152 of MMA. Here each warpgroup computes all 64 keys over half of
// the dims (18 m64n64k16, 2 KB of Q + 2 KB of K per 32 cycles, 144 KB per
// tile): blocks 4 wg .. 4 wg + 3 and k16 steps 2 wg, 2 wg + 1 of the rope
// block 8, so each warpgroup's operand addresses are one base + constants
// (a split at step 18 made them wg-dependent per step: 56 B spilled). Then
// each sends the partial sums of the other's 32 keys and adds the ones it
// receives. Both accumulators have the same layout, so thread t of one
// warpgroup sends exactly what thread t of the other needs: 16 floats, as 4
// float4 interleaved over the 128 threads (conflict-free). Buffers: WG 0 -> 1
// in the stage's rope block (P.V never reads it), WG 1 -> 0 in sP; both are
// free after kBarX (both S(j) and both P.V(j-1) done), and sP is rewritten
// with P only after kBarMax, when WG 0 has read it.
// s_half_dims: acc = S[64 x 64] over this warpgroup's dims (key 8i + 2c + (e & 1)).
__device__ __forceinline__ void s_half_dims(float (&acc)[8][4], uint32_t aQ, uint32_t aTile,
                                            int wg) {
  const uint32_t q_lo = aQ + wg * 4 * kBlockBytes, k_lo = aTile + wg * 4 * kBlockBytes;
  const uint32_t q_hi = aQ + wg * 64, k_hi = aTile + wg * 64;  // 2 k16 steps = 64 B
  wgmma::fence();
#pragma unroll
  for (int j = 0; j < 16; ++j)
    wgmma::m64n64k16_ss(acc, desc_kmajor(q_lo, 0, j / 4, j % 4), desc_kmajor(k_lo, 0, j / 4, j % 4),
                        j > 0);
#pragma unroll
  for (int j = 0; j < 2; ++j)
    wgmma::m64n64k16_ss(acc, desc_kmajor(q_hi, 0, 8, j), desc_kmajor(k_hi, 0, 8, j), true);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_regs(acc);
}
// s_exchange: s = the full S of this warpgroup's keys 32 wg .. + 32 (v4's sacc layout).
__device__ __forceinline__ void s_exchange(float (&s)[4][4], const float (&acc)[8][4], float* x_to1,
                                           float* x_to0, int wg, int wtid) {
  ptx::named_barrier_sync(kBarX, kMathThreads);
  float4* send = reinterpret_cast<float4*>(wg == 0 ? x_to1 : x_to0);
  const float4* recv = reinterpret_cast<const float4*>(wg == 0 ? x_to0 : x_to1);
#pragma unroll
  for (int i = 0; i < 4; ++i)  // the other warpgroup's keys: columns 32 (1 - wg) + 8i + ...
    send[i * 128 + wtid] =
        wg == 0 ? make_float4(acc[4 + i][0], acc[4 + i][1], acc[4 + i][2], acc[4 + i][3])
                : make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
  ptx::named_barrier_sync(kBarY, kMathThreads);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 r = recv[i * 128 + wtid];
    s[i][0] = (wg == 0 ? acc[i][0] : acc[4 + i][0]) + r.x;
    s[i][1] = (wg == 0 ? acc[i][1] : acc[4 + i][1]) + r.y;
    s[i][2] = (wg == 0 ? acc[i][2] : acc[4 + i][2]) + r.z;
    s[i][3] = (wg == 0 ? acc[i][3] : acc[4 + i][3]) + r.w;
  }
}

// ---- bf16 tiles by TMA ("v8") ----
// The stamps of v4-v7 show the math warpgroups' shared-memory and shuffle
// phases (row max, P stores, the split-K exchange) far slower than their
// instruction counts, beside a producer whose 36 cp.async per thread per tile
// take ~3200 of a tile's ~5250 cycles to issue. Here one producer thread
// loads a whole tile with 9 bulk tensor copies (64 tokens x 64 dims, 8 KB,
// 128-byte swizzle = the SW128 block layout), completing on the stage's full
// barrier by transaction bytes. Only tiles whose 64 keys are all valid go by
// TMA (the host passes a map only when page_size % 64 == 0, so such a tile is
// one page); partial tiles keep v4's cp.async path with its zero-fill.
// A bad page id: flag set, no copy, the stage keeps stale bytes (the
// request's rows are NaN anyway). The fence orders the math warpgroups' earlier
// generic accesses to the stage (v7's exchange) before the async-proxy writes.
__device__ __forceinline__ void produce_tile_tma(const DecodeParams& p, const CUtensorMap* map,
                                                 uint8_t* stage, int* flags, uint64_t* full, int b,
                                                 int tile, int kb_begin = 0, int kb_end = kBlocks) {
  const int key0 = tile * kTileKeys;
  const int page_idx = key0 / p.page_size;
  const int page = p.block_table[b * p.bt_stride_b + int64_t(page_idx) * p.bt_stride_p];
  const bool bad = page < 0 || page >= p.num_pages;
  if (flags != nullptr) {  // v9 loads a tile in two parts: only the first writes the flags
    flags[0] = bad ? 1 : 0;
    flags[1] = flags[2] = flags[3] = 0;
  }
  if (bad) {
    ptx::mbar_arrive(full);
    return;
  }
  wgmma::fence_proxy_async();
  ptx::mbar_arrive_tx(full, uint32_t(kb_end - kb_begin) * kBlockBytes);
#pragma unroll
  for (int kb = kb_begin; kb < kb_end; ++kb)
    ptx::tma_load_3d(stage + kb * kBlockBytes, map, kb * 64, key0 - page_idx * p.page_size, page,
                     full);
}

// ---- phase stamps (diagnostics, Variant::stamps) ----
// Cycles per phase summed over a thread's tiles; lap(i) charges the time
// since the previous lap to phase i. Without stamps: no members, no code.
// 32-bit sums and clock (a CTA runs milliseconds, 2^32 cycles are 2 s; the
// unsigned difference is right across a wrap): 64-bit ones made v9b's
// stamped math warpgroups spill.
template <bool kOn, int N>
struct PhaseClock {
  __device__ __forceinline__ void lap(int) {}
};
template <int N>
struct PhaseClock<true, N> {
  unsigned acc[N] = {}, last = now();
  __device__ __forceinline__ static unsigned now() {
    unsigned t;
    asm volatile("mov.u32 %0, %%clock;\n" : "=r"(t));
    return t;
  }
  __device__ __forceinline__ void lap(int i) {
    const unsigned t = now();
    acc[i] += t - last;
    last = t;
  }
};
// Math phases: wait for the stage, S issue..done, the split-K exchange (v7),
// row max, max barrier, exp + P store, P barrier, rescale + P.V issue..done +
// release, the rest (Q load, epilogue). Producer: wait for a free stage,
// issue, landed + arrive.
enum MathPhase { kMFull, kMS, kMX, kMMax, kMBarMax, kMExp, kMBarP, kMPv, kMOther, kMPhases };
enum ProdPhase { kPEmpty, kPIssue, kPLand, kPPhases };

// ---- fp8 producer with the next tile's loads in flight ("v6") ----
// produce_tile<true> issues one scale group's loads (10 x 16 B per thread,
// ~20 KB per SM), then converts them: the loads are latency-bound and nothing
// is in flight while the producer converts or waits for a free stage. Here
// each thread keeps the raw bytes of its half entry of the NEXT tile in
// registers: converting chunk i of tile j is followed at once by the load of
// chunk i of tile j+1 into the same registers, so about one whole tile's
// codes (128 threads x 264 B = 33 KB per SM) stay in flight, also while the
// producer waits on the empty barrier. The rope part is bf16 already: it goes
// by cp.async straight into the stage once the stage is free (holding it in
// registers as well spilled at the 120-register producer budget).
// Same stage layout, flags and barriers as v4.
struct RawHalf {    // one producer thread's half entry (half h = ptid & 1)
  uint4 codes[16];  // e4m3 codes [256h, 256h + 256): scale groups 2h, 2h + 1
  float scale[2];   // scales of groups 2h, 2h + 1
};

// Entry of the key this thread handles in `tile`, or nullptr (past key_end,
// a bad page id or an invalid index: zero-filled like v4); *flag_bit as
// produce_tile's result.
template <class KeySrc>
__device__ __forceinline__ const uint8_t* producer_src(const DecodeParams& p, int b, int tile,
                                                       int key_end, int ptid, bool* flag_bit) {
  const int key = tile * kTileKeys + (ptid >> 1);
  bool bad = false;
  const uint8_t* src = key < key_end ? KeySrc::entry(p, b, key, &bad) : nullptr;
  *flag_bit = KeySrc::kIndexed ? src != nullptr : bad;
  return src;
}

__device__ __forceinline__ uint4 ldg16_or_zero(const uint8_t* src, int off) {
  return src ? __ldg(reinterpret_cast<const uint4*>(src + off)) : make_uint4(0, 0, 0, 0);
}

__device__ __forceinline__ void load_raw_half(RawHalf& raw, const uint8_t* src, int half) {
#pragma unroll
  for (int i = 0; i < 16; ++i) raw.codes[i] = ldg16_or_zero(src, half * 256 + i * 16);
#pragma unroll
  for (int g = 0; g < 2; ++g)
    raw.scale[g] =
        src ? __ldg(reinterpret_cast<const float*>(src + 512 + (2 * half + g) * 4)) : 0.f;
}

// Rope of the current entry (`cur`, nullptr: zeros) by cp.async into key row
// r of `stage`; then `raw` dequantised into the same row, each register
// refilled from `next` (the same thread's entry in the next tile; nullptr:
// zeros) as soon as it has been converted. The caller waits the cp.async.
__device__ __forceinline__ void convert_and_refill(const DecodeParams& p, uint8_t* stage, int r,
                                                   int half, RawHalf& raw, const uint8_t* cur,
                                                   const uint8_t* next) {
#pragma unroll
  for (int i = 0; i < 4; ++i)  // src-size 0 (cur == nullptr) reads nothing, writes zeros
    ptx::cp_async_16(stage + tile_off(r, 64 + 4 * half + i),
                     cur ? cur + 528 + (4 * half + i) * 16 : p.kv, cur != nullptr);
  ptx::cp_async_commit();
#pragma unroll
  for (int g = 0; g < 2; ++g) {
    const int sg = 2 * half + g;
    const float s = raw.scale[g];
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // 16 codes -> 2 bf16 chunks; c * scale is exact in bf16
      const uint4 cv = raw.codes[8 * g + i];
      raw.codes[8 * g + i] = ldg16_or_zero(next, sg * 128 + i * 16);
      const uint32_t c32[4] = {cv.x, cv.y, cv.z, cv.w};
      uint32_t w[8];
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const float2 lo = e4m3x2_to_float2(uint16_t(c32[h] & 0xffff));
        const float2 hi = e4m3x2_to_float2(uint16_t(c32[h] >> 16));
        w[2 * h] = ptx::pack_bf16x2(lo.x * s, lo.y * s);
        w[2 * h + 1] = ptx::pack_bf16x2(hi.x * s, hi.y * s);
      }
      const int q = sg * 16 + 2 * i;
      *reinterpret_cast<uint4*>(stage + tile_off(r, q)) = make_uint4(w[0], w[1], w[2], w[3]);
      *reinterpret_cast<uint4*>(stage + tile_off(r, q + 1)) = make_uint4(w[4], w[5], w[6], w[7]);
    }
    raw.scale[g] = next ? __ldg(reinterpret_cast<const float*>(next + 512 + sg * 4)) : 0.f;
  }
}

// The producer warpgroup's loop over its worker's tiles (all pieces, in the
// math warpgroups' order), one tile ahead in registers.
template <class KeySrc>
__device__ __forceinline__ void produce_fp8_prefetch(const DecodeParams& p, uint8_t* sKv,
                                                     int* sFlag, uint64_t* full, uint64_t* empty,
                                                     int piece_begin, int piece_end, int ptid) {
  // Cursor over (piece, tile): advance() moves to the next tile, false at the end.
  int pi = piece_begin, it = -1, tile_begin = 0;
  PieceInfo in{};
  in.n_tiles = 0;
  auto advance = [&]() -> bool {
    ++it;
    while (it >= in.n_tiles) {
      if (pi >= piece_end) return false;
      const Piece pc = p.pieces[pi++];
      in = piece_info(p, pc);
      tile_begin = pc.tile_begin;
      it = 0;
    }
    return true;
  };
  const int r = ptid >> 1, half = ptid & 1;
  RawHalf raw;
  bool have = advance(), bad = false;  // bad: the flag bit of src's key
  const uint8_t* src =
      have ? producer_src<KeySrc>(p, in.b, tile_begin + it, in.key_end, ptid, &bad) : nullptr;
  load_raw_half(raw, src, half);
  for (uint32_t cnt = 0; have; ++cnt) {
    const bool cur_bad = bad;
    const uint8_t* cur = src;
    have = advance();
    const uint8_t* next =
        have ? producer_src<KeySrc>(p, in.b, tile_begin + it, in.key_end, ptid, &bad) : nullptr;
    const int st = cnt % kStages;
    ptx::mbar_wait(&empty[st], ((cnt / kStages) & 1) ^ 1);
    convert_and_refill(p, sKv + st * kTileBytes, r, half, raw, cur, next);
    src = next;
    const int flag = KeySrc::stage_flag(cur_bad);
    if ((ptid & 31) == 0) sFlag[st * 4 + ptid / 32] = flag;
    ptx::cp_async_wait<0>();     // the rope chunks landed
    wgmma::fence_proxy_async();  // the tile's generic writes before wgmma's async reads
    ptx::mbar_arrive(&full[st]);
  }
}

// ---- pieces shared by the math warpgroups of v4-v8 and v9 (decode_pair_kernel.cuh) ----
// Q rows of row block `row_block` of request b into sQ (rows past `rows` are
// zero), by all 256 math threads; returns after their named barrier.
template <class KeySrc>
__device__ __forceinline__ void load_q_rows(const DecodeParams& p, uint8_t* sQ, int b,
                                            int row_block, int tid) {
  for (int idx = tid; idx < kM * kChunksPerRow; idx += kMathThreads) {
    const int r = idx / kChunksPerRow, q = idx % kChunksPerRow;
    const int rr = row_block * kM + r;
    const bool valid = rr < p.rows;
    const int s = valid ? rr / p.h_q : 0, h = valid ? rr % p.h_q : 0;
    int tb, ts;
    KeySrc::coords(p, b, s, &tb, &ts);
    const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(p.q) + tb * p.q_stride_b +
                               ts * p.q_stride_s + h * p.q_stride_h + q * 8;
    ptx::cp_async_16(sQ + tile_off(r, q), valid ? src : p.q, valid);
  }
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  wgmma::fence_proxy_async();
  ptx::named_barrier_sync(kBarQ, kMathThreads);
}

// Key limit of this thread's rows r0 and r0 + 8 (causal among the s_q new
// tokens; INT32_MIN for rows past `rows`): keys >= lim[h] are masked.
__device__ __forceinline__ void row_key_limits(const DecodeParams& p, const PieceInfo& in,
                                               int row_block, int r0, int (&lim)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int rr = row_block * kM + r0 + 8 * h;
    if (rr >= p.rows) {
      lim[h] = INT32_MIN;
    } else {
      const int s = rr / p.h_q;
      lim[h] = min(p.causal ? in.len - (p.s_q - 1 - s) : in.len, in.key_end);
    }
  }
}

// The end of a piece: l over the quad and both warpgroups (each holds the
// sum over the keys it exponentiated); O / l and lse into out/lse or the
// piece's fp32 partial. Warpgroup wg holds value columns wg*256..+256 of
// rows r0 and r0 + 8; both hold the same m_run and `bad`.
template <class KeySrc>
__device__ __forceinline__ void finish_piece(const DecodeParams& p, const Piece& pc, int b,
                                             int row_block, int wg, int r0, int c,
                                             const float (&o)[32][4], const float (&m_run)[2],
                                             float (&l_part)[2], bool bad, float* sL) {
  const float kNegInf = -INFINITY;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_part[h] += __shfl_xor_sync(0xffffffffu, l_part[h], 1);
    l_part[h] += __shfl_xor_sync(0xffffffffu, l_part[h], 2);
    if (c == 0) sL[wg * kM + r0 + 8 * h] = l_part[h];
  }
  ptx::named_barrier_sync(kBarQ, kMathThreads);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int lr = r0 + 8 * h;
    const int rr = row_block * kM + lr;
    if (rr >= p.rows) continue;
    const float l = sL[lr] + sL[kM + lr];
    float inv = l > 0.f ? 1.f / l : 0.f;
    float lse = l > 0.f ? (m_run[h] + log2f(l)) * 0.69314718055994531f : kNegInf;
    if (bad) inv = lse = NAN;
    const int hh = rr % p.h_q;
    int tb, s;
    KeySrc::coords(p, b, rr / p.h_q, &tb, &s);
    const int col0 = wg * 256 + 2 * c;
    if (pc.slot >= 0) {
      float* dst = p.partial_out + (int64_t(pc.slot) * p.rows + rr) * kDv + col0;
#pragma unroll
      for (int i = 0; i < 32; ++i)
        *reinterpret_cast<float2*>(dst + 8 * i) =
            make_float2(o[i][2 * h] * inv, o[i][2 * h + 1] * inv);
      if (wg == 0 && c == 0) p.partial_lse[int64_t(pc.slot) * p.rows + rr] = lse;
    } else {
      const int64_t off = tb * p.out_stride_b + s * p.out_stride_s + hh * p.out_stride_h + col0;
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const float x0 = o[i][2 * h] * inv, x1 = o[i][2 * h + 1] * inv;
        if (p.out_f32)
          *reinterpret_cast<float2*>(static_cast<float*>(p.out) + off + 8 * i) =
              make_float2(x0, x1);
        else
          *reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(p.out) + off + 8 * i) =
              ptx::pack_bf16x2(x0, x1);
      }
      if (wg == 0 && c == 0)
        p.lse[tb * p.lse_stride_b + hh * p.lse_stride_h + s * p.lse_stride_s] = lse;
    }
  }
}

// kV: the version's producers and stamps (Variant). KeySrc: PagedKeys (dense
// decode) or IndexedKeys (sparse decode), decode_keys.cuh.
// kv_map: the bf16 cache's tensor map (kTmaKv only; unread otherwise).
template <bool kFp8, Variant kV = kV4, class KeySrc = PagedKeys>
__global__ void __launch_bounds__(kThreads, 1)
    decode_wgmma_kernel(const DecodeParams p, const __grid_constant__ CUtensorMap kv_map) {
  constexpr bool kPrefetch = kFp8 && (kV & kFp8Prefetch) != 0;
  constexpr bool kSplit = (kV & kSplitK) != 0;
  constexpr bool kLazy = (kV & kLazyRescale) != 0;
  constexpr bool kTma = !kFp8 && !KeySrc::kIndexed && (kV & kTmaKv) != 0;
  constexpr bool kStamped = (kV & kStamps) != 0;
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* sQ = smem + kQOff;
  uint8_t* sKv = smem + kKvOff;
  uint8_t* sP = smem + kPOff;
  float* sMax = reinterpret_cast<float*>(smem + kMaxOff);
  float* sL = reinterpret_cast<float*>(smem + kLOff);
  int* sFlag = reinterpret_cast<int*>(smem + kFlagOff);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kBarOff);
  uint64_t* empty = full + kStages;

  const int tid = threadIdx.x;
  // The swizzle is applied on absolute shared addresses: tiles must be 1024-aligned.
  if ((ptx::smem_addr(smem) & 1023) != 0) __trap();
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbar_init(&full[s], kTma ? 1 : 128);  // every producer thread arrives, or one (TMA)
      ptx::mbar_init(&empty[s], kMathThreads);   // every math thread arrives
    }
    ptx::mbar_fence_init();
  }
  __syncthreads();

  const int row_block = blockIdx.y;
  const int piece_begin = p.worker_begin[blockIdx.x];
  const int piece_end = p.worker_begin[blockIdx.x + 1];

  if (tid >= kMathThreads) {
    // ================= producer warpgroup =================
    wgmma::setmaxnreg_dec<Regs<kFp8, kPrefetch>::kProducer>();
    const int ptid = tid - kMathThreads;
    if constexpr (kPrefetch) {
      produce_fp8_prefetch<KeySrc>(p, sKv, sFlag, full, empty, piece_begin, piece_end, ptid);
      return;
    }
    PhaseClock<kStamped, kPPhases> clk;
    uint32_t cnt = 0;  // tiles produced so far (stage = cnt % 2, pass = cnt / 2)
    for (int pi = piece_begin; pi < piece_end; ++pi) {
      const Piece pc = p.pieces[pi];
      const PieceInfo in = piece_info(p, pc);
      for (int it = 0; it < in.n_tiles; ++it, ++cnt) {
        const int st = cnt % kStages;
        clk.lap(kPLand);
        ptx::mbar_wait(&empty[st], ((cnt / kStages) & 1) ^ 1);
        clk.lap(kPEmpty);
        uint8_t* stage = sKv + st * kTileBytes;
        const int tile = pc.tile_begin + it;
        if constexpr (kTma) {
          if ((tile + 1) * kTileKeys <= in.key_end) {  // uniform over the warpgroup
            if (ptid == 0)
              produce_tile_tma(p, &kv_map, stage, sFlag + st * 4, &full[st], in.b, tile);
            // Keeps the idle threads within one tile of thread 0: a parity
            // wait on `empty` must not see its barrier two phases ahead.
            ptx::named_barrier_sync(kBarProd, 128);
            clk.lap(kPIssue);
            continue;
          }
        }
        const bool bit = produce_tile<kFp8, KeySrc>(p, stage, in.b, tile, in.key_end, ptid);
        if constexpr (kTma) {
          // One arrive (the barrier's count), after every producer thread's
          // copies; the thread that arrives also writes the stage's flags (the
          // OR of every thread's bad-page bit, taken by the barrier itself), so
          // the math warpgroups' acquire pairs with the writer's own release.
          static_assert(!kFp8 && !KeySrc::kIndexed, "TMA tiles: bf16 paged caches only");
          ptx::cp_async_commit();
          ptx::cp_async_wait<0>();
          wgmma::fence_proxy_async();  // the tile's generic writes before wgmma's async reads
          const bool any_bad = ptx::named_barrier_sync_or(kBarProd, 128, bit);
          clk.lap(kPIssue);
          if (ptid == 0) {
            sFlag[st * 4] = any_bad ? 1 : 0;
            sFlag[st * 4 + 1] = sFlag[st * 4 + 2] = sFlag[st * 4 + 3] = 0;
            ptx::mbar_arrive(&full[st]);
          }
          continue;
        }
        const int flag = KeySrc::stage_flag(bit);
        if ((ptid & 31) == 0) sFlag[st * 4 + ptid / 32] = flag;
        clk.lap(kPIssue);
        if constexpr (!kFp8) {
          ptx::cp_async_commit();
          ptx::cp_async_wait<0>();
        }
        wgmma::fence_proxy_async();  // the tile's generic writes before wgmma's async reads
        ptx::mbar_arrive(&full[st]);
      }
    }
    clk.lap(kPLand);
    if constexpr (kStamped) {
      if (ptid == 0 && blockIdx.x < 2 && cnt > 0)
        printf("stamps cta %d.%d producer tiles %u per tile: empty %u issue %u land %u\n",
               blockIdx.x, blockIdx.y, cnt, clk.acc[kPEmpty] / cnt, clk.acc[kPIssue] / cnt,
               clk.acc[kPLand] / cnt);
    }
    return;
  }

  // ================= math warpgroups =================
  wgmma::setmaxnreg_inc<Regs<kFp8, kPrefetch>::kMath>();
  PhaseClock<kStamped, kMPhases> clk;
  const int wg = tid / 128;  // 0 or 1: keys wg*32..+32 of S, value columns wg*256..+256 of O
  const int wtid = tid % 128, wi = wtid / 32, lane = tid % 32;
  const int g = lane / 4, c = lane % 4;
  const int r0 = 16 * wi + g;  // this thread's rows r0 and r0 + 8 of the 64
  const uint32_t aQ = ptx::smem_addr(sQ), aKv = ptx::smem_addr(sKv), aP = ptx::smem_addr(sP);
  const float kNegInf = -INFINITY;
  uint32_t cnt = 0;  // tiles consumed so far (same sequence as the producer's)

  for (int pi = piece_begin; pi < piece_end; ++pi) {
    const Piece pc = p.pieces[pi];
    const PieceInfo in = piece_info(p, pc);
    // The previous piece's wgmmas all completed (waited before its epilogue barrier).
    load_q_rows<KeySrc>(p, sQ, in.b, row_block, tid);

    int lim[2];
    row_key_limits(p, in, row_block, r0, lim);

    bool bad = in.bad_request;
    float m_run[2] = {kNegInf, kNegInf}, l_part[2] = {0.f, 0.f};
    float o[32][4];
#pragma unroll
    for (int i = 0; i < 32; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][e] = 0.f;

    for (int it = 0; it < in.n_tiles; ++it, ++cnt) {
      const int st = cnt % kStages;
      const uint32_t aTile = aKv + st * kTileBytes;
      clk.lap(kMOther);
      ptx::mbar_wait(&full[st], (cnt / kStages) & 1);
      clk.lap(kMFull);
      // Indexed: valid-key ballots of the producer warps covering this
      // warpgroup's keys wg*32..+32 (warp 2wg: +0..15, 2wg+1: +16..31).
      uint32_t valid_bits[2] = {0u, 0u};
      if constexpr (KeySrc::kIndexed) {
        valid_bits[0] = uint32_t(sFlag[st * 4 + 2 * wg]);
        valid_bits[1] = uint32_t(sFlag[st * 4 + 2 * wg + 1]);
      } else {
        bad |= (sFlag[st * 4] | sFlag[st * 4 + 1] | sFlag[st * 4 + 2] | sFlag[st * 4 + 3]) != 0;
      }

      // ---- S[64 x 32] = Q K[wg*32..+32]^T over the 576 dims ----
      float sacc[4][4];
      if constexpr (kSplit) {
        float acc[8][4];
        s_half_dims(acc, aQ, aTile, wg);
        clk.lap(kMS);
        s_exchange(sacc, acc,
                   reinterpret_cast<float*>(sKv + st * kTileBytes + (kBlocks - 1) * kBlockBytes),
                   reinterpret_cast<float*>(sP), wg, wtid);
        clk.lap(kMX);
      } else {
        wgmma::fence();
#pragma unroll
        for (int kb = 0; kb < kBlocks; ++kb)
#pragma unroll
          for (int k4 = 0; k4 < 4; ++k4)
            wgmma::m64n32k16_ss(sacc, desc_kmajor(aQ, 0, kb, k4),
                                desc_kmajor(aTile, wg * 32, kb, k4), kb + k4 > 0);
        wgmma::commit();
        wgmma::wait<0>();
        wgmma::fence_regs(sacc);
        clk.lap(kMS);
      }

      // ---- online softmax (log2 domain), row max shared by both warpgroups ----
      const int tile = pc.tile_begin + it;
      float mx[2] = {kNegInf, kNegInf};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e / 2;
          const int key = tile * kTileKeys + wg * 32 + 8 * i + 2 * c + (e & 1);
          bool keep = key < lim[h];
          if constexpr (KeySrc::kIndexed)  // key 8i + 2c + (e&1) of the 32: lane 2 * (that % 16)
            keep = keep && ((valid_bits[i / 2] >> (2 * (8 * (i & 1) + 2 * c + (e & 1)))) & 1u);
          const float s = keep ? sacc[i][e] * p.scale_log2 : kNegInf;
          sacc[i][e] = s;
          mx[h] = fmaxf(mx[h], s);
        }
      float* maxbuf = sMax + (cnt & 1) * 2 * kM;  // parity-double-buffered: no WAR across tiles
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        if (c == 0) maxbuf[wg * kM + r0 + 8 * h] = mx[h];
      }
      // Both warpgroups' P.V of the previous tile completed (each waited
      // above), so after this barrier sP may be overwritten.
      clk.lap(kMMax);
      ptx::named_barrier_sync(kBarMax, kMathThreads);
      clk.lap(kMBarMax);
      float alpha[2], m_use[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float other = maxbuf[(1 - wg) * kM + r0 + 8 * h];
        const float m_new = fmaxf(m_run[h], fmaxf(mx[h], other));
        m_use[h] = m_new == kNegInf ? 0.f : m_new;  // all masked so far: avoid -inf - -inf
        alpha[h] = ptx::fast_exp2(m_run[h] - m_use[h]);
        // Lazy: exactly 1 where the max did not move (also -inf -> -inf: O and l are 0 there).
        if (kLazy && m_new == m_run[h]) alpha[h] = 1.f;
        m_run[h] = m_new;
        l_part[h] *= alpha[h];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float pv[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          pv[e] = ptx::fast_exp2(sacc[i][e] - m_use[e / 2]);
          l_part[e / 2] += pv[e];
        }
        // P[row][wg*32 + 8i + 2c]: chunk wg*4 + i of the 128-byte row, K-major SW128.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = r0 + 8 * h;
          *reinterpret_cast<uint32_t*>(sP + r * 128 + (((wg * 4 + i) ^ (r & 7)) << 4) + 4 * c) =
              ptx::pack_bf16x2(pv[2 * h], pv[2 * h + 1]);
        }
      }
      wgmma::fence_proxy_async();  // P's st.shared before the wgmma reads of both warpgroups
      clk.lap(kMExp);
      ptx::named_barrier_sync(kBarP, kMathThreads);
      clk.lap(kMBarP);

      // ---- O[:, wg*256..+256] = O * alpha + P V ----
      // The rescale is 128 FMULs per thread (~250 cycles of both warpgroups
      // with the tensor pipe idle); past the first tiles of a long piece the
      // row maxima rarely move, so kLazy skips it when every alpha of the
      // warp is exactly 1 (warp-uniform: no divergence; bitwise the same).
      if (!kLazy || !__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) {
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          o[i][0] *= alpha[0];
          o[i][1] *= alpha[0];
          o[i][2] *= alpha[1];
          o[i][3] *= alpha[1];
        }
      }
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kTileKeys / 16; ++kk)
        wgmma::m64n256k16_ss_tb(o, desc_kmajor(aP, 0, 0, kk), desc_v(aTile, wg * 256, kk), true);
      wgmma::commit();
      // Wait here rather than at the next tile: the stage is handed back to
      // the producer as early as possible, which matters more on the
      // memory-bound shapes (two stages only) than overlapping P.V with the
      // next S in the tensor pipe.
      wgmma::wait<0>();
      wgmma::fence_regs(o);
      ptx::mbar_arrive(&empty[st]);
      clk.lap(kMPv);
    }

    finish_piece<KeySrc>(p, pc, in.b, row_block, wg, r0, c, o, m_run, l_part, bad, sL);
  }
  clk.lap(kMOther);
  if constexpr (kStamped) {
    if (wtid == 0 && blockIdx.x < 2 && cnt > 0)
      printf(
          "stamps cta %d.%d wg %d tiles %u per tile: full %u S %u S+X %u max %u "
          "barmax %u exp %u barp %u pv %u other %u\n",
          blockIdx.x, blockIdx.y, wg, cnt, clk.acc[kMFull] / cnt, clk.acc[kMS] / cnt,
          clk.acc[kMX] / cnt, clk.acc[kMMax] / cnt, clk.acc[kMBarMax] / cnt, clk.acc[kMExp] / cnt,
          clk.acc[kMBarP] / cnt, clk.acc[kMPv] / cnt, clk.acc[kMOther] / cnt);
  }
}

// Launch of one instantiation (grid (p.num_workers, row_blocks)).
template <bool kFp8, Variant kV, class KeySrc>
cudaError_t launch_wgmma(const DecodeParams& p, int row_blocks, cudaStream_t stream,
                         const CUtensorMap& kv_map) {
  auto* kernel = decode_wgmma_kernel<kFp8, kV, KeySrc>;
  // Per-function attribute, legal during stream capture: set on every launch.
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes));
  if (e != cudaSuccess) return e;
  kernel<<<dim3(p.num_workers, row_blocks), kThreads, kSmemBytes, stream>>>(p, kv_map);
  return cudaGetLastError();
}

}  // namespace mla::cuda::decode::v4
