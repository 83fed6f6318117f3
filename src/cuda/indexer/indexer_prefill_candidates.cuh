// The candidate sink of the prefill indexer kernel (indexer_prefill_wgmma_kernel.cuh)
// for the fused prefill select (indexer_prefill_fused.cu): instead of writing
// every logit, each row keeps only the logits that can still be in its top-k.
//
// Bound. Each of the CTA's 8 rows has a histogram of kBins bins over the top
// kBinBits bits of the order-preserving key (topk_key: sign, 8 exponent bits,
// 2 mantissa bits) of the logits it kept, and a bound L (a bin's lower edge,
// starting at 1: every candidate). A logit enters when key >= L. At refresh
// tiles warp w of consumer c rescans row 4c + w from the top and sets L to the
// lower edge of the highest bin b whose bins >= b hold at least k counted
// logits: k logits of the row are >= L, so a logit with a key below L is
// beaten by k others and is not in the row's top-k, whatever the ties. Only
// logits >= the L of their time are counted, which leaves the counts of the
// bins >= L exact, so the bound only rises. Refresh tiles: 7, then every
// max(8, (i + 1) / 8) tiles (the bound moves by ~1/n per key, so a refresh
// per 12.5% more keys costs ~1/8 more entries between refreshes than a
// continuous bound, and a long row rescans ~40 times, not once per 8 tiles: a
// rescan is ~1000 cycles on the epilogue's critical path). Counts are integer
// shared atomics and the refresh tiles are fixed: the kept set does not
// depend on timing (deterministic).
//
// Buffer. Row r's entries go to logits[r][slot], pos[r][slot] in ascending
// position: within a tile a thread's two keys are 16w + g and 16w + g + 8, so
// ballots over the lanes of token t give each entry its slot among the warp's
// (first keys by g, then second keys by g), and the 4 warps' counts order the
// warps. The counts of tile i are exchanged through shared memory (slot i % 2)
// and read after the consumer's turn barrier of tile i + 1, which all 128 of
// its threads must reach: the entries of tile i are stored one tile late (the
// thread keeps their values and ballots), so no barrier is added per tile.
// The last tile's go after one barrier in finish(). Tiles arrive in order. The
// row's count goes on past `cap` (entries past it are dropped); a row with
// count > cap is appended to the overflow list and recomputed by the unfused
// path, so an overflow never gives a wrong set.
//
// Shared-memory hand-overs (scripts/models/indexer_prefill_barriers.py models
// them): the histograms and bounds are set up before the weights barrier; the
// counts of tile i are written before turn barrier i + 1 and read after it, and
// slot i % 2 is written again at tile i + 2, after turn barrier i + 2, which
// every reader reaches after its reads; at a refresh tile the increments of
// every warp come before kBarCand + c and the rescan after it, and the next
// increments come after the next turn barrier; a bound written at tile i is
// read from tile i + 1 on, after that turn barrier, and the reads of tile i
// happen before kBarCand + c of tile i, which precedes the write.
#pragma once
#include <cstdint>

#include "cuda/indexer/indexer_prefill_wgmma_kernel.cuh"
#include "cuda/indexer/indexer_select.hpp"
#include "cuda/topk/topk_common.cuh"

namespace mla::cuda::indexer::prefill_wgmma {

constexpr int kBinBits = 11;              // sign, 8 exponent bits, 2 mantissa bits
constexpr int kBins = 1 << kBinBits;      // 2048 bins: 8 KB per row
constexpr int kBinShift = 32 - kBinBits;  // bin of a key: key >> kBinShift
constexpr int kRefreshTiles = 8;          // the first rescan at tile 7, then at least 8 apart
constexpr int kRefreshGrowth = 8;         // and at most (i + 1) / 8 apart
static_assert(kBins == 32 * 64, "the scan gives each lane 64 bins, then 2 of one lane's 64");

struct CandidateSink {
  using Args = CandidateArgs;
  struct Shared {
    uint32_t hist[kTokens][kBins];
    uint32_t bound[kTokens];
    uint32_t warp_counts[2][kConsumers][kTokensPerWg][4];  // [tile % 2][consumer][token][warp]
  };
  static constexpr int kSmemBytes = int(sizeof(Shared));
  static_assert(Smem::alloc(kSmemBytes) <= 227 * 1024, "one CTA per SM with the histograms");

  const Args& a;
  Shared* s;
  uint32_t row_base;  // tok * cap
  uint32_t cap;       // a.cap (< 2^31: the workspace's rows)
  int c, warp, lane, t;
  bool valid;
  int64_t tok;
  uint32_t count = 0;  // entries of token 4c + t so far (the same in every lane of that token)
  int next_refresh = kRefreshTiles - 1;
  int tiles = 0;  // tiles seen
  // The previous tile's entries, stored at the next tile: values, ballots, first key.
  float pv0 = 0.f, pv1 = 0.f;
  uint32_t pb0 = 0u, pb1 = 0u;
  int32_t ppos = 0;

  // A CTA without a tile keeps nothing: its rows' counts are 0.
  __device__ static void before(const Args& a, const IndexerLogitsParams&, const Block& blk, int c,
                                int wtid) {
    const int q = c * kTokensPerWg + wtid;
    if (blk.ntiles == 0 && wtid < kTokensPerWg && q < blk.nq) a.counts[blk.tok0 + q] = 0;
  }

  __device__ CandidateSink(const Args& args, const IndexerLogitsParams&, uint8_t* smem,
                           const Block&, int c_, int warp_, int lane_, bool valid_, int64_t tok_)
      : a(args),
        s(reinterpret_cast<Shared*>(smem)),
        row_base(uint32_t((valid_ ? tok_ : 0) * args.cap)),
        cap(uint32_t(args.cap)),
        c(c_),
        warp(warp_),
        lane(lane_),
        t(lane_ % 4),
        valid(valid_),
        tok(tok_) {
    // This consumer's 4 rows: histograms cleared, bounds admitting every candidate.
    uint4* h = reinterpret_cast<uint4*>(&s->hist[c * kTokensPerWg][0]);
    const int wtid = warp * 32 + lane;
    for (int i = wtid; i < kTokensPerWg * kBins / 4; i += 128) h[i] = make_uint4(0, 0, 0, 0);
    if (wtid < kTokensPerWg) s->bound[c * kTokensPerWg + wtid] = 1u;
  }

  // Entry `slot` of this row: a 32-bit index (the host keeps T * cap < 2^32),
  // one IMAD.WIDE per store instead of 64-bit row arithmetic under register pressure.
  __device__ __forceinline__ void put(uint32_t slot, float v, int32_t p) const {
    if (slot < cap) a.logits[row_base + slot] = v, a.pos[row_base + slot] = p;
  }

  // Stores the previous tile's entries: its 4 warps' counts are in slot `par`.
  __device__ __forceinline__ void flush(int par) {
    const uint4 n = *reinterpret_cast<const uint4*>(&s->warp_counts[par][c][t][0]);
    const uint32_t off = (warp > 0 ? n.x : 0u) + (warp > 1 ? n.y : 0u) + (warp > 2 ? n.z : 0u);
    const uint32_t mine = 0x11111111u << t, lt = topk::lanemask_lt();
    const uint32_t n0 = __popc(pb0 & mine);
    if ((pb0 >> lane) & 1u) put(count + off + __popc(pb0 & mine & lt), pv0, ppos);
    if ((pb1 >> lane) & 1u) put(count + off + n0 + __popc(pb1 & mine & lt), pv1, ppos + 8);
    count += n.x + n.y + n.z + n.w;
  }

  __device__ __forceinline__ void tile(int i, int64_t pos0, int64_t, bool in0, bool in1, float v0,
                                       float v1) {
    if (i > 0) flush((i - 1) & 1);  // after turn barrier i: every warp wrote tile i - 1's counts
    const int row = c * kTokensPerWg + t;
    const uint32_t bound = s->bound[row];
    // NaN and -inf have key 0 and bound >= 1: they never enter (mla/topk.hpp).
    const uint32_t k0 = topk::topk_key(v0) & (in0 ? ~0u : 0u);  // selects, no branches
    const uint32_t k1 = topk::topk_key(v1) & (in1 ? ~0u : 0u);
    const bool p0 = k0 >= bound, p1 = k1 >= bound;
    if (p0) atomicAdd(&s->hist[row][k0 >> kBinShift], 1u);
    if (p1) atomicAdd(&s->hist[row][k1 >> kBinShift], 1u);
    pb0 = __ballot_sync(0xffffffffu, p0), pb1 = __ballot_sync(0xffffffffu, p1);
    pv0 = v0, pv1 = v1, ppos = int32_t(pos0);
    if (lane < kTokensPerWg) {
      const uint32_t m = 0x11111111u << lane;
      s->warp_counts[i & 1][c][lane][warp] = __popc(pb0 & m) + __popc(pb1 & m);
    }
    tiles = i + 1;
    if (i == next_refresh) {
      named_barrier_sync(kBarCand + c, 128);  // every warp's increments of tile i are in
      refresh(c * kTokensPerWg + warp);
      next_refresh = i + max(kRefreshTiles, (i + 1) / kRefreshGrowth);
    }
  }

  // Suffix sum over the warp's lanes: lane l gets the sum of lanes l..31.
  __device__ __forceinline__ uint32_t suffix_sum(uint32_t v) const {
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const uint32_t o = __shfl_down_sync(0xffffffffu, v, d);
      if (lane + d < 32) v += o;
    }
    return v;
  }

  // The warp rescans row `row`'s histogram (see the top of the file): lane l
  // sums bins [64l, 64l + 64) (16-byte reads rotated by lane: no bank
  // conflicts), the highest lane whose suffix reaches k holds the bin; its 64
  // bins are spread 2 per lane and the same search finds it.
  __device__ void refresh(int row) const {
    const uint32_t* h = s->hist[row];
    const uint4* h4 = reinterpret_cast<const uint4*>(h) + 16 * lane;
    uint32_t sum = 0;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint4 x = h4[(j + lane) & 15];
      sum += x.x + x.y + x.z + x.w;
    }
    const uint32_t suf = suffix_sum(sum);
    const uint32_t big = __ballot_sync(0xffffffffu, suf >= a.k);
    if (big == 0u) return;  // fewer than k counted: no bound yet
    const int l = 31 - __clz(big);
    const uint32_t above = __shfl_sync(0xffffffffu, suf - sum, l);  // counts in lanes > l
    const uint2 y = reinterpret_cast<const uint2*>(h + 64 * l)[lane];
    const uint32_t suf2 = suffix_sum(y.x + y.y) + above;
    const uint32_t big2 = __ballot_sync(0xffffffffu, suf2 >= a.k);  // lane 0's is suf of l
    if (lane == 31 - __clz(big2)) {
      const uint32_t bin = uint32_t(64 * l + 2 * lane) + (suf2 - y.x >= a.k ? 1u : 0u);
      s->bound[row] = max(s->bound[row], max(bin << kBinShift, 1u));
    }
  }

  // The last tile's entries (one barrier: its counts), then lane t of warp 0
  // publishes token 4c + t's count (and the overflow).
  __device__ __forceinline__ void finish() {
    named_barrier_sync(kBarCand + c, 128);
    flush((tiles - 1) & 1);
    if (!valid || warp != 0 || lane >= kTokensPerWg) return;
    a.counts[tok] = int32_t(min(count, uint32_t(INT32_MAX)));
    if (count > cap) a.over_rows[atomicAdd(a.over_n, 1)] = int32_t(tok);
  }
};

}  // namespace mla::cuda::indexer::prefill_wgmma
