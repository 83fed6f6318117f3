// The main decode kernel: wgmma + warp specialisation, one persistent CTA
// per SM. A CTA runs its worker's pieces from the split scheduler
// (split/split.hpp) and writes out/lse directly or an fp32 partial for the
// combine kernel.
//
// Roles (384 threads = 3 warpgroups):
//   WG 0, 1 (math): S = Q K^T, online softmax, O += P V. Each owns half of the
//     tile's 64 keys for S (m64n32k16, no duplicated Q.K^T work: S is 576/1088
//     of the FLOPs) and half of the 512 value columns for O (m64n256k16, 128
//     fp32 accumulators per thread). Both need the whole P (64 x 64), so each
//     writes its 64 x 32 half to shared memory and they meet at a named
//     barrier; the row maxima are exchanged the same way, so both warpgroups
//     hold the same running max and rescale identically.
//   WG 2 (producer, registers moved to the math WGs by setmaxnreg): streams
//     K/V tiles into two shared-memory stages (full/empty mbarriers per
//     stage), in the same bf16 SW128 layout for every cache, so the math code
//     is one for all of them:
//       bf16, kTma: whole tiles by TMA from one thread (tiles whose 64 keys
//         are all valid; partial tiles as below);
//       bf16: cp.async, 2 threads per key;
//       fp8 (fp8_ds_mla, fp8_e4m3: Fp8Entry below): register loads
//         converted to f16 (e4m3 -> f16 x block scale, or no scale at all for
//         fp8_e4m3, whose per-tensor scale is folded into the softmax and
//         output scales; exact),
//         the next tile's loads kept in flight and the one after it
//         prefetched into L2; the MMAs of the fp8 caches run in f16 (see
//         "fp8 caches in f16" below).
// Why 64 query rows always (also for h_q 16/32, rows masked): wgmma's M is 64;
// at 16 rows the tensor work per 64-key tile still fits under the tile's
// memory time, and with the loads on their own warpgroup it overlaps instead
// of adding to it. Shared memory: decode_config.hpp.
//
// fp8 caches in f16. Hopper converts e4m3 to f16 in one instruction per two
// values and exactly, but to bf16 only through f32 (about three per value,
// which bound the kernel). So the fp8 instantiations keep Q, K/V and P in f16
// (same shapes, wgmma .f16, fp32 accumulation) and keep every value in f16's
// range by powers of two, which are exact:
//   K/V: e4m3 x block scale, one HMUL2 per two values, exact (the smallest
//     quantiser scale 2^-13 times an e4m3 subnormal is a multiple of 2^-22, an f16
//     subnormal). A key whose values could pass 65504 (a block scale > 2^7,
//     or |rope| >= 2^16) is stored as k * 2^-e_key, and the math warpgroups
//     multiply S's and P's column by 2^e_key; one flag word per tile says
//     whether any key of it is shifted. A shifted key's values round to
//     f16's grid at 2^-24 * 2^e_key (a block whose shifted scale falls below
//     that flushes): an absolute error below 448 * 2^-24 * 2^e_key, against
//     the key's largest block scale 2^(e_key + 7).
//   rope (bf16, 8 significant bits) -> f16: exact for |r| 2^-e_key in
//     [2^-17, 2^16); smaller values round to the subnormal grid (absolute
//     error <= 2^-25 * 2^e_key, against the exact product in the reference).
//   Q: each row is shifted by 2^t to put its max |q| in [2^14, 2^15), exact
//     for values down to 2^-31 of the row max; 2^-t is folded into the row's
//     softmax scale.
//   P in [0, 1] rounds to f16: 3 more mantissa bits than bf16 (values below
//     2^-24 flush, against a row sum >= 1).
// So S is exact products summed in fp32 as in the bf16 path, and P is more
// precise. fp8_e4m3 (one per-tensor scale d_k): K/V are the bare codes in f16
// (|code| <= 448: no shift ever), S = (Q.codes) d_k and O = (P.codes) d_k, so
// d_k multiplies the row's softmax scale (sQScale) and the output's 1/l. Keys past the largest
// shift: decode_config.hpp (kKeyShiftMax).
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common/fp8.cuh"
#include "cuda/common/mbarrier.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/decode/decode_config.hpp"
#include "cuda/decode/decode_keys.cuh"
#include "cuda/decode/decode_launch.hpp"
#include "cuda/decode/split/pdl.hpp"

namespace mla::cuda::decode {

// Byte offset of 16-byte chunk q (0..71) of row r in a 64-row SW128 tile.
__device__ __forceinline__ uint32_t tile_off(int r, int q) {
  return (q >> 3) * kBlockBytes + r * 128 + (((q & 7) ^ (r & 7)) << 4);
}

// tile_off(r, q) as rx ^ (chunk bits) for rx = row_x(r): r * 128 has no bits
// 4-6, so the swizzle's XOR applies to the row's offset directly. One LOP3
// per address instead of a register per chunk position.
__device__ __forceinline__ uint32_t row_x(int r) {
  return r * 128 + ((r & 7) << 4);
}
__device__ __forceinline__ uint32_t tile_off_x(uint32_t rx, int q) {
  return (q >> 3) * kBlockBytes + (rx ^ ((q & 7) << 4));
}

// Descriptors of the operands (addresses are shared-window byte addresses).
//   Q (A of S) / K (B of S): K-major, block kb, k16 step k4 inside it, first row row0.
__device__ __forceinline__ uint64_t desc_kmajor(uint32_t tile, int row0, int kb, int k4) {
  return wgmma::desc_sw128(tile + kb * kBlockBytes + row0 * 128 + k4 * 32, 16, 1024);
}
// The same operand's step to block kb, k16 step k4, in bytes (desc_advance).
__host__ __device__ constexpr uint32_t kmajor_step(int kb, int k4) {
  return uint32_t(kb * kBlockBytes + k4 * 32);
}
static_assert(kSmemBytes < 256 * 1024, "desc_advance: addresses stay below 256 KB");
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

// ---- bf16 producer: one tile into one stage by cp.async ----
// Returns the thread's flag bit (KeySrc::stage_flag: Paged, a bad page id;
// Indexed, the key is valid). 2 threads per key (128 threads, 64 keys), each
// half of the entry: a cp.async instruction of a warp reads 16 entries x 32
// contiguous bytes (whole sectors).
template <class KeySrc>
__device__ __forceinline__ bool produce_tile(const DecodeParams& p, uint8_t* stage, int b, int tile,
                                             int key_end, int ptid) {
  const int r = ptid >> 1, half = ptid & 1;  // key row r of the tile, half of its entry
  const int key = tile * kTileKeys + r;
  bool valid = key < key_end;
  bool bad = false;
  const uint8_t* src = valid ? KeySrc::entry(p, b, key, &bad) : nullptr;
  if (src == nullptr) valid = false;
  if (!valid) src = p.kv;  // any mapped address: src-size 0 reads nothing, writes zeros
#pragma unroll
  for (int i = 0; i < kChunksPerRow / 2; ++i) {
    const int q = half + 2 * i;
    ptx::cp_async_16(stage + tile_off(r, q), src + q * 16, valid);
  }
  return KeySrc::kIndexed ? valid : bad;
}

// ---- bf16 producer: a whole tile by TMA ----
// One producer thread loads a tile with 9 bulk tensor copies (64 tokens x 64
// dims, 8 KB, 128-byte swizzle = the SW128 block layout), completing on the
// stage's full barrier by transaction bytes; this frees the producer's issue
// slots and the math warpgroups' shared-memory bandwidth that 36 cp.async per
// thread per tile take. Only tiles whose 64 keys are all valid go by TMA (the
// host passes a map only when page_size % 64 == 0, so such a tile is one
// page); partial tiles take produce_tile's cp.async path with its zero-fill.
// A bad page id: flag set, no copy, the stage keeps stale bytes (the
// request's rows are NaN anyway). The fence orders the math warpgroups'
// earlier generic accesses to the stage before the async-proxy writes.
__device__ __forceinline__ void produce_tile_tma(const DecodeParams& p, const CUtensorMap* map,
                                                 uint8_t* stage, int* flags, uint64_t* full, int b,
                                                 int tile) {
  const int key0 = tile * kTileKeys;
  const int page_idx = key0 / p.page_size;
  const int page = p.block_table[b * p.bt_stride_b + int64_t(page_idx) * p.bt_stride_p];
  const bool bad = page < 0 || page >= p.num_pages;
  flags[0] = bad ? 1 : 0;
  flags[1] = flags[2] = flags[3] = 0;
  if (bad) {
    ptx::mbar_arrive(full);
    return;
  }
  wgmma::fence_proxy_async();
  ptx::mbar_arrive_tx(full, uint32_t(kBlocks) * kBlockBytes);
#pragma unroll
  for (int kb = 0; kb < kBlocks; ++kb)
    ptx::tma_load_3d(stage + kb * kBlockBytes, map, kb * 64, key0 - page_idx * p.page_size, page,
                     full);
}

// ---- fp8 producer: the next tile's loads in flight ----
// Loads of fp8 entries into registers are latency-bound, and nothing would be
// in flight while the producer converts or waits for a free stage. So each
// thread keeps the raw bytes of its half entry (codes, scales, rope) of the
// NEXT tile in registers: converting chunk i of tile j is followed at once by
// the load of chunk i of tile j+1 into the same registers, so about one whole
// tile's entries (128 threads x 328 B = 41 KB per SM) stay in flight, also
// while the producer waits on the empty barrier.
// No load waits on another: the page ids / indices are looked up three tiles
// ahead (KeySrc::lookup) and resolved to addresses one iteration later, so
// the addresses of a tile's loads are in registers before they are issued.
// Thread -> (key row, half): lanes 0-15 of producer warp w take rows
// 16w..16w+15, half 0, lanes 16-31 the same rows, half 1. A quarter warp's
// 16-byte stores then go to 8 consecutive rows of one half: 8 distinct SW128
// chunk positions, one shared-memory wavefront (pairing the halves in
// adjacent lanes put two rows' stores on one bank group).
// Same stage layout, flags and barriers as the bf16 producers.
struct RawHalf {    // one producer thread's half entry (half h)
  uint4 codes[16];  // e4m3 codes [256h, 256h + 256): scale groups 2h, 2h + 1
  float scale[2];   // scales of groups 2h, 2h + 1
  uint4 rope[4];    // bf16 rope values [32h, 32h + 32)
};

__device__ __forceinline__ int fp8_row(int ptid) {
  return 16 * (ptid >> 5) + (ptid & 15);
}
__device__ __forceinline__ int fp8_half(int ptid) {
  return (ptid >> 4) & 1;
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
        src ? __ldg(reinterpret_cast<const float*>(src + kFp8ScaleOffset + (2 * half + g) * 4))
            : 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    raw.rope[i] = ldg16_or_zero(src, kFp8RopeOffset + (4 * half + i) * 16);
}

// 2^e as a float, e in [-126, 127].
__device__ __forceinline__ float exp2i(int e) {
  return __int_as_float((e + 127) << 23);
}

// Shift of a key's e4m3 part: the smallest e >= 0 with s * 2^-e <= 2^7 for
// its largest block scale s, so |code| * s * 2^-e <= 448 * 128 < 65504. 0 for
// a zero or non-finite s (the products then carry the NaN/inf as the f32
// dequantisation would).
__device__ __forceinline__ int nope_shift(float s) {
  if (!(s > 0.f && s <= 3.4e38f)) return 0;
  int e;
  const float m = frexpf(s, &e);  // s = m 2^e, m in [0.5, 1)
  const int ceil_log2 = m == 0.5f ? e - 1 : e;
  return max(0, ceil_log2 - 7);
}
// Shift of a key's rope: |r| < 2^e -> |r| 2^-(e - 16) < 2^16, and a bf16
// value below 2^16 is at most 65280, an f16 value.
__device__ __forceinline__ int rope_shift(float m) {
  if (!(m > 0.f && m <= 3.4e38f)) return 0;
  int e;
  frexpf(m, &e);
  return max(0, e - 16);
}
// max |x| of the two bf16 of w (a NaN is skipped by fmaxf).
__device__ __forceinline__ float bf16x2_absmax(uint32_t w) {
  return fmaxf(__uint_as_float((w & 0x7fffu) << 16), __uint_as_float(w & 0x7fff0000u));
}
// Two bf16 (w) times f -> f16x2, one rounding.
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t w, float f) {
  return ptx::pack_f16x2(__uint_as_float(w << 16) * f, __uint_as_float(w & 0xffff0000u) * f);
}

// The largest |value| of a thread's 32 bf16 rope values.
__device__ __forceinline__ float rope_absmax(const uint4 (&rope)[4]) {
  float m = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    m = fmaxf(m, fmaxf(fmaxf(bf16x2_absmax(rope[i].x), bf16x2_absmax(rope[i].y)),
                       fmaxf(bf16x2_absmax(rope[i].z), bf16x2_absmax(rope[i].w))));
  return m;
}
// A key's shift e_key from its largest block scale and rope value (over all of
// its threads), clamped to kKeyShiftMax; *over: the key needed more.
__device__ __forceinline__ int key_shift(float smax, float rmax, bool* over) {
  const int e_key = max(nope_shift(smax), rope_shift(rmax));
  *over = e_key > kKeyShiftMax;
  return min(e_key, kKeyShiftMax);
}

// `raw` (the current entry's half) converted to f16 into key row r of
// `stage`, each register refilled from `next` (the same thread's entry in the
// next tile; nullptr: zeros) as soon as it has been converted. The two threads
// of a key (half 0, 1: lanes l and l ^ 16) agree on its shift first: returns
// e_key (clamped to kKeyShiftMax), *over: the key needed more.
__device__ __forceinline__ int convert_and_refill(uint8_t* stage, int r, int half, RawHalf& raw,
                                                  const uint8_t* next, bool* over) {
  float smax = fmaxf(fabsf(raw.scale[0]), fabsf(raw.scale[1]));
  float rmax = rope_absmax(raw.rope);
  smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, 16));
  rmax = fmaxf(rmax, __shfl_xor_sync(0xffffffffu, rmax, 16));
  const int e_key = key_shift(smax, rmax, over);
  const float f = exp2i(-e_key);
  const uint32_t rx = row_x(r);
#pragma unroll
  for (int g = 0; g < 2; ++g) {
    const int sg = 2 * half + g;
    uint8_t* stage_g = stage + 2 * sg * kBlockBytes;
    const __half2 s2 = __float2half2_rn(raw.scale[g] * f);
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // 16 codes -> 2 f16 chunks
      const uint4 cv = raw.codes[8 * g + i];
      raw.codes[8 * g + i] = ldg16_or_zero(next, sg * 128 + i * 16);
      const uint32_t c32[4] = {cv.x, cv.y, cv.z, cv.w};
      uint32_t w[8];
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        w[2 * h] = e4m3x2_to_f16x2_scaled(uint16_t(c32[h] & 0xffff), s2);
        w[2 * h + 1] = e4m3x2_to_f16x2_scaled(uint16_t(c32[h] >> 16), s2);
      }
      const int q = 2 * i;  // chunks of scale group sg start at block 2 sg
      *reinterpret_cast<uint4*>(stage_g + tile_off_x(rx, q)) = make_uint4(w[0], w[1], w[2], w[3]);
      *reinterpret_cast<uint4*>(stage_g + tile_off_x(rx, q + 1)) =
          make_uint4(w[4], w[5], w[6], w[7]);
    }
    raw.scale[g] =
        next ? __ldg(reinterpret_cast<const float*>(next + kFp8ScaleOffset + sg * 4)) : 0.f;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 v = raw.rope[i];
    raw.rope[i] = ldg16_or_zero(next, kFp8RopeOffset + (4 * half + i) * 16);
    *reinterpret_cast<uint4*>(stage + 8 * kBlockBytes + tile_off_x(rx, 4 * half + i)) =
        make_uint4(bf16x2_to_f16x2(v.x, f), bf16x2_to_f16x2(v.y, f), bf16x2_to_f16x2(v.z, f),
                   bf16x2_to_f16x2(v.w, f));
  }
  return e_key;
}

// fp8_e4m3 producer: one thread's half entry is 288 codes (18 x 16 B, 72
// registers: fewer than fp8_ds_mla's codes + scales + rope), converted
// without a scale (e4m3 -> f16 is exact and |code| <= 448 fits f16), so no
// key is ever shifted. Half h takes the 32-byte pieces 2k + h (k = 0..8) of
// the entry: 16 codes -> 2 stage chunks, so piece 2k + h lands in stage
// chunks 8k + 4h .. +3, whose swizzled offsets are k * block + ((4h ^ r) ^ m)
// for m < 4, the same four for every k (the key's two lanes read 64 contiguous
// bytes per k).
struct RawHalfE4m3 {
  uint4 codes[18];  // [2k + j]: bytes 64k + 32h + 16j of the entry
};
__device__ __forceinline__ int e4m3_code_off(int half, int i) {
  return 64 * (i / 2) + 32 * half + 16 * (i % 2);
}
__device__ __forceinline__ void load_raw_half(RawHalfE4m3& raw, const uint8_t* src, int half) {
#pragma unroll
  for (int i = 0; i < 18; ++i) raw.codes[i] = ldg16_or_zero(src, e4m3_code_off(half, i));
}
__device__ __forceinline__ int convert_and_refill(uint8_t* stage, int r, int half, RawHalfE4m3& raw,
                                                  const uint8_t* next, bool* over) {
  *over = false;
  const uint32_t rx = row_x(r) ^ (uint32_t(half) << 6);  // chunk bits 4 * half
#pragma unroll
  for (int i = 0; i < 18; ++i) {
    const uint4 cv = raw.codes[i];
    raw.codes[i] = ldg16_or_zero(next, e4m3_code_off(half, i));
    const uint32_t c32[4] = {cv.x, cv.y, cv.z, cv.w};
    uint32_t w[8];
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      w[2 * h] = e4m3x2_to_f16x2(uint16_t(c32[h] & 0xffff));
      w[2 * h + 1] = e4m3x2_to_f16x2(uint16_t(c32[h] >> 16));
    }
    const int q = 8 * (i / 2) + 2 * (i % 2);  // chunk q + 4 * half, by rx
    *reinterpret_cast<uint4*>(stage + tile_off_x(rx, q)) = make_uint4(w[0], w[1], w[2], w[3]);
    *reinterpret_cast<uint4*>(stage + tile_off_x(rx, q + 1)) = make_uint4(w[4], w[5], w[6], w[7]);
  }
  return 0;
}

// The narrow producer (two raw tiles) keeps its refill loads behind the
// conversion (fp8_ds_mla: each after its piece's, fp8_e4m3: all after the
// whole tile's) by a warp barrier, which ptxas does not move loads across.
// Without it ptxas hoists them to the top (new and old values live at once,
// with the other tile's registers: it spilled the just-loaded registers to
// local memory, each spill store waiting for its load); with one raw tile of
// halves it has the registers for what it hoists. The 64-row producer's
// sector pairs share these converters: with one raw tile ptxas issues the
// refills after most of the tile's stores either way (SASS), and the pinned
// form spilled less (none in the producer).
__device__ __forceinline__ void pin_refill(const uint8_t*&) {
  __syncwarp();
}

// ---- sector pairs: a key's two threads read the two halves of one sector ----
// The narrow kernel's producer, and the 64-row one's with kSectorPairs
// (produce_fp8_prefetch). With the layouts above a warp's 16-byte load
// instruction reads one 16-byte piece of 32 entries: every 32-byte sector is
// requested twice, by two instructions of the same thread, and the L1 (~23 KB
// beside 227 KB of shared memory) rarely keeps it in between (ncu, narrow
// kernel, round C: L1 hit rate 34%, L2 78% busy at 50% of the DRAM rate:
// L2-bound; sparse fp8 b128 h128, 64-row kernel: 24.5 M L2 sectors against
// FlashMLA's 6.9 M). Here the two threads of a key (lanes l, l ^ 16) read
// bytes 32i + 16h of its entry in the same instruction i, so one request
// serves a whole sector (fp8_e4m3's 576-byte entries are 32-byte aligned;
// fp8_ds_mla's odd entries straddle sectors, three quarters of the requests
// remain). Piece i (16 codes) lands in stage chunks 4i + 2h, +1; a quarter
// warp (lanes 8j..8j+7: 8 consecutive rows, one h) stores one chunk q of
// each row, at 8 distinct SW128 positions q ^ (r & 7): one wavefront, as
// with the halves layout. Same stage bytes, factors and flags as the halves
// layout (the block scales' maximum is taken over the same four values).
struct RawPairDsMla {  // one thread's pieces of an fp8_ds_mla entry (half h)
  uint4 codes[16];     // codes [32i + 16h, +16)
  uint4 scales;        // the four block scales (both threads)
  uint4 rope[4];       // rope chunks 2k + h: bytes 528 + 32k + 16h
};
struct RawPairE4m3 {  // one thread's pieces of an fp8_e4m3 entry (half h)
  uint4 codes[18];    // codes [32i + 16h, +16)
};
__device__ __forceinline__ void load_raw_half(RawPairDsMla& raw, const uint8_t* src, int half) {
#pragma unroll
  for (int i = 0; i < 16; ++i) raw.codes[i] = ldg16_or_zero(src, 32 * i + 16 * half);
  raw.scales = ldg16_or_zero(src, kFp8ScaleOffset);
#pragma unroll
  for (int k = 0; k < 4; ++k) raw.rope[k] = ldg16_or_zero(src, kFp8RopeOffset + 32 * k + 16 * half);
}
__device__ __forceinline__ void load_raw_half(RawPairE4m3& raw, const uint8_t* src, int half) {
#pragma unroll
  for (int i = 0; i < 18; ++i) raw.codes[i] = ldg16_or_zero(src, 32 * i + 16 * half);
}
// 16 e4m3 codes (cv) -> two stage chunks q, q + 1 of row rx (tile_off_x),
// each pair of codes times s2 (fp8_ds_mla) or not.
template <bool kScaled>
__device__ __forceinline__ void store_codes16(uint8_t* stage, uint32_t rx, int q, uint4 cv,
                                              __half2 s2) {
  const uint32_t c32[4] = {cv.x, cv.y, cv.z, cv.w};
  uint32_t w[8];
#pragma unroll
  for (int h = 0; h < 4; ++h) {
    if constexpr (kScaled) {
      w[2 * h] = e4m3x2_to_f16x2_scaled(uint16_t(c32[h] & 0xffff), s2);
      w[2 * h + 1] = e4m3x2_to_f16x2_scaled(uint16_t(c32[h] >> 16), s2);
    } else {
      w[2 * h] = e4m3x2_to_f16x2(uint16_t(c32[h] & 0xffff));
      w[2 * h + 1] = e4m3x2_to_f16x2(uint16_t(c32[h] >> 16));
    }
  }
  *reinterpret_cast<uint4*>(stage + tile_off_x(rx, q)) = make_uint4(w[0], w[1], w[2], w[3]);
  *reinterpret_cast<uint4*>(stage + tile_off_x(rx, q + 1)) = make_uint4(w[4], w[5], w[6], w[7]);
}
// As convert_and_refill (same stage bytes, same e_key), for the pair layout;
// the refill loads stay behind the conversion (pin_refill). kOneTile (the
// 64-row producer, one raw tile): code chunks addressed from rxh, the row's
// offset with the chunk bits 2h applied (chunk 4i + 2h + j = (4i + j) ^ 2h
// for j < 2), one register for the four chunk positions instead of one each
// (ptxas spilled the 64-row producer's store offsets without it). The narrow
// producer keeps the form it was measured with (its rows ran ~6% slower with
// rxh in round s8c, against another run's; its SASS is main's again).
template <bool kOneTile>
__device__ __forceinline__ int convert_and_refill(uint8_t* stage, int r, int half,
                                                  RawPairDsMla& raw, const uint8_t* next,
                                                  bool* over) {
  const float sc[4] = {__uint_as_float(raw.scales.x), __uint_as_float(raw.scales.y),
                       __uint_as_float(raw.scales.z), __uint_as_float(raw.scales.w)};
  const float smax = fmaxf(fmaxf(fabsf(sc[0]), fabsf(sc[1])), fmaxf(fabsf(sc[2]), fabsf(sc[3])));
  float rmax = rope_absmax(raw.rope);
  rmax = fmaxf(rmax, __shfl_xor_sync(0xffffffffu, rmax, 16));
  const int e_key = key_shift(smax, rmax, over);
  const float f = exp2i(-e_key);
  const uint32_t rx = row_x(r), rxh = rx ^ (uint32_t(half) << 5);  // rxh: chunk bits 2 * half
#pragma unroll
  for (int i = 0; i < 16; ++i) {  // piece i: dims 32i + 16h, scale group i / 4
    const uint4 cv = raw.codes[i];
    pin_refill(next);
    raw.codes[i] = ldg16_or_zero(next, 32 * i + 16 * half);
    const __half2 s2 = __float2half2_rn(sc[i / 4] * f);
    if constexpr (kOneTile)
      store_codes16<true>(stage, rxh, 4 * i, cv, s2);
    else
      store_codes16<true>(stage, rx, 4 * i + 2 * half, cv, s2);
  }
  raw.scales = ldg16_or_zero(next, kFp8ScaleOffset);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint4 v = raw.rope[k];
    raw.rope[k] = ldg16_or_zero(next, kFp8RopeOffset + 32 * k + 16 * half);
    *reinterpret_cast<uint4*>(stage + 8 * kBlockBytes + tile_off_x(rx, 2 * k + half)) =
        make_uint4(bf16x2_to_f16x2(v.x, f), bf16x2_to_f16x2(v.y, f), bf16x2_to_f16x2(v.z, f),
                   bf16x2_to_f16x2(v.w, f));
  }
  return e_key;
}
// kOneTile: rxh as above, and each register refilled right after its
// conversion instead of pinned behind the whole tile: ptxas then issues the
// refills after ~15-21 of the 36 stores, as with the halves layout: 1.01-1.04x
// the halves (round s8g; pinned, after ~29 stores: 0.96-1.01x, round s8c).
template <bool kOneTile>
__device__ __forceinline__ int convert_and_refill(uint8_t* stage, int r, int half, RawPairE4m3& raw,
                                                  const uint8_t* next, bool* over) {
  *over = false;
  const uint32_t rx = row_x(r), rxh = rx ^ (uint32_t(half) << 5);  // rxh: chunk bits 2 * half
#pragma unroll
  for (int i = 0; i < 18; ++i) {
    const uint4 cv = raw.codes[i];
    if constexpr (kOneTile) {
      raw.codes[i] = ldg16_or_zero(next, 32 * i + 16 * half);
      store_codes16<false>(stage, rxh, 4 * i, cv, __half2());
    } else {
      store_codes16<false>(stage, rx, 4 * i + 2 * half, cv, __half2());
    }
  }
  if constexpr (!kOneTile) {
    pin_refill(next);  // the refill after the whole conversion (see pin_refill)
#pragma unroll
    for (int i = 0; i < 18; ++i) raw.codes[i] = ldg16_or_zero(next, 32 * i + 16 * half);
  }
  return 0;
}

// The fp8 cache formats' producer pieces: registers of a half entry (Raw; the
// sector-pair layout: RawPair), whether keys can be stored
// shifted (decode_kernel.cuh header), the entry's bytes.
template <KvFormat kFormat>
struct Fp8Entry {
  static_assert(kFormat == KvFormat::fp8_ds_mla || kFormat == KvFormat::fp8_e4m3,
                "the converting producer serves the fp8 formats");
  using Raw = std::conditional_t<kFormat == KvFormat::fp8_ds_mla, RawHalf, RawHalfE4m3>;
  using RawPair = std::conditional_t<kFormat == KvFormat::fp8_ds_mla, RawPairDsMla, RawPairE4m3>;
  static constexpr bool kKeyShift = kFormat == KvFormat::fp8_ds_mla;
  static constexpr int kEntryBytes = kv_entry_bytes(kFormat);
  static_assert(kEntryBytes % 16 == 0, "entries are read in 16-byte chunks");
};

// The producer warpgroup's loop over its worker's tiles (all pieces, in the
// math warpgroups' order). Per thread, at the top of the iteration that
// converts tile j: tile j's entry in `raw` (loads in flight), tile j+1's
// address and flag bit (nxt, nxt_bit), tile j+2's page id / index (ahead,
// loaded one iteration ago). After handing tile j over it resolves tile j+2
// (prefetched into L2: with the registers' tile, two tiles of bytes in
// flight) and looks up tile j+3; the cursor runs three tiles ahead, across
// pieces.
// Per stage it also publishes each key's factor 2^e_key (sKeyFac) and the
// warps' flag words (sKeyFlag, decode_config.hpp).
//
// kRaw = 2 (the narrow kernel, whose math warpgroups need few registers and
// give the producer 232): two tiles' half entries in registers, rawA and rawB
// taking turns, so converting tile j refills with tile j+2 while tile j+1's
// loads are in flight: two tiles of loads in flight instead of one, the L2
// prefetch one tile further (j+3). Same cursor, one tile further ahead.
// Its raw tiles are in the sector-pair layout (RawPair).
// kSectorPairs (kRaw = 1): the one raw tile in the sector-pair layout too,
// instead of halves (RawHalf / RawHalfE4m3); same stage contents.
template <class KeySrc, KvFormat kFormat, int kRaw = 1, bool kSectorPairs = false>
// All of shared memory from one base pointer (the budget has no registers
// for six 64-bit ones).
__device__ __forceinline__ void produce_fp8_prefetch(const DecodeParams& p, uint8_t* smem,
                                                     int piece_begin, int piece_end, int ptid) {
  static_assert(kRaw == 1 || kRaw == 2, "one or two tiles of raw entries in registers");
  static_assert(kRaw == 1 || !kSectorPairs, "two raw tiles are always in sector pairs");
  int* sFlag = reinterpret_cast<int*>(smem + kFlagOff);
  float* sKeyFac = reinterpret_cast<float*>(smem + kKeyFacOff);
  int* sKeyFlag = reinterpret_cast<int*>(smem + kKeyFlagOff);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kBarOff);
  uint64_t* empty = full + kStages;
  const int r = fp8_row(ptid), half = fp8_half(ptid);
  // Cursor over (piece, absolute tile): advance() moves it to the next tile
  // (has: there is one), key() is this thread's key there, or -1 (none).
  int pi = piece_begin, b = 0, tile = 0, tile_end = 0, key_end = 0;
  bool has = true;
  auto advance = [&]() {
    ++tile;
    while (tile >= tile_end) {
      if (pi >= piece_end) {
        has = false;
        return;
      }
      const Piece pc = p.pieces[pi++];
      const PieceInfo in = piece_info(p, pc);
      b = in.b;
      tile = pc.tile_begin;
      tile_end = pc.tile_end;
      key_end = in.key_end;
    }
  };
  auto key = [&]() {
    const int k = tile * kTileKeys + r;
    return has && k < key_end ? k : -1;
  };
  auto resolve = [&](int id, bool* flag_bit) -> const uint8_t* {
    *flag_bit = false;
    const int k = key();
    return k >= 0 ? KeySrc::resolve(p, k, id, flag_bit) : nullptr;
  };
  auto look_up = [&]() {
    const int k = key();
    return k >= 0 ? KeySrc::lookup(p, b, k) : 0;
  };
  using E = Fp8Entry<kFormat>;
  // Tile cnt from `raw` into stage cnt % 2 (each register refilled from
  // `refill`, this thread's entry in a later tile, once converted), its flags
  // and factors published, the stage handed to the math warpgroups.
  auto hand_over = [&](auto& raw, uint32_t cnt, bool cur_bit, const uint8_t* refill) {
    const int st = cnt % kStages;
    ptx::mbar_wait(&empty[st], ((cnt / kStages) & 1) ^ 1);
    bool over = false;
    uint8_t* stage = smem + kKvOff + st * kTileBytes;
    int e_key;
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(raw)>, typename E::RawPair>)
      e_key = convert_and_refill<kRaw == 1>(stage, r, half, raw, refill, &over);
    else
      e_key = convert_and_refill(stage, r, half, raw, refill, &over);
    // Indexed: stage_flag's ballot is read per lane pair (bit 2k, 2k + 1: key
    // k of the warp's 16), so lane l votes for key l / 2 (held by lane l / 2).
    const bool vote =
        KeySrc::kIndexed ? __shfl_sync(0xffffffffu, cur_bit, (ptid & 31) >> 1) : cur_bit;
    const int flag = KeySrc::stage_flag(vote);
    if constexpr (E::kKeyShift) {
      const int key_flag =
          (__any_sync(0xffffffffu, e_key != 0) ? 1 : 0) | (__any_sync(0xffffffffu, over) ? 2 : 0);
      if (half == 0) sKeyFac[st * kTileKeys + r] = exp2i(e_key);
      if ((ptid & 31) == 0) sKeyFlag[st * 4 + ptid / 32] = key_flag;
    }
    if ((ptid & 31) == 0) sFlag[st * 4 + ptid / 32] = flag;
    wgmma::fence_proxy_async();  // the tile's generic writes before wgmma's async reads
    ptx::mbar_arrive(&full[st]);
  };
  // An entry (656 or 576 bytes) spans at most 7 lines: half 0 the first
  // three, half 1 the next ones inside the entry and the last byte's.
  auto prefetch = [&](const uint8_t* far) {
    if (far != nullptr) {
#pragma unroll
      for (int k = 0; k < 3; ++k)  // (a line past a 576-byte entry: its last byte's again)
        ptx::prefetch_l2(far + min(128 * (3 * half + k), E::kEntryBytes - 1));
      if (half) ptx::prefetch_l2(far + E::kEntryBytes - 1);
    }
  };
  if constexpr (kRaw == 2) {
    // Prime: tiles 0 and 1 loaded into rawA / rawB, tile 2 resolved, tile 3
    // looked up. At the top of a turn: rawA = tile cnt, rawB = cnt + 1, nxt =
    // cnt + 2's address, the cursor (and ahead's id) at cnt + 3.
    typename E::RawPair rawA, rawB;
    bool bitA, bitB, nxt_bit;
    advance();
    bool haveA = has;
    load_raw_half(rawA, resolve(look_up(), &bitA), half);
    advance();
    bool haveB = has;
    load_raw_half(rawB, resolve(look_up(), &bitB), half);
    advance();
    bool have_nxt = has;
    const uint8_t* nxt = resolve(look_up(), &nxt_bit);
    advance();
    int ahead = look_up();
    // After converting one tile: the refill target moves to the cursor's
    // tile (resolved from the id loaded a turn ago), the cursor one further.
    // Returns the refilled registers' tile: (exists, flag bit).
    auto step = [&]() {
      bool far_bit;
      const uint8_t* far = resolve(ahead, &far_bit);
      prefetch(far);
      const bool have_raw = have_nxt, bit_raw = nxt_bit;
      have_nxt = has;
      nxt_bit = far_bit;
      nxt = far;
      advance();
      ahead = look_up();
      return make_int2(have_raw, bit_raw);
    };
    for (uint32_t cnt = 0; haveA; cnt += 2) {
      hand_over(rawA, cnt, bitA, nxt);  // rawA <- tile cnt + 2
      const int2 sa = step();
      haveA = sa.x != 0;
      bitA = sa.y != 0;
      if (!haveB) break;
      hand_over(rawB, cnt + 1, bitB, nxt);  // rawB <- tile cnt + 3
      const int2 sb = step();
      haveB = sb.x != 0;
      bitB = sb.y != 0;
    }
    return;
  }
  // Prime the pipeline: tiles 0 and 1 resolved at once, tile 2 looked up.
  std::conditional_t<kSectorPairs, typename E::RawPair, typename E::Raw> raw;
  bool cur_bit, nxt_bit;
  advance();
  bool have = has;
  load_raw_half(raw, resolve(look_up(), &cur_bit), half);
  advance();
  bool have_nxt = has;
  const uint8_t* nxt = resolve(look_up(), &nxt_bit);
  advance();
  int ahead = look_up();
  for (uint32_t cnt = 0; have; ++cnt) {
    hand_over(raw, cnt, cur_bit, nxt);
    // Tile j+2 (the cursor's): its page id / index arrived during this iteration.
    bool far_bit;
    const uint8_t* far = resolve(ahead, &far_bit);
    prefetch(far);
    have = have_nxt;
    have_nxt = has;
    cur_bit = nxt_bit;
    nxt_bit = far_bit;
    nxt = far;
    advance();  // tile j+3
    ahead = look_up();
  }
}

// The bf16 producer warpgroup's loop over its worker's tiles (all pieces, in
// the math warpgroups' order): cp.async by all 128 threads, or (kTma) full
// tiles by TMA from thread 0.
template <class KeySrc, bool kTma>
__device__ __forceinline__ void produce_bf16(const DecodeParams& p, const CUtensorMap* kv_map,
                                             uint8_t* sKv, int* sFlag, uint64_t* full,
                                             uint64_t* empty, int piece_begin, int piece_end,
                                             int ptid) {
  uint32_t cnt = 0;  // tiles produced so far (stage = cnt % 2, pass = cnt / 2)
  for (int pi = piece_begin; pi < piece_end; ++pi) {
    const Piece pc = p.pieces[pi];
    const PieceInfo in = piece_info(p, pc);
    for (int it = 0; it < in.n_tiles; ++it, ++cnt) {
      const int st = cnt % kStages;
      ptx::mbar_wait(&empty[st], ((cnt / kStages) & 1) ^ 1);
      uint8_t* stage = sKv + st * kTileBytes;
      const int tile = pc.tile_begin + it;
      if constexpr (kTma) {
        if ((tile + 1) * kTileKeys <= in.key_end) {  // uniform over the warpgroup
          if (ptid == 0) produce_tile_tma(p, kv_map, stage, sFlag + st * 4, &full[st], in.b, tile);
          // Keeps the idle threads within one tile of thread 0: a parity
          // wait on `empty` must not see its barrier two phases ahead.
          ptx::named_barrier_sync(kBarProd, 128);
          continue;
        }
      }
      const bool bit = produce_tile<KeySrc>(p, stage, in.b, tile, in.key_end, ptid);
      if constexpr (kTma) {
        // One arrive (the barrier's count), after every producer thread's
        // copies; the thread that arrives also writes the stage's flags (the
        // OR of every thread's bad-page bit, taken by the barrier itself), so
        // the math warpgroups' acquire pairs with the writer's own release.
        ptx::cp_async_commit();
        ptx::cp_async_wait<0>();
        wgmma::fence_proxy_async();  // the tile's generic writes before wgmma's async reads
        const bool any_bad = ptx::named_barrier_sync_or(kBarProd, 128, bit);
        if (ptid == 0) {
          sFlag[st * 4] = any_bad ? 1 : 0;
          sFlag[st * 4 + 1] = sFlag[st * 4 + 2] = sFlag[st * 4 + 3] = 0;
          ptx::mbar_arrive(&full[st]);
        }
        continue;
      }
      const int flag = KeySrc::stage_flag(bit);
      if ((ptid & 31) == 0) sFlag[st * 4 + ptid / 32] = flag;
      ptx::cp_async_commit();
      ptx::cp_async_wait<0>();
      wgmma::fence_proxy_async();  // the tile's generic writes before wgmma's async reads
      ptx::mbar_arrive(&full[st]);
    }
  }
}

// ---- pieces of the math warpgroups ----
// Q rows of row block `row_block` of request b into sQ (rows past `rows` are
// zero), by kLoaders threads (tid < kLoaders: the 256 math threads, or the
// one-way form's WG1); returns after their named barrier kBar. kF16:
// then converted in place to f16, row r times 2^t_r (its max |q| into
// [2^14, 2^15)), and sQScale[r] = 2^-t_r qk_scale for the row's softmax
// scale (qk_scale: the fp8_e4m3 cache's d_k, else 1).
template <class KeySrc, bool kF16, int kLoaders = kMathThreads, int kBar = kBarQ>
__device__ __forceinline__ void load_q_rows(const DecodeParams& p, uint8_t* sQ, float* sQScale,
                                            int b, int row_block, int tid, float qk_scale) {
  auto issue = [&](int idx) {
    const int r = idx / kChunksPerRow, q = idx % kChunksPerRow;
    const int rr = row_block * kM + r;
    const bool valid = rr < p.rows;
    const int s = valid ? rr / p.h_q : 0, h = valid ? rr % p.h_q : 0;
    int tb, ts;
    KeySrc::coords(p, b, s, &tb, &ts);
    const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(p.q) + tb * p.q_stride_b +
                               ts * p.q_stride_s + h * p.q_stride_h + q * 8;
    ptx::cp_async_16(sQ + tile_off(r, q), valid ? src : p.q, valid);
  };
  if constexpr (kF16) {  // not unrolled: its hoisted addresses spilled in the f16 kernel
#pragma unroll 1
    for (int idx = tid; idx < kM * kChunksPerRow; idx += kLoaders) issue(idx);
  } else {
    for (int idx = tid; idx < kM * kChunksPerRow; idx += kLoaders) issue(idx);
  }
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  if constexpr (kF16) {
    ptx::named_barrier_sync(kBar, kLoaders);  // every thread's bf16 chunks landed
    // kParts threads (adjacent lanes) per row, chunks part, part + kParts, ...
    constexpr int kParts = kLoaders / kM;
    static_assert(kParts == 2 || kParts == 4, "2 or 4 threads per row");
    const int r = tid / kParts, part = tid % kParts;
    float m = 0.f;
#pragma unroll 1
    for (int j = 0; j < kChunksPerRow / kParts; ++j) {
      const uint4 v = *reinterpret_cast<const uint4*>(sQ + tile_off(r, part + kParts * j));
      m = fmaxf(m, fmaxf(fmaxf(bf16x2_absmax(v.x), bf16x2_absmax(v.y)),
                         fmaxf(bf16x2_absmax(v.z), bf16x2_absmax(v.w))));
    }
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    if constexpr (kParts == 4) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    int t = 0;  // zero or non-finite max: unshifted (NaN/inf propagate)
    if (m > 0.f && m <= 3.4e38f) {
      int e;
      frexpf(m, &e);         // m < 2^e
      t = min(126, 15 - e);  // >= -113 for bf16's range
    }
    const float f = exp2i(t);
#pragma unroll 1
    for (int j = 0; j < kChunksPerRow / kParts; ++j) {
      uint4* at = reinterpret_cast<uint4*>(sQ + tile_off(r, part + kParts * j));
      const uint4 v = *at;
      *at = make_uint4(bf16x2_to_f16x2(v.x, f), bf16x2_to_f16x2(v.y, f), bf16x2_to_f16x2(v.z, f),
                       bf16x2_to_f16x2(v.w, f));
    }
    if (part == 0) sQScale[r] = exp2i(-t) * qk_scale;
  }
  wgmma::fence_proxy_async();
  ptx::named_barrier_sync(kBar, kLoaders);
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

// The end of a piece: l over the quad and the warpgroups; O / l and lse into
// out/lse or the piece's fp32 partial. Warpgroup wg holds value columns
// wg*256..+256 of rows r0 and r0 + 8. v_scale: the values' factor (the
// fp8_e4m3 cache's d_k, else 1).
//   seesaw: each warpgroup holds the sum over the keys it exponentiated, and
//     both the same m_run and `bad`; they meet at kBarQ;
//   one-way (kOneWay): WG0 alone holds l, m_run and `bad`, and hands them to
//     WG1 through shared memory (kLOff, kFinMaxOff, kFinBadOff) by the
//     mbarriers fin_ready / fin_free (phase pk: the worker's piece count).
template <class KeySrc, bool kOneWay>
__device__ __forceinline__ void finish_piece(const DecodeParams& p, const Piece& pc, int b,
                                             int row_block, int wg, int r0, int c,
                                             const float (&o)[32][4], const float (&m_run)[2],
                                             float (&l_part)[2], bool bad, uint8_t* smem,
                                             float v_scale, uint32_t pk) {
  const float kNegInf = -INFINITY;
  float* sL = reinterpret_cast<float*>(smem + kLOff);
  float* sFinMax = reinterpret_cast<float*>(smem + kFinMaxOff);
  int* sFinBad = reinterpret_cast<int*>(smem + kFinBadOff);
  uint64_t* fin_ready = reinterpret_cast<uint64_t*>(smem + kPieceBarOff) + 2;
  uint64_t* fin_free = fin_ready + 1;
  float m_row[2] = {m_run[0], m_run[1]}, l_row[2] = {0.f, 0.f};
  if (!kOneWay || wg == 0) {
    if constexpr (kOneWay) ptx::mbar_wait(fin_free, (pk & 1) ^ 1);  // WG1 read the last ones
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l_part[h] += __shfl_xor_sync(0xffffffffu, l_part[h], 1);
      l_part[h] += __shfl_xor_sync(0xffffffffu, l_part[h], 2);
      l_row[h] = l_part[h];
      if (c == 0) sL[(kOneWay ? 0 : wg * kM) + r0 + 8 * h] = l_part[h];
      if (kOneWay && c == 0) sFinMax[r0 + 8 * h] = m_run[h];
    }
    if (kOneWay && r0 == 0 && c == 0) *sFinBad = bad ? 1 : 0;
    if constexpr (kOneWay) ptx::mbar_arrive(fin_ready);
  } else {  // one-way WG1
    ptx::mbar_wait(fin_ready, pk & 1);
    bad = *sFinBad != 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m_row[h] = sFinMax[r0 + 8 * h];
      l_row[h] = sL[r0 + 8 * h];
    }
    ptx::mbar_arrive(fin_free);
  }
  if constexpr (!kOneWay) ptx::named_barrier_sync(kBarQ, kMathThreads);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int lr = r0 + 8 * h;
    const int rr = row_block * kM + lr;
    if (rr >= p.rows) continue;
    const float l = kOneWay ? l_row[h] : sL[lr] + sL[kM + lr];
    float inv = l > 0.f ? v_scale / l : 0.f;
    float lse = l > 0.f ? (m_row[h] + log2f(l)) * 0.69314718055994531f : kNegInf;
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

// fp8: the factors 2^e_key of key columns key0 + 8i + 2c, +1 in stage st.
__device__ __forceinline__ float2 key_factors(const float* sKeyFac, int st, int key0, int i,
                                              int c) {
  return *reinterpret_cast<const float2*>(sKeyFac + st * kTileKeys + key0 + 8 * i + 2 * c);
}

// The fp8_e4m3 cache's per-tensor scale d_k (decode_params.hpp), else 1.
// Read where used (Q's load, the epilogue), not held across the tile loop.
template <KvFormat kFormat>
__device__ __forceinline__ float key_scale(const DecodeParams& p) {
  if constexpr (kFormat == KvFormat::fp8_e4m3)
    return __ldg(p.k_scale);
  else
    return 1.f;
}

// ---- the tile's math, shared by the seesaw and the one-way form ----
// A warpgroup's S covers kN keys (32: seesaw, one half each; 64: one-way WG0)
// from key0 of the tile; the accumulator layout is wgmma.cuh's.

// S[64 x kN] = Q K[key0..+kN]^T over the 576 dims, completed.
template <wgmma::Elem kElem, int kN>
__device__ __forceinline__ void mma_s(float (&sacc)[kN / 8][4], uint32_t aQ, uint32_t aTile,
                                      int key0) {
  const uint64_t dQ = desc_kmajor(aQ, 0, 0, 0), dK = desc_kmajor(aTile, key0, 0, 0);
  wgmma::fence();
#pragma unroll
  for (int kb = 0; kb < kBlocks; ++kb)
#pragma unroll
    for (int k4 = 0; k4 < 4; ++k4)
      wgmma::mma_ss<kElem, kN>(sacc, wgmma::desc_advance(dQ, kmajor_step(kb, k4)),
                               wgmma::desc_advance(dK, kmajor_step(kb, k4)), kb + k4 > 0);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_regs(sacc);
}

// The stage's flag words for keys key0..+kN (producer warp w wrote keys
// 16w..+16): Indexed, the valid-key ballots into valid_bits (bit 2k: the
// warp's key k); Paged, a bad page id into `bad`. fp8_ds_mla: `bad` if a key
// needed more than kKeyShiftMax, and whether one of them is stored shifted.
template <class KeySrc, bool kKeyShift, int kN>
__device__ __forceinline__ bool read_stage_flags(const int* sFlag, const int* sKeyFlag, int st,
                                                 int key0, uint32_t (&valid_bits)[kN / 16],
                                                 bool& bad) {
#pragma unroll
  for (int j = 0; j < kN / 16; ++j) valid_bits[j] = 0u;
  if constexpr (KeySrc::kIndexed) {
#pragma unroll
    for (int j = 0; j < kN / 16; ++j) valid_bits[j] = uint32_t(sFlag[st * 4 + key0 / 16 + j]);
  } else {
    bad |= (sFlag[st * 4] | sFlag[st * 4 + 1] | sFlag[st * 4 + 2] | sFlag[st * 4 + 3]) != 0;
  }
  bool key_shifted = false;
  if constexpr (kKeyShift) {
    int kf = 0;
#pragma unroll
    for (int j = 0; j < kN / 16; ++j) kf |= sKeyFlag[st * 4 + key0 / 16 + j];
    bad |= (kf & 2) != 0;
    key_shifted = (kf & 1) != 0;
  }
  return key_shifted;
}

// S's entries into scaled log2-domain scores: columns times 2^e_key
// (fp8_ds_mla, exact: powers of two), masked to -inf past lim / invalid,
// times the row's softmax scale; mx: this thread's row maxima (before the
// quad reduction). key_base: the tile's first key + key0.
template <class KeySrc, bool kKeyShift, int kN>
__device__ __forceinline__ void scores(float (&sacc)[kN / 8][4], const float* sKeyFac, int st,
                                       int key0, bool key_shifted,
                                       const uint32_t (&valid_bits)[kN / 16], int key_base,
                                       const int (&lim)[2], const float (&row_scale)[2], int c,
                                       float (&mx)[2]) {
  if constexpr (kKeyShift) {
    if (key_shifted) {
#pragma unroll
      for (int i = 0; i < kN / 8; ++i) {
        const float2 f = key_factors(sKeyFac, st, key0, i, c);
        sacc[i][0] *= f.x;
        sacc[i][1] *= f.y;
        sacc[i][2] *= f.x;
        sacc[i][3] *= f.y;
      }
    }
  }
  mx[0] = mx[1] = -INFINITY;
#pragma unroll
  for (int i = 0; i < kN / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = e / 2;
      const int key = key_base + 8 * i + 2 * c + (e & 1);
      bool keep = key < lim[h];
      if constexpr (KeySrc::kIndexed)  // key 8i + 2c + (e&1) of the kN: lane 2 * (that % 16)
        keep = keep && ((valid_bits[i / 2] >> (2 * (8 * (i & 1) + 2 * c + (e & 1)))) & 1u);
      const float s = keep ? sacc[i][e] * row_scale[h] : -INFINITY;
      sacc[i][e] = s;
      mx[h] = fmaxf(mx[h], s);
    }
}

// P = exp2(S - m_use), the row sums l += P, then P's columns times 2^e_key
// (fp8_ds_mla, against the key's stored 2^-e_key; after the sum, which takes
// the true P), packed: pk[i][h] = row r0 + 8h, columns 8i + 2c, +1. Without a
// branch on key_shifted: one here made ptxas serialise the P.V wgmmas (an
// injected warpgroup.arrive); the factors are 1 for unshifted keys.
template <bool kKeyShift, bool kF16, int kN>
__device__ __forceinline__ void exp_pack(const float (&sacc)[kN / 8][4], const float (&m_use)[2],
                                         float (&l)[2], const float* sKeyFac, int st, int key0,
                                         int c, uint32_t (&pk)[kN / 8][2]) {
#pragma unroll
  for (int i = 0; i < kN / 8; ++i) {
    float pv[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      pv[e] = ptx::fast_exp2(sacc[i][e] - m_use[e / 2]);
      l[e / 2] += pv[e];
    }
    if constexpr (kKeyShift) {
      const float2 f = key_factors(sKeyFac, st, key0, i, c);
      pv[0] *= f.x;
      pv[1] *= f.y;
      pv[2] *= f.x;
      pv[3] *= f.y;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
      pk[i][h] = kF16 ? ptx::pack_f16x2(pv[2 * h], pv[2 * h + 1])
                      : ptx::pack_bf16x2(pv[2 * h], pv[2 * h + 1]);
  }
}

// P's packed pairs into sP (64 x 64 16-bit, K-major SW128): columns
// 8 (chunk0 + i) + 2c of rows r0, r0 + 8.
template <int kN>
__device__ __forceinline__ void store_p(uint8_t* sP, const uint32_t (&pk)[kN / 8][2], int chunk0,
                                        int r0, int c) {
#pragma unroll
  for (int i = 0; i < kN / 8; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + 8 * h;
      *reinterpret_cast<uint32_t*>(sP + r * 128 + (((chunk0 + i) ^ (r & 7)) << 4) + 4 * c) =
          pk[i][h];
    }
}

// All of P (64 x 64, one-way WG0) into sP by stmatrix: 4 per thread instead
// of 16 32-bit stores. Instruction kk stores the 8x8 matrices (chunk 2kk + j/2,
// rows 16w + 8(j%2)..+8) for j = 0..3, whose fragments are exactly the
// register-A operand of P.V step kk; lane l addresses row l%8 of matrix l/8.
__device__ __forceinline__ void store_p_stmatrix(uint8_t* sP, const uint32_t (&pk)[8][2], int wi,
                                                 int lane) {
  const int j = lane / 8, rr = lane % 8;
  const int row = 16 * wi + 8 * (j & 1) + rr;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t a[4] = {pk[2 * kk][0], pk[2 * kk][1], pk[2 * kk + 1][0], pk[2 * kk + 1][1]};
    ptx::stmatrix_x4(sP + row * 128 + (((2 * kk + (j >> 1)) ^ rr) << 4), a);
  }
}

__device__ __forceinline__ void rescale_o(float (&o)[32][4], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    o[i][0] *= alpha[0];
    o[i][1] *= alpha[0];
    o[i][2] *= alpha[1];
    o[i][3] *= alpha[1];
  }
}

// O[:, col0..+256] += P V with P from sP, completed.
template <wgmma::Elem kElem>
__device__ __forceinline__ void mma_pv_ss(float (&o)[32][4], uint32_t aP, uint32_t aTile,
                                          int col0) {
  const uint64_t dP = desc_kmajor(aP, 0, 0, 0), dV = desc_v(aTile, col0, 0);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < kTileKeys / 16; ++kk)
    wgmma::mma_ss<kElem, 256, true>(o, wgmma::desc_advance(dP, kmajor_step(0, kk)),
                                    wgmma::desc_advance(dV, kk * 16 * 128), true);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_regs(o);
}

// The math warpgroups' loop over the worker's pieces (kWg: -1, the seesaw,
// both warpgroups; 0 or 1, that warpgroup of the one-way form).
template <class KeySrc, KvFormat kFormat, bool kOneWay, int kWg>
__device__ __forceinline__ void math_warpgroup(const DecodeParams& p, uint8_t* smem,
                                               int piece_begin, int piece_end, int tid) {
  constexpr bool kFp8 = kv_format_is_fp8(kFormat);
  constexpr bool kKeyShift = kFormat == KvFormat::fp8_ds_mla;  // Fp8Entry::kKeyShift
  constexpr wgmma::Elem kElem = kFp8 ? wgmma::Elem::kF16 : wgmma::Elem::kBf16;
  uint8_t* sQ = smem + kQOff;
  uint8_t* sKv = smem + kKvOff;
  uint8_t* sP = smem + kPOff;
  float* sMax = reinterpret_cast<float*>(smem + kMaxOff);
  int* sFlag = reinterpret_cast<int*>(smem + kFlagOff);
  float* sQScale = reinterpret_cast<float*>(smem + kQScaleOff);
  float* sKeyFac = reinterpret_cast<float*>(smem + kKeyFacOff);
  int* sKeyFlag = reinterpret_cast<int*>(smem + kKeyFlagOff);
  float* sAlpha = reinterpret_cast<float*>(smem + kAlphaOff);  // one-way only
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kBarOff);
  uint64_t* empty = full + kStages;
  uint64_t* p_ready = reinterpret_cast<uint64_t*>(smem + kHandBarOff);  // one-way only
  uint64_t* p_free = p_ready + 1;
  uint64_t* q_ready = reinterpret_cast<uint64_t*>(smem + kPieceBarOff);  // one-way only
  uint64_t* q_free = q_ready + 1;
  const int row_block = blockIdx.y;
  // 0 or 1: seesaw, keys wg*32..+32 of S; both forms, value columns
  // wg*256..+256 of O. Seesaw: read through a shuffle from lane 0 so that
  // ptxas knows it is warp-uniform and builds the wgmma descriptors that
  // depend on it in uniform registers.
  const int wg = kWg >= 0 ? kWg : __shfl_sync(0xffffffffu, tid / 128, 0);
  const int wtid = tid % 128, wi = wtid / 32, lane = tid % 32;
  const int g = lane / 4, c = lane % 4;
  const int r0 = 16 * wi + g;  // this thread's rows r0 and r0 + 8 of the 64
  const uint32_t aQ = ptx::smem_addr(sQ), aKv = ptx::smem_addr(sKv), aP = ptx::smem_addr(sP);
  const float kNegInf = -INFINITY;
  uint32_t cnt = 0;  // tiles consumed so far (same sequence as the producer's)

  for (int pi = piece_begin; pi < piece_end; ++pi) {
    const Piece pc = p.pieces[pi];
    const PieceInfo in = piece_info(p, pc);
    const uint32_t pk = uint32_t(pi - piece_begin);  // the one-way piece barriers' phase
    if constexpr (!kOneWay) {
      // The previous piece's wgmmas all completed (waited before its epilogue barrier).
      load_q_rows<KeySrc, kFp8>(p, sQ, sQScale, in.b, row_block, tid, key_scale<kFormat>(p));
    } else if constexpr (kWg == 1) {
      // One-way: WG1 loads Q, the first piece's here, the next ones at the end
      // of the previous piece (below), while WG0 finishes it.
      if (pi == piece_begin) {
        load_q_rows<KeySrc, kFp8, 128, kBarQ1>(p, sQ, sQScale, in.b, row_block, wtid,
                                               key_scale<kFormat>(p));
        ptx::mbar_arrive(q_ready);
      }
    } else {
      ptx::mbar_wait(q_ready, pk & 1);
    }
    int lim[2];
    row_key_limits(p, in, row_block, r0, lim);

    bool bad = in.bad_request;
    float m_run[2] = {kNegInf, kNegInf}, l_part[2] = {0.f, 0.f};
    float o[32][4];
#pragma unroll
    for (int i = 0; i < 32; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][e] = 0.f;

    if constexpr (!kOneWay) {
      for (int it = 0; it < in.n_tiles; ++it, ++cnt) {
        const int st = cnt % kStages;
        const uint32_t aTile = aKv + st * kTileBytes;
        ptx::mbar_wait(&full[st], (cnt / kStages) & 1);
        // This warpgroup's keys wg*32..+32 (producer warps 2wg, 2wg+1). fp8:
        // its factors 2^e_key are read where used (no registers held across
        // the MMAs, whose budget is full).
        uint32_t valid_bits[2];
        const bool key_shifted =
            read_stage_flags<KeySrc, kKeyShift, 32>(sFlag, sKeyFlag, st, wg * 32, valid_bits, bad);

        // ---- S[64 x 32] = Q K[wg*32..+32]^T over the 576 dims ----
        float sacc[4][4];
        mma_s<kElem, 32>(sacc, aQ, aTile, wg * 32);

        // ---- online softmax (log2 domain), row max shared by both warpgroups ----
        const int tile = pc.tile_begin + it;
        // Softmax scale of rows r0, r0 + 8 (fp8: times 2^-t of Q's row shift).
        float row_scale[2] = {p.scale_log2, p.scale_log2};
        if constexpr (kFp8) {
          row_scale[0] *= sQScale[r0];
          row_scale[1] *= sQScale[r0 + 8];
        }
        float mx[2];
        scores<KeySrc, kKeyShift, 32>(sacc, sKeyFac, st, wg * 32, key_shifted, valid_bits,
                                      tile * kTileKeys + wg * 32, lim, row_scale, c, mx);
        float* maxbuf = sMax + (cnt & 1) * 2 * kM;  // parity-double-buffered: no WAR across tiles
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
          mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
          if (c == 0) maxbuf[wg * kM + r0 + 8 * h] = mx[h];
        }
        // Both warpgroups' P.V of the previous tile completed (each waited
        // above), so after this barrier sP may be overwritten.
        ptx::named_barrier_sync(kBarMax, kMathThreads);
        float alpha[2], m_use[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float other = maxbuf[(1 - wg) * kM + r0 + 8 * h];
          const float m_new = fmaxf(m_run[h], fmaxf(mx[h], other));
          m_use[h] = m_new == kNegInf ? 0.f : m_new;  // all masked so far: avoid -inf - -inf
          alpha[h] = ptx::fast_exp2(m_run[h] - m_use[h]);
          m_run[h] = m_new;
          l_part[h] *= alpha[h];
        }
        uint32_t pk[4][2];
        exp_pack<kKeyShift, kFp8, 32>(sacc, m_use, l_part, sKeyFac, st, wg * 32, c, pk);
        // P[row][wg*32 + 8i + 2c]: chunk wg*4 + i of the 128-byte row.
        store_p<32>(sP, pk, wg * 4, r0, c);
        wgmma::fence_proxy_async();  // P's st.shared before the wgmma reads of both warpgroups
        ptx::named_barrier_sync(kBarP, kMathThreads);

        // ---- O[:, wg*256..+256] = O * alpha + P V ----
        rescale_o(o, alpha);
        // Completed here rather than at the next tile: the stage is handed
        // back to the producer as early as possible, which matters more on
        // the memory-bound shapes (two stages only) than overlapping P.V with
        // the next S in the tensor pipe.
        mma_pv_ss<kElem>(o, aP, aTile, wg * 256);
        ptx::mbar_arrive(&empty[st]);
      }
    } else if constexpr (kWg == 0) {
      // ---- one-way WG0: S for all 64 keys, the softmax, P.V columns 0..255 ----
      float row_scale[2] = {p.scale_log2, p.scale_log2};
      for (int it = 0; it < in.n_tiles; ++it, ++cnt) {
        const int st = cnt % kStages;
        // Through lane 0: warp-uniform, so K's descriptors stay in uniform registers.
        const uint32_t aTile = __shfl_sync(0xffffffffu, aKv + st * kTileBytes, 0);
        ptx::mbar_wait(&full[st], (cnt / kStages) & 1);
        uint32_t valid_bits[4];
        const bool key_shifted =
            read_stage_flags<KeySrc, kKeyShift, 64>(sFlag, sKeyFlag, st, 0, valid_bits, bad);
        float sacc[8][4];
        mma_s<kElem, 64>(sacc, aQ, aTile, 0);
        if constexpr (kFp8) {  // Q's row shift 2^-t, read where used
          row_scale[0] = p.scale_log2 * sQScale[r0];
          row_scale[1] = p.scale_log2 * sQScale[r0 + 8];
        }
        float mx[2];
        scores<KeySrc, kKeyShift, 64>(sacc, sKeyFac, st, 0, key_shifted, valid_bits,
                                      (pc.tile_begin + it) * kTileKeys, lim, row_scale, c, mx);
        float alpha[2], m_use[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
          mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
          const float m_new = fmaxf(m_run[h], mx[h]);
          m_use[h] = m_new == kNegInf ? 0.f : m_new;  // all masked so far: avoid -inf - -inf
          alpha[h] = ptx::fast_exp2(m_run[h] - m_use[h]);
          m_run[h] = m_new;
          l_part[h] *= alpha[h];
        }
        uint32_t pk[8][2];
        exp_pack<kKeyShift, kFp8, 64>(sacc, m_use, l_part, sKeyFac, st, 0, c, pk);
        // WG1's P.V of the previous tile completed: sP and sAlpha are free.
        ptx::mbar_wait(p_free, (cnt & 1) ^ 1);
        store_p_stmatrix(sP, pk, wi, lane);
        if (c == 0) {
          sAlpha[r0] = alpha[0];
          sAlpha[r0 + 8] = alpha[1];
        }
        wgmma::fence_proxy_async();  // P's st.shared before WG1's wgmma reads
        ptx::mbar_arrive(p_ready);
        rescale_o(o, alpha);
        // O[:, 0..256] += P V, P as the register A operand (the m16n8k16 A
        // fragment is the S accumulator's pairs of columns 16kk.. and 16kk + 8..).
        const uint64_t dV = desc_v(aTile, 0, 0);
        wgmma::fence();
#pragma unroll
        for (int kk = 0; kk < kTileKeys / 16; ++kk) {
          const uint32_t a[4] = {pk[2 * kk][0], pk[2 * kk][1], pk[2 * kk + 1][0],
                                 pk[2 * kk + 1][1]};
          wgmma::mma_rs<kElem, 256, true>(o, a, wgmma::desc_advance(dV, kk * 16 * 128), true);
        }
        wgmma::commit();
        wgmma::wait<0>();
        wgmma::fence_regs(o);
        ptx::mbar_arrive(&empty[st]);
      }
    } else {
      // ---- one-way WG1: P.V columns 256..511 from WG0's P ----
      for (int it = 0; it < in.n_tiles; ++it, ++cnt) {
        const int st = cnt % kStages;
        const uint32_t aTile = __shfl_sync(0xffffffffu, aKv + st * kTileBytes, 0);
        // The stage's bytes (already complete: WG0 waited for them before
        // p_ready); waited here too so that this warpgroup's own acquire
        // orders the producer's writes before its wgmma reads.
        ptx::mbar_wait(&full[st], (cnt / kStages) & 1);
        ptx::mbar_wait(p_ready, cnt & 1);
        const float alpha[2] = {sAlpha[r0], sAlpha[r0 + 8]};
        rescale_o(o, alpha);
        mma_pv_ss<kElem>(o, aP, aTile, 256);
        ptx::mbar_arrive(p_free);
        ptx::mbar_arrive(&empty[st]);
      }
    }

    if constexpr (kOneWay && kWg == 0) ptx::mbar_arrive(q_free);  // its S reads of sQ completed
    if constexpr (kOneWay && kWg == 1) {
      // The next piece's Q into sQ once WG0's last S of this piece is done.
      if (pi + 1 < piece_end) {
        ptx::mbar_wait(q_free, pk & 1);
        load_q_rows<KeySrc, kFp8, 128, kBarQ1>(p, sQ, sQScale, p.pieces[pi + 1].b, row_block, wtid,
                                               key_scale<kFormat>(p));
        ptx::mbar_arrive(q_ready);
      }
    }
    finish_piece<KeySrc, kOneWay>(p, pc, in.b, row_block, wg, r0, c, o, m_run, l_part, bad, smem,
                                  key_scale<kFormat>(p), pk);
  }
}

}  // namespace mla::cuda::decode

// The narrow math (row blocks of <= 16 rows), on the pieces above.
#include "cuda/decode/decode_narrow.cuh"

namespace mla::cuda::decode {

// KeySrc: PagedKeys (dense decode) or IndexedKeys (sparse decode),
// decode_keys.cuh. kFormat: the cache; the fp8 ones take the prefetching
// converting producer (Fp8Entry) and f16 MMAs. kTma (bf16 paged caches): full
// tiles by TMA through kv_map (unread otherwise). kForm: the math warpgroups'
// form (decode_launch.hpp): the seesaw, the one-way form (below), or the
// narrow transposed math of row blocks with <= kNarrowRows rows
// (decode_narrow.cuh; fp8 paged caches; its producer holds two tiles of raw
// entries, NarrowRegs).
//
// One-way form. WG0 computes S for all 64 keys (m64n64k16), the whole online
// softmax (row max and sum stay in its registers: no exchange), writes P and
// the rows' rescale factors to shared memory, signals WG1 (p_ready) and runs
// its own P.V (value columns 0..255) with P from registers (register-A
// wgmma). WG1 waits for p_ready, rescales its O (columns 256..511), runs P.V
// from sP and signals p_free; WG0 waits for p_free before it writes the next
// tile's P (one tile of slack: WG1's P.V of tile n overlaps WG0's S of tile
// n + 1). Each warpgroup releases the stage (`empty`) after its own wgmmas
// that read it completed. Barrier protocol: scripts/models/decode_oneway_barriers.py.
//
// kSectorPairs: the fp8 producer's raw tile in the sector-pair layout
// (produce_fp8_prefetch); the stages hold the same bytes, so the output is
// bit-identical. The narrow kernel's producer always reads sector pairs.
template <class KeySrc, KvFormat kFormat, bool kTma, MathForm kForm, bool kSectorPairs>
__global__ void __launch_bounds__(kThreads, 1)
    decode_kernel(const DecodeParams p, const __grid_constant__ CUtensorMap kv_map) {
  constexpr bool kFp8 = kv_format_is_fp8(kFormat);
  constexpr bool kOneWay = kForm == MathForm::oneway, kNarrow = kForm == MathForm::narrow;
  static_assert(!kNarrow || (kFp8 && !KeySrc::kIndexed), "narrow math: fp8 paged caches only");
  static_assert(!kSectorPairs || (kFp8 && !kNarrow), "sector pairs: the 64-row fp8 producer");
  using R = Regs<kFp8, kOneWay>;
  static_assert(!kTma || (!kFp8 && !KeySrc::kIndexed), "TMA tiles: bf16 paged caches only");
  static_assert(
      kFormat == KvFormat::bf16 || kFormat == KvFormat::fp8_ds_mla || kFormat == KvFormat::fp8_e4m3,
      "a cache format of mla/kv_cache.hpp");
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* sKv = smem + kKvOff;
  int* sFlag = reinterpret_cast<int*>(smem + kFlagOff);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kBarOff);
  uint64_t* empty = full + kStages;
  uint64_t* p_ready = reinterpret_cast<uint64_t*>(smem + kHandBarOff);  // one-way only
  uint64_t* p_free = p_ready + 1;

  const int tid = threadIdx.x;
  // The swizzle is applied on absolute shared addresses: tiles must be 1024-aligned.
  if ((ptx::smem_addr(smem) & 1023) != 0) __trap();
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbar_init(&full[s], kTma ? 1 : 128);  // every producer thread arrives, or one (TMA)
      // every math thread arrives; narrow: the one warpgroup that owns stage s
      ptx::mbar_init(&empty[s], kNarrow ? kMathThreads / 2 : kMathThreads);
    }
    if constexpr (kOneWay) {
      ptx::mbar_init(p_ready, 128);  // every WG0 thread, after its P stores
      ptx::mbar_init(p_free, 128);   // every WG1 thread, after its P.V completed
      uint64_t* piece_bars = reinterpret_cast<uint64_t*>(smem + kPieceBarOff);
      for (int i = 0; i < 4; ++i) ptx::mbar_init(&piece_bars[i], 128);  // q_*, fin_*: one WG
    }
    if constexpr (kNarrow) narrow_init_barriers(smem);
    ptx::mbar_fence_init();
  }
  __syncthreads();
  // Launched as a programmatic dependent (split/pdl.hpp): nothing global is
  // read or written before the wait; the combine may be scheduled from here
  // (it waits for this grid's completion itself).
  split::grid_dependency_wait();
  split::grid_launch_dependents();

  const int piece_begin = p.worker_begin[blockIdx.x];
  const int piece_end = p.worker_begin[blockIdx.x + 1];

  if (tid >= kMathThreads) {
    // ================= producer warpgroup =================
    if constexpr (kNarrow) {
      wgmma::setmaxnreg_inc<NarrowRegs::kProducer>();
      produce_fp8_prefetch<KeySrc, kFormat, 2>(p, smem, piece_begin, piece_end, tid - kMathThreads);
      return;
    }
    wgmma::setmaxnreg_dec<R::kProducer>();
    const int ptid = tid - kMathThreads;
    if constexpr (kFp8) {
      produce_fp8_prefetch<KeySrc, kFormat, 1, kSectorPairs>(p, smem, piece_begin, piece_end, ptid);
    } else {
      produce_bf16<KeySrc, kTma>(p, &kv_map, sKv, sFlag, full, empty, piece_begin, piece_end, ptid);
    }
    return;
  }

  // ================= math warpgroups =================
  if constexpr (kNarrow) {
    wgmma::setmaxnreg_dec<NarrowRegs::kMath>();
    narrow_math<KeySrc, kFormat>(p, smem, piece_begin, piece_end, blockIdx.y, tid);
    return;
  }
  // The one-way form's warpgroups take different register budgets, so each
  // runs its own copy of the loop to its end (code after a join would get the
  // smaller budget).
  if constexpr (kOneWay) {
    if (tid < 128) {
      wgmma::setmaxnreg_inc<R::kMath0>();
      math_warpgroup<KeySrc, kFormat, kOneWay, 0>(p, smem, piece_begin, piece_end, tid);
    } else {
      if constexpr (R::kMath1 > kLaunchRegs)
        wgmma::setmaxnreg_inc<R::kMath1>();
      else
        wgmma::setmaxnreg_dec<R::kMath1>();
      math_warpgroup<KeySrc, kFormat, kOneWay, 1>(p, smem, piece_begin, piece_end, tid);
    }
  } else {
    wgmma::setmaxnreg_inc<R::kMath0>();
    math_warpgroup<KeySrc, kFormat, kOneWay, -1>(p, smem, piece_begin, piece_end, tid);
  }
}

// Launch of one instantiation (grid (p.num_workers, row_blocks)).
template <class KeySrc, KvFormat kFormat, bool kTma, MathForm kForm, bool kSectorPairs>
cudaError_t launch_decode_kernel(const DecodeParams& p, int row_blocks, cudaStream_t stream,
                                 const CUtensorMap& kv_map) {
  auto* kernel = decode_kernel<KeySrc, kFormat, kTma, kForm, kSectorPairs>;
  // Per-function attribute, legal during stream capture: set on every launch.
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes));
  if (e != cudaSuccess) return e;
  return split::launch_dependent(kernel, dim3(p.num_workers, row_blocks), dim3(kThreads),
                                 kSmemBytes, stream, p, kv_map);
}

}  // namespace mla::cuda::decode
