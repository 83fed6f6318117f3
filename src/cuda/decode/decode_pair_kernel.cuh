// Dense bf16 decode, "v9": the two math warpgroups take alternate 64-key
// tiles for S (docs/perf-log.md v9). Same contract, params, schedule,
// workspace, producer pieces and shared-memory map as the v4-v8 kernel
// (decode_wgmma_kernel.cuh), bf16 caches whose tiles go by TMA only (the
// dispatch runs v8's cp.async twin otherwise).
//
// Why: v8's stamps give S 2530 of a tile's ~4800 cycles for 1152 of MMA: each
// warpgroup's m64n32k16 SS re-reads all of Q for half the keys (192 B of
// operands per MMA cycle, over shared memory's 128). Here the tiles come in
// pairs, tile a in stage 0 and tile b in stage 1; warpgroup w computes the
// whole S of the tile in stage w (m64n64k16 SS: 128 B per MMA cycle, Q read
// once per tile), its row max, P and l. Both then need the pair's common row
// max (the only cross-warpgroup exchange before the exp, one barrier, as v8)
// so both P are relative to the same max and O needs one rescale per pair.
// Each warpgroup still owns half of the value columns:
//   O[:, 256w..+256] = alpha O + P_a V_a[:, 256w..] + P_b V_b[:, 256w..]
// P_a lives in stage 0's rope block (only S reads the rope dims), P_b in sP.
//
// Two stages used as a pair leave no tile to prefetch into, so the stages are
// released, and refilled by TMA, in two parts: Lo = blocks 0-3 (value
// columns 0-255: read by S and by warpgroup 0's P.V) and Hi = blocks 4-8
// (columns 256-511 and the rope dims). Per pair, the parts free up in this
// order, and the producer refills them in it:
//   stage 0 Lo  after WG 0's P.V of its own tile (P_a V_a[:, 0..255])
//   stage 1 Hi  after WG 1's P.V of its own tile (P_b V_b[:, 256..511])
//   stage 0 Hi  after both warpgroups' P.V with P_a (rope block = P_a)
//   stage 1 Lo  after WG 0's P.V with P_b
// and each warpgroup's S starts on the part of its stage refilled first
// (WG 0: blocks 0..8, WG 1: blocks 4..8 then 0..3), so the next pair's S runs
// while its second parts are still landing.
// v9b (kChained): the pair's max is chained instead of exchanged: WG 0 takes
// m_a = max(m_run, its row max), hands it over and issues its own P.V at once
// (under WG 1's softmax, and stage 0 Lo frees earlier); WG 1 takes m_b =
// max(m_a, its row max) and runs as v9; WG 0 then rescales its P_a (kept in
// fp32 registers), O and l by 2^(m_a - m_b) and hands P_a over for WG 1's
// P.V. Hand-offs are named-barrier arrive/sync pairs (m_a, m_b, P_b, P_a).
// A piece with an odd tile count ends with a pair whose second tile is past
// the piece: the producer zero-fills it (v4's cp.async path, every key past
// key_end), its keys are masked, P_b = 0.
#pragma once
#include "cuda/decode/decode_wgmma_kernel.cuh"

namespace mla::cuda::decode::v9 {

using v4::kBarMax;
using v4::kBarP;
using v4::kBarProd;
using v4::kBlockBytes;
using v4::kBlocks;
using v4::kM;
using v4::kMathThreads;
using v4::kStages;
using v4::kThreads;
using v4::kTileBytes;

// Named barriers of v9b's hand-offs (v4's 1-6 stay as they are): m_a ready,
// m_b ready, P_b ready, P_a (relative to m_b) ready, and one per warpgroup
// for its own P stores before its own wgmma.
inline constexpr int kBarMa = 7, kBarMb = 8, kBarPb = 9, kBarPa = 10, kBarOwnP = 11;
inline constexpr int kLo = 0, kHi = 1;      // the two parts of a stage (index of its barriers)
inline constexpr int kLoBlocks = 4;         // Lo: blocks 0-3 = value columns 0-255 (WG 0's half)
inline constexpr int kSteps = kBlocks * 4;  // k16 steps of S over the 576 dims
static_assert(kStages == 2, "a pair is one tile per stage, one stage per math warpgroup");
static_assert(kLoBlocks * 64 * 2 == kDv, "the Lo part is WG 0's half of the value columns");
// S order of WG w (rotated by 4w blocks: its own stage's first-loaded part
// first): step j < 20 reads block j/4 + 4w, step j >= 20 block j/4 - 5w;
// WG 1 waits for Lo at step 16 (block 8, still Hi): 4 steps early, so both
// warpgroups run one code with the wait at one step.
inline constexpr int kSecondPartStep = 16;
inline constexpr int kRotateSteps = 20;

// Shared memory: v4's map; v9's barriers replace v4's: full and empty per
// stage and part, [stage][part].
inline constexpr size_t kBarOff = v4::kBarOff;
inline constexpr size_t kBadOff = kBarOff + 2 * kStages * 2 * 8;  // i32 [2 wg] (v9b)
inline constexpr size_t kSmemBytes = kBadOff + 2 * 4;
static_assert(kSmemBytes <= 227 * 1024, "one CTA must fit the 227 KB a Hopper block may use");
// Arrivals that free a part (empty[stage][part]): one warpgroup each, but
// stage 0 Hi holds P_a, which both warpgroups' P.V read.
__host__ __device__ constexpr int empty_count(int stage, int part) {
  return stage == 0 && part == kHi ? 2 * 128 : 128;
}

__device__ __forceinline__ int part_begin(int part) {
  return part == kLo ? 0 : kLoBlocks;
}
__device__ __forceinline__ int part_end(int part) {
  return part == kLo ? kLoBlocks : kBlocks;
}

// Phase stamps (kStamped, MLA_DECODE_KERNEL=v9stamps): cycles per pair of
// the first CTAs. Math: wait for the own stage's first part, S steps 0-15
// issued, wait for the second part, the rest of S issued..done, row max,
// max barrier, exp + P store + O rescale, P barrier, both P.V issued..own
// done, other done + releases, the rest (Q load, epilogue). Producer: waits
// for free parts, issue (incl. the cp.async tiles and the pair barrier).
enum PairPhase {
  kFull1,
  kS1,
  kFull2,
  kS2,
  kMax,
  kBarMaxW,
  kExp,
  kBarPW,
  kPvOwn,
  kPvOther,
  kOther,
  kPairPhases
};
enum PairProdPhase { kPEmptyW, kPIssueW, kPairProdPhases };
// Saved per CTA (blockIdx (0..1, 0..1)) and role (WG 0, WG 1, producer):
// the phase sums, the pair count last.
inline constexpr int kStampCtas = 2, kStampSlots = kPairPhases + 1;
__device__ unsigned long long g_pair_stamps[kStampCtas][kStampCtas][3][kStampSlots];
__device__ __forceinline__ void save_stamps(int role, bool writer, uint32_t pairs,
                                            const unsigned* acc, int n) {
  if (!writer || blockIdx.x >= kStampCtas || blockIdx.y >= kStampCtas) return;
  unsigned long long* dst = g_pair_stamps[blockIdx.x][blockIdx.y][role];
  for (int i = 0; i < n; ++i) dst[i] = acc[i];
  dst[kStampSlots - 1] = pairs;
}

// The producer warpgroup: the worker's tiles in pairs, each stage in two
// parts in the order they are freed (see the top). A tile with all 64 keys
// valid goes by TMA part by part; any other (a request's partial last tile,
// the phantom second tile of an odd piece) by v4's cp.async path, whole,
// once both its parts are free.
// Parity waits on `empty` are only unambiguous within one phase, so every
// thread waits for every part, every pair, and the part's next fill is issued
// only after the named barrier that follows all 128 waits: no thread can come
// to a wait with its barrier a phase further on (the fill that phase needs is
// not issued yet), nor run ahead to a later pair's wait and pass it on the
// phase two before (the barrier it last passed needed the phase in between).
// The first version (thread 0 issued right after its own wait, one barrier
// per pair) could hang the first way when a thread was late to its wait by a
// whole pair's math: scripts/s3/decode9_protocol_sim.py finds it. Each pair
// has at least two of these barriers (k = 2, 3).
template <bool kStamped>
__device__ __forceinline__ void produce_pairs(const DecodeParams& p, const CUtensorMap* map,
                                              uint8_t* sKv, int* sFlag, uint64_t* full,
                                              uint64_t* empty, int piece_begin, int piece_end,
                                              int ptid) {
  v4::PhaseClock<kStamped, kPairProdPhases> clk;
  uint32_t pair = 0;
  for (int pi = piece_begin; pi < piece_end; ++pi) {
    const Piece pc = p.pieces[pi];
    const v4::PieceInfo in = v4::piece_info(p, pc);
    for (int it = 0; it < in.n_tiles; it += 2, ++pair) {
      const uint32_t parity = (pair & 1) ^ 1;
      clk.lap(kPIssueW);
#pragma unroll 1                     // unrolled, the 40-register producer spilled 400 B
      for (int k = 0; k < 4; ++k) {  // (stage, part): (0, Lo), (1, Hi), (0, Hi), (1, Lo)
        const int st = k & 1, part = (k & 1) ^ (k >> 1);
        const int tile = pc.tile_begin + it + st;
        uint8_t* stage = sKv + st * kTileBytes;
        uint64_t* f = full + 2 * st;
        uint64_t* e = empty + 2 * st;
        if ((tile + 1) * kTileKeys <= in.key_end) {  // uniform over the warpgroup
          clk.lap(kPIssueW);
          ptx::mbar_wait(&e[part], parity);
          clk.lap(kPEmptyW);
          // Issue only once every thread has seen the part free (see below).
          ptx::named_barrier_sync(kBarProd, 128);
          if (ptid == 0)
            v4::produce_tile_tma(p, map, stage, k < 2 ? sFlag + 4 * st : nullptr, &f[part], in.b,
                                 tile, part_begin(part), part_end(part));
        } else if (k >= 2) {  // the stage's second part in the order: both parts free now
          clk.lap(kPIssueW);
          ptx::mbar_wait(&e[kLo], parity);
          ptx::mbar_wait(&e[kHi], parity);
          clk.lap(kPEmptyW);
          const bool bit =
              v4::produce_tile<false, PagedKeys>(p, stage, in.b, tile, in.key_end, ptid);
          // stage_flag is a full-warp vote (__any_sync): all 32 lanes, never
          // inside the lane-0 branch (one lane alone in it hung every v9 run).
          const int flag = PagedKeys::stage_flag(bit);
          if ((ptid & 31) == 0) sFlag[4 * st + ptid / 32] = flag;
          ptx::cp_async_commit();
          ptx::cp_async_wait<0>();
          wgmma::fence_proxy_async();  // the tile's generic writes before wgmma's async reads
          ptx::named_barrier_sync(kBarProd, 128);
          if (ptid == 0) {
            ptx::mbar_arrive(&f[kLo]);
            ptx::mbar_arrive(&f[kHi]);
          }
        }
      }
    }
  }
  clk.lap(kPIssueW);
  if constexpr (kStamped) save_stamps(2, ptid == 0, pair, clk.acc, kPairProdPhases);
}

// Descriptor of a K-major SW128 operand at `base` + `off` bytes: the start
// address field is addr >> 4 in its low 14 bits, and shared-window addresses
// stay below 2^18, so adding off >> 4 to the base's descriptor never carries.
__device__ __forceinline__ uint64_t desc_at(uint64_t base_desc, uint32_t off) {
  return base_desc + (off >> 4);
}

// acc = S of the tile in stage `wg` (m64n64k16 SS over the 576 dims; key
// 8i + 2c + (e & 1) of the tile), in the rotated order, waiting for each
// part of the stage right before its first step.
template <class Clock>
__device__ __forceinline__ void s_whole_tile(float (&acc)[8][4], uint32_t aQ, uint32_t aStage,
                                             uint64_t* full_stage, uint32_t parity, int wg,
                                             Clock& clk) {
  // Steps j < 20 from block 4 wg; steps j >= 20 from block 5 (WG 0) or 0 (WG 1).
  const uint32_t first = 4 * wg * kBlockBytes;
  const uint32_t second = 5 * (1 - wg) * kBlockBytes;
  const uint64_t q1 = wgmma::desc_sw128(aQ + first, 16, 1024);
  const uint64_t k1 = wgmma::desc_sw128(aStage + first, 16, 1024);
  const uint64_t q2 = wgmma::desc_sw128(aQ + second, 16, 1024);
  const uint64_t k2 = wgmma::desc_sw128(aStage + second, 16, 1024);
  ptx::mbar_wait(&full_stage[wg], parity);  // WG 0's first part is Lo, WG 1's Hi
  clk.lap(kFull1);
  wgmma::fence();
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    if (j == kSecondPartStep) {  // the wait's branch needs a fence before the next wgmma
      clk.lap(kS1);
      ptx::mbar_wait(&full_stage[1 - wg], parity);  // (ptxas injects one otherwise, C7519)
      clk.lap(kFull2);
      wgmma::fence();
    }
    const bool one = j < kRotateSteps;
    const uint32_t off = (one ? j / 4 : j / 4 - 5) * kBlockBytes + (j % 4) * 32;
    wgmma::m64n64k16_ss(acc, desc_at(one ? q1 : q2, off), desc_at(one ? k1 : k2, off), j > 0);
  }
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_regs(acc);
  clk.lap(kS2);
}

// ---- pieces of the math warpgroups' pair step (v9 and v9b) ----
// Scales and masks S in place (log2 domain; keys >= lim[h] to -inf) and
// returns the row maxima of this thread's rows over the quad.
__device__ __forceinline__ void mask_rowmax(float (&acc)[8][4], int key0, const int (&lim)[2],
                                            int c, float scale_log2, float (&mx)[2]) {
  mx[0] = mx[1] = -INFINITY;
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = e / 2;
      const int key = key0 + 8 * i + 2 * c + (e & 1);
      const float s = key < lim[h] ? acc[i][e] * scale_log2 : -INFINITY;
      acc[i][e] = s;
      mx[h] = fmaxf(mx[h], s);
    }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
  }
}
// Moves the running max to m_new: returns its exponent base (0 while every
// key so far is masked: no -inf - -inf) and sets alpha = 2^(m_run - m_new),
// exactly 1 where the max did not move (so the lazy rescale skips it).
__device__ __forceinline__ void move_max(float (&m_run)[2], const float (&m_new)[2],
                                         float (&m_use)[2], float (&alpha)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    m_use[h] = m_new[h] == -INFINITY ? 0.f : m_new[h];
    alpha[h] = m_new[h] == m_run[h] ? 1.f : ptx::fast_exp2(m_run[h] - m_use[h]);
    m_run[h] = m_new[h];
  }
}
// acc = 2^(acc - m_use) in place; l_part = l_part * alpha + the row sums.
__device__ __forceinline__ void exp_rows(float (&acc)[8][4], const float (&m_use)[2],
                                         const float (&alpha)[2], float (&l_part)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) l_part[h] *= alpha[h];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      acc[i][e] = ptx::fast_exp2(acc[i][e] - m_use[e / 2]);
      l_part[e / 2] += acc[i][e];
    }
}
// P * scale (per row) as bf16 into a K-major SW128 64 x 64 buffer (key
// chunk i of row r at 16-byte slot i ^ (r & 7)), then the proxy fence for
// the wgmmas that read it.
__device__ __forceinline__ void store_p(const float (&pr)[8][4], uint8_t* buf, int r0, int c,
                                        const float (&scale)[2]) {
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + 8 * h;
      *reinterpret_cast<uint32_t*>(buf + r * 128 + ((i ^ (r & 7)) << 4) + 4 * c) =
          ptx::pack_bf16x2(pr[i][2 * h] * scale[h], pr[i][2 * h + 1] * scale[h]);
    }
  wgmma::fence_proxy_async();
}
// O *= alpha, skipped where every alpha of the warp is exactly 1 (warp-
// uniform; bitwise the same): past the first tiles the maxima rarely move.
__device__ __forceinline__ void rescale_o(float (&o)[32][4], const float (&alpha)[2]) {
  if (__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) return;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    o[i][0] *= alpha[0];
    o[i][1] *= alpha[0];
    o[i][2] *= alpha[1];
    o[i][3] *= alpha[1];
  }
}
// One commit group: O[:, 256 wg..] += P V over the 64 keys (P: K-major
// 64 x 64 at p_desc; V: MN-major, the warpgroup's 256 columns at v_desc).
__device__ __forceinline__ void pv_group(float (&o)[32][4], uint64_t p_desc, uint64_t v_desc) {
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < kTileKeys / 16; ++kk)
    wgmma::m64n256k16_ss_tb(o, desc_at(p_desc, kk * 32), desc_at(v_desc, kk * 16 * 128), true);
  wgmma::commit();
}

template <bool kStamped, bool kChained>
__global__ void __launch_bounds__(kThreads, 1)
    decode_pair_kernel(const DecodeParams p, const __grid_constant__ CUtensorMap kv_map) {
  using Regs = v4::Regs<false>;
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* sQ = smem + v4::kQOff;
  uint8_t* sKv = smem + v4::kKvOff;
  uint8_t* sP = smem + v4::kPOff;
  float* sMax = reinterpret_cast<float*>(smem + v4::kMaxOff);
  float* sL = reinterpret_cast<float*>(smem + v4::kLOff);
  int* sFlag = reinterpret_cast<int*>(smem + v4::kFlagOff);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kBarOff);  // [stage][part]
  uint64_t* empty = full + 2 * kStages;                          // [stage][part]

  const int tid = threadIdx.x;
  if ((ptx::smem_addr(smem) & 1023) != 0) __trap();  // the swizzle needs 1024-aligned tiles
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s)
      for (int part = 0; part < 2; ++part) {
        ptx::mbar_init(&full[2 * s + part], 1);  // one arrive (+ TMA bytes) per part
        ptx::mbar_init(&empty[2 * s + part], empty_count(s, part));
      }
    ptx::mbar_fence_init();
  }
  __syncthreads();

  const int row_block = blockIdx.y;
  const int piece_begin = p.worker_begin[blockIdx.x];
  const int piece_end = p.worker_begin[blockIdx.x + 1];

  if (tid >= kMathThreads) {
    wgmma::setmaxnreg_dec<Regs::kProducer>();
    produce_pairs<kStamped>(p, &kv_map, sKv, sFlag, full, empty, piece_begin, piece_end,
                            tid - kMathThreads);
    return;
  }

  // ================= math warpgroups =================
  wgmma::setmaxnreg_inc<Regs::kMath>();
  v4::PhaseClock<kStamped, kPairPhases> clk;
  const int wg = tid / 128;  // S of the tile in stage wg; value columns wg*256..+256 of O
  const int wtid = tid % 128, wi = wtid / 32, lane = tid % 32;
  const int g = lane / 4, c = lane % 4;
  const int r0 = 16 * wi + g;  // this thread's rows r0 and r0 + 8 of the 64
  const uint32_t aQ = ptx::smem_addr(sQ), aKv = ptx::smem_addr(sKv), aP = ptx::smem_addr(sP);
  const uint32_t aOwn = aKv + wg * kTileBytes, aOther = aKv + (1 - wg) * kTileBytes;
  // P_a: stage 0's rope block; P_b: sP.
  const uint32_t aPa = aKv + (kBlocks - 1) * kBlockBytes;
  const uint32_t aPOwn = wg == 0 ? aPa : aP, aPOther = wg == 0 ? aP : aPa;
  uint8_t* pOwn = wg == 0 ? sKv + (kBlocks - 1) * kBlockBytes : sP;
  // P.V operands: V MN-major, 256 columns from block 4 wg (v4::desc_v).
  const uint64_t pown = wgmma::desc_sw128(aPOwn, 16, 1024);
  const uint64_t poth = wgmma::desc_sw128(aPOther, 16, 1024);
  const uint64_t vown = wgmma::desc_sw128(aOwn + 4 * wg * kBlockBytes, kBlockBytes, 1024);
  const uint64_t voth = wgmma::desc_sw128(aOther + 4 * wg * kBlockBytes, kBlockBytes, 1024);
  const float kOnes[2] = {1.f, 1.f};
  const float kNegInf = -INFINITY;
  uint32_t pair = 0;  // pairs consumed so far (same sequence as the producer's)

  for (int pi = piece_begin; pi < piece_end; ++pi) {
    const Piece pc = p.pieces[pi];
    const v4::PieceInfo in = v4::piece_info(p, pc);
    v4::load_q_rows<PagedKeys>(p, sQ, in.b, row_block, tid);
    int lim[2];
    v4::row_key_limits(p, in, row_block, r0, lim);

    bool bad = in.bad_request;
    float m_run[2] = {kNegInf, kNegInf}, l_part[2] = {0.f, 0.f};
    float o[32][4];
#pragma unroll
    for (int i = 0; i < 32; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][e] = 0.f;

    for (int it = 0; it < in.n_tiles; it += 2, ++pair) {
      const uint32_t parity = pair & 1;
      float acc[8][4];
      clk.lap(kOther);
      s_whole_tile(acc, aQ, aOwn, full + 2 * wg, parity, wg, clk);

      const int key0 = (pc.tile_begin + it + wg) * kTileKeys;
      float mx[2], m_new[2], m_use[2], alpha[2];
      mask_rowmax(acc, key0, lim, c, p.scale_log2, mx);
      clk.lap(kMax);
      if constexpr (!kChained) {
        // ---- v9: both warpgroups wait for the pair's max ----
        float* maxbuf = sMax + (pair & 1) * 2 * kM;  // parity-double-buffered: no WAR
        if (c == 0) {
          maxbuf[wg * kM + r0] = mx[0];
          maxbuf[wg * kM + r0 + 8] = mx[1];
        }
        // Both warpgroups' P.V of the previous pair completed (each waited),
        // so after this barrier sP may be overwritten; both stages' flags
        // are visible (each warpgroup waited for its stage before it).
        ptx::named_barrier_sync(kBarMax, kMathThreads);
        clk.lap(kBarMaxW);
#pragma unroll
        for (int f = 0; f < 2 * 4; ++f) bad |= sFlag[f] != 0;
#pragma unroll
        for (int h = 0; h < 2; ++h)
          m_new[h] = fmaxf(m_run[h], fmaxf(mx[h], maxbuf[(1 - wg) * kM + r0 + 8 * h]));
        move_max(m_run, m_new, m_use, alpha);
        exp_rows(acc, m_use, alpha, l_part);
        store_p(acc, pOwn, r0, c, kOnes);
        rescale_o(o, alpha);
        clk.lap(kExp);
        ptx::named_barrier_sync(kBarP, kMathThreads);
        clk.lap(kBarPW);
        // O[:, wg*256..+256] += P_own V_own, then P_other V_other.
        pv_group(o, pown, vown);
        pv_group(o, poth, voth);
        wgmma::wait<1>();  // the own tile's P.V done: release what only it still read (top)
        if (wg == 0) {
          ptx::mbar_arrive(&empty[2 * 0 + kLo]);
          ptx::mbar_arrive(&empty[2 * 0 + kHi]);
        } else {
          ptx::mbar_arrive(&empty[2 * 1 + kHi]);
        }
        clk.lap(kPvOwn);
        wgmma::wait<0>();
        wgmma::fence_regs(o);
        ptx::mbar_arrive(wg == 0 ? &empty[2 * 1 + kLo] : &empty[2 * 0 + kHi]);
        clk.lap(kPvOther);
      } else if (wg == 0) {
        // ---- v9b, WG 0 (tile a): its own P.V before tile b's max is known ----
        // (sMax: m_a at [0, 64), m_b at [64, 128); each written once per pair
        // and read before the hand-off that lets its writer go on.)
#pragma unroll
        for (int f = 0; f < 4; ++f) bad |= sFlag[f] != 0;  // own stage: read before its release
#pragma unroll
        for (int h = 0; h < 2; ++h) m_new[h] = fmaxf(m_run[h], mx[h]);
        if (c == 0) {
          sMax[r0] = m_new[0];
          sMax[r0 + 8] = m_new[1];
        }
        ptx::named_barrier_arrive(kBarMa, kMathThreads);
        move_max(m_run, m_new, m_use, alpha);
        exp_rows(acc, m_use, alpha, l_part);
        store_p(acc, pOwn, r0, c, kOnes);
        rescale_o(o, alpha);
        ptx::named_barrier_sync(kBarOwnP + 0, 128);  // WG 0's P stores before its wgmma
        clk.lap(kExp);
        pv_group(o, pown, vown);  // O[:, 0..255] += P_a V_a (relative to m_a)
        ptx::named_barrier_sync(kBarMb, kMathThreads);
        clk.lap(kBarMaxW);
#pragma unroll
        for (int h = 0; h < 2; ++h) m_new[h] = sMax[kM + r0 + 8 * h];  // m_b >= m_a
        float s_b[2];  // 2^(m_a - m_b): P_a, O and l to m_b (0 where m_a is -inf: zeros anyway)
        move_max(m_run, m_new, m_use, s_b);
        wgmma::wait<0>();
        wgmma::fence_regs(o);
        ptx::mbar_arrive(&empty[2 * 0 + kLo]);  // stage 0 Lo: only P_a V_a read it
        ptx::mbar_arrive(&empty[2 * 0 + kHi]);  // WG 0's reads of stage 0 Hi done (P_a)
        clk.lap(kPvOwn);
        store_p(acc, pOwn, r0, c, s_b);  // P_a relative to m_b, for WG 1 (over the used P_a)
        rescale_o(o, s_b);
#pragma unroll
        for (int h = 0; h < 2; ++h) l_part[h] *= s_b[h];
        ptx::named_barrier_arrive(kBarPa, kMathThreads);
        ptx::named_barrier_sync(kBarPb, kMathThreads);
        clk.lap(kBarPW);
        pv_group(o, poth, voth);  // O[:, 0..255] += P_b V_b
        wgmma::wait<0>();
        wgmma::fence_regs(o);
        ptx::mbar_arrive(&empty[2 * 1 + kLo]);
        clk.lap(kPvOther);
      } else {
        // ---- v9b, WG 1 (tile b): m_b = max(m_a, its own), then as v9 ----
#pragma unroll
        for (int f = 4; f < 8; ++f) bad |= sFlag[f] != 0;  // own stage: read before its release
        ptx::named_barrier_sync(kBarMa, kMathThreads);
        clk.lap(kBarMaxW);
#pragma unroll
        for (int h = 0; h < 2; ++h) m_new[h] = fmaxf(sMax[r0 + 8 * h], mx[h]);
        if (c == 0) {
          sMax[kM + r0] = m_new[0];
          sMax[kM + r0 + 8] = m_new[1];
        }
        ptx::named_barrier_arrive(kBarMb, kMathThreads);
        move_max(m_run, m_new, m_use, alpha);
        exp_rows(acc, m_use, alpha, l_part);
        store_p(acc, pOwn, r0, c, kOnes);
        rescale_o(o, alpha);
        ptx::named_barrier_sync(kBarOwnP + 1, 128);  // WG 1's P stores before its wgmma
        ptx::named_barrier_arrive(kBarPb, kMathThreads);
        clk.lap(kExp);
        pv_group(o, pown, vown);  // O[:, 256..511] += P_b V_b
        wgmma::wait<0>();
        wgmma::fence_regs(o);
        ptx::mbar_arrive(&empty[2 * 1 + kHi]);
        clk.lap(kPvOwn);
        ptx::named_barrier_sync(kBarPa, kMathThreads);
        clk.lap(kBarPW);
        pv_group(o, poth, voth);  // O[:, 256..511] += P_a V_a (P_a relative to m_b)
        wgmma::wait<0>();
        wgmma::fence_regs(o);
        ptx::mbar_arrive(&empty[2 * 0 + kHi]);
        clk.lap(kPvOther);
      }
    }

    if constexpr (kChained) {  // each warpgroup read only its own stage's flags
      int* sBad = reinterpret_cast<int*>(smem + kBadOff);
      if (wtid == 0) sBad[wg] = bad;
      ptx::named_barrier_sync(kBarMax, kMathThreads);
      bad = sBad[0] != 0 || sBad[1] != 0;
    }
    v4::finish_piece<PagedKeys>(p, pc, in.b, row_block, wg, r0, c, o, m_run, l_part, bad, sL);
  }
  clk.lap(kOther);
  if constexpr (kStamped) save_stamps(wg, wtid == 0, pair, clk.acc, kPairPhases);
}

// Prints what the stamped kernel saved (one thread; launched after it): a
// printf inside the decode kernel made ptxas serialise every wgmma (C7510).
__global__ void print_pair_stamps() {
  for (int cta = 0; cta < kStampCtas; ++cta)
    for (int rb = 0; rb < kStampCtas; ++rb) {
      const unsigned long long* m0 = g_pair_stamps[cta][rb][0];
      const unsigned long long* m1 = g_pair_stamps[cta][rb][1];
      const unsigned long long* pr = g_pair_stamps[cta][rb][2];
      for (int w = 0; w < 2; ++w) {
        const unsigned long long* m = w ? m1 : m0;
        const unsigned long long n = m[kStampSlots - 1];
        if (n == 0) continue;
        printf(
            "stamps v9 cta %d.%d wg %d pairs %llu per pair: full1 %llu S1 %llu full2 %llu S2 %llu "
            "max %llu barmax %llu exp %llu barp %llu pv_own %llu pv_other %llu other %llu\n",
            cta, rb, w, n, m[kFull1] / n, m[kS1] / n, m[kFull2] / n, m[kS2] / n, m[kMax] / n,
            m[kBarMaxW] / n, m[kExp] / n, m[kBarPW] / n, m[kPvOwn] / n, m[kPvOther] / n,
            m[kOther] / n);
      }
      const unsigned long long n = pr[kStampSlots - 1];
      if (n > 0)
        printf("stamps v9 cta %d.%d producer pairs %llu per pair: empty %llu issue %llu\n", cta, rb,
               n, pr[kPEmptyW] / n, pr[kPIssueW] / n);
    }
}

template <bool kStamped, bool kChained>
cudaError_t launch_pair(const DecodeParams& p, int row_blocks, cudaStream_t stream,
                        const CUtensorMap& kv_map) {
  auto* kernel = decode_pair_kernel<kStamped, kChained>;
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes));
  if (e != cudaSuccess) return e;
  kernel<<<dim3(p.num_workers, row_blocks), kThreads, kSmemBytes, stream>>>(p, kv_map);
  if constexpr (kStamped) {  // diagnostics: the CTAs that ran no pair keep 0 and print nothing
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    print_pair_stamps<<<1, 1, 0, stream>>>();
  }
  return cudaGetLastError();
}

}  // namespace mla::cuda::decode::v9
