// The candidate sink of the prefill indexer kernel (indexer_prefill_wgmma_kernel.cuh)
// for the fused prefill select (indexer_prefill_fused.cu): instead of writing
// every logit, each row keeps only the logits that can still be in its top-k.
//
// Bound. Each of the CTA's 8 rows has a histogram of kBins bins over the top
// kBinBits bits of the order-preserving key (topk_key: sign, 8 exponent bits,
// 2 mantissa bits) of the logits it kept, and a bound L (a bin's lower edge,
// starting at 1: every candidate). A logit enters when key >= L. Every
// kRefreshTiles tiles warp w of consumer c rescans row 4c + w from the top and
// sets L to the lower edge of the highest bin b whose bins >= b hold at least
// k counted logits: k logits of the row are >= L, so a logit with a key below
// L is beaten by k others and is not in the row's top-k, whatever the ties.
// Only logits >= the L of their time are counted, which leaves the counts of
// the bins >= L exact, so the bound only rises. Counts are integer shared
// atomics and the scans run at fixed tiles: the kept set does not depend on
// timing (deterministic).
//
// Buffer. Row r's entries go to logits[r][slot], pos[r][slot] in ascending
// position: within a tile a thread's two keys are 16w + g and 16w + g + 8, so
// ballots over the lanes of token t give each entry its slot among the warp's
// (first keys by g, then second keys by g), and the 4 warps' counts, exchanged
// through shared memory behind named barrier kBarCand + c, order the warps.
// Tiles arrive in order. The row's count goes on past `cap` (entries past it
// are dropped); a row with count > cap is appended to the overflow list and
// recomputed by the unfused path, so an overflow never gives a wrong set.
//
// Shared-memory hand-overs (scripts/models/indexer_prefill_barriers.py models
// them): the histograms and bounds are set up before the weights barrier; a
// tile's counts and histogram increments are made before kBarCand + c and read
// after it; the next writes of both come after the consumer's next turn
// barrier, which all 128 of its threads must reach, so after every read of the
// tile; a bound written at tile i is read from tile i + 1 on, after that turn
// barrier, and the reads of tile i happen before kBarCand + c of tile i, which
// precedes the write.
#pragma once
#include <cstdint>

#include "cuda/indexer/indexer_prefill_wgmma_kernel.cuh"
#include "cuda/indexer/indexer_select.hpp"
#include "cuda/topk/topk_common.cuh"

namespace mla::cuda::indexer::prefill_wgmma {

constexpr int kBinBits = 11;              // sign, 8 exponent bits, 2 mantissa bits
constexpr int kBins = 1 << kBinBits;      // 2048 bins: 8 KB per row
constexpr int kBinShift = 32 - kBinBits;  // bin of a key: key >> kBinShift
constexpr int kRefreshTiles = 8;          // bounds rescanned every 8 tiles (512 keys)
static_assert(kBins == 32 * 64, "the scan gives each lane 64 bins, then 2 of one lane's 64");

struct CandidateSink {
  using Args = CandidateArgs;
  struct Shared {
    uint32_t hist[kTokens][kBins];
    uint32_t bound[kTokens];
    uint32_t warp_counts[kConsumers][4][kTokensPerWg];  // [consumer][warp][token]
  };
  static constexpr int kSmemBytes = int(sizeof(Shared));
  static_assert(Smem::alloc(kSmemBytes) <= 227 * 1024, "one CTA per SM with the histograms");

  const Args& a;
  Shared* s;
  float* row_logits;
  int32_t* row_pos;
  int c, warp, lane, t;
  bool valid;
  int64_t tok;
  uint32_t count = 0;  // entries of token 4c + t so far (the same in every lane of that token)

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
        row_logits(args.logits + (valid_ ? tok_ : 0) * args.cap),
        row_pos(args.pos + (valid_ ? tok_ : 0) * args.cap),
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

  __device__ __forceinline__ void put(uint32_t slot, float v, int64_t p) const {
    if (slot < a.cap) row_logits[slot] = v, row_pos[slot] = int32_t(p);
  }

  __device__ __forceinline__ void tile(int i, int64_t pos0, int64_t pos1, bool in0, bool in1,
                                       float v0, float v1) {
    const int row = c * kTokensPerWg + t;
    const uint32_t bound = s->bound[row];
    // NaN and -inf have key 0 and bound >= 1: they never enter (mla/topk.hpp).
    const uint32_t k0 = in0 ? topk::topk_key(v0) : 0u, k1 = in1 ? topk::topk_key(v1) : 0u;
    const bool p0 = k0 >= bound, p1 = k1 >= bound;
    if (p0) atomicAdd(&s->hist[row][k0 >> kBinShift], 1u);
    if (p1) atomicAdd(&s->hist[row][k1 >> kBinShift], 1u);
    const uint32_t b0 = __ballot_sync(0xffffffffu, p0), b1 = __ballot_sync(0xffffffffu, p1);
    const uint32_t mine = 0x11111111u << t, lt = topk::lanemask_lt();
    const uint32_t n0 = __popc(b0 & mine);
    if (lane < kTokensPerWg) s->warp_counts[c][warp][lane] = n0 + __popc(b1 & mine);
    named_barrier_sync(kBarCand + c, 128);
    uint32_t off = 0, total = 0;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t n = s->warp_counts[c][w][t];
      total += n;
      off += w < warp ? n : 0u;
    }
    if (p0) put(count + off + __popc(b0 & mine & lt), v0, pos0);
    if (p1) put(count + off + n0 + __popc(b1 & mine & lt), v1, pos1);
    count += total;
    if (i % kRefreshTiles == kRefreshTiles - 1) refresh(c * kTokensPerWg + warp);
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

  // Lane t of warp 0 publishes token 4c + t's count (and the overflow).
  __device__ __forceinline__ void finish() const {
    if (!valid || warp != 0 || lane >= kTokensPerWg) return;
    a.counts[tok] = int32_t(min(count, uint32_t(INT32_MAX)));
    if (count > a.cap) a.over_rows[atomicAdd(a.over_n, 1)] = int32_t(tok);
  }
};

}  // namespace mla::cuda::indexer::prefill_wgmma
