// The constants and the work split of the paged indexer decode kernel
// (indexer_decode.cu): the page geometry, the run of pages a CTA computes, the
// grid, and the chunks of at most 4 new tokens per launch.
#pragma once
#include <algorithm>
#include <cmath>

#include "cuda/indexer/indexer_device.cuh"
#include "cuda/indexer/indexer_params.hpp"

namespace mla::cuda::indexer::decode {

constexpr int kPageKeys = 64;
constexpr int kCodeBytes = kPageKeys * kIndexerDim;       // 8192: 8 swizzle atoms of 1024 B
constexpr int kPageBytes = kCodeBytes + kPageKeys * 4;    // 8448 in the cache
constexpr int kPageChunks = kPageBytes / 16;              // 528 16-byte copies
constexpr int kStageBytes = 9 * 1024;                     // 8448 rounded up to the 1024-B atom
constexpr int kThreads = 128;                             // one warpgroup
constexpr int kQueryBytes = kIndexerHeads * kIndexerDim;  // 8192
static_assert(kIndexerHeads == 64, "one m64 (or n64) wgmma covers the 64 indexer heads");
static_assert(kIndexerDim == 128, "a key row is one 128-byte swizzle row; 4 k32 steps");
static_assert(kPageBytes % 16 == 0 && kStageBytes >= kPageBytes && kStageBytes % 1024 == 0,
              "stages hold a whole page and keep the 1024-byte alignment of the swizzle atoms");

// Byte offset of 16-byte chunk `part` of row `row` in a 128-byte-swizzled tile
// (the layout TMA's SWIZZLE_128B writes and the SW128 descriptors describe).
__device__ __forceinline__ int sw128(int row, int part) {
  return row * 128 + ((part ^ (row & 7)) << 4);
}

// The run of pages [pg0, pg0 + nload) of request blockIdx.y that this CTA
// computes, its token rows and causal limits. Constructing it also writes -inf
// to this CTA's columns that hold no key of the request (coalesced), so the
// kernel only visits pages with keys.
template <int kQ>
struct DecodeRun {
  int64_t len;            // keys of the request
  int64_t pg0;            // first page of the run
  int64_t c1;             // end of the run's columns (<= width)
  int64_t tok0;           // row of this launch's first token of the request
  int64_t tail;           // the request's tokens after this launch's last one
  int nload;              // pages of the run that hold keys
  const int32_t* bt_row;  // the block table from page pg0

  __device__ __forceinline__ DecodeRun(const IndexerLogitsParams& p, int pages_per_cta, int tid) {
    const int b = blockIdx.y;
    len = p.seqlens[b];
    const int64_t width_pages = (p.width + kPageKeys - 1) / kPageKeys;
    pg0 = int64_t(blockIdx.x) * pages_per_cta;
    const int64_t pg1 = min(pg0 + pages_per_cta, width_pages);
    c1 = min(p.width, pg1 * kPageKeys);
    const int64_t len_pages =
        len > 0 ? min((len + kPageKeys - 1) / kPageKeys, p.max_pages) : 0;  // never past the row
    nload = int(max(int64_t(0), min(len_pages, pg1) - pg0));
    // Row of this launch's first token of request b, and how many of the
    // request's new tokens come after this launch's last one (causal limits).
    const int tpr = p.tokens_per_request > 0 ? p.tokens_per_request : kQ;
    tok0 = int64_t(b) * tpr + p.token_begin;
    tail = tpr - p.token_begin - kQ;
    bt_row = p.block_table + int64_t(b) * p.block_table_stride + pg0;
    for (int64_t col = (pg0 + nload) * kPageKeys + tid; col < c1; col += kThreads)
#pragma unroll
      for (int q = 0; q < kQ; ++q) p.logits[(tok0 + q) * p.logits_stride + col] = -INFINITY;
  }
  // Query q (of this launch) sees keys [0, key_end(q)).
  __device__ __forceinline__ int64_t key_end(int q) const {
    return len - tail - (kQ - 1 - q);
  }
};

// The grid: several waves of equal CTAs (4 resident per SM), each a run of
// >= 4 pages (or `pages_per_cta`, when given); x = splits of the width,
// y = requests.
struct DecodeGrid {
  int64_t splits = 0;
  int pages_per_cta = 0;
};
inline Status decode_grid(const IndexerLogitsParams& p, int pages_per_cta, DecodeGrid* g) {
  if (p.batch > 65535)
    return value_error(Errc::invalid_value, "indexer logits decode: batch", p.batch,
                       "is past 65535");
  if (p.cache.page_stride % 16 != 0)
    return value_error(Errc::misaligned, "indexer logits decode: cache page stride (bytes)",
                       p.cache.page_stride, "is not a multiple of 16");
  const int64_t width_pages = (p.width + kPageKeys - 1) / kPageKeys;
  const int64_t want_ctas = int64_t(current_sm_count()) * 16;
  int64_t ppc = (int64_t(p.batch) * width_pages + want_ctas - 1) / want_ctas;
  ppc = std::clamp<int64_t>(ppc, 4, 256);
  if (pages_per_cta < 0)
    return value_error(Errc::invalid_value, "indexer logits decode: pages_per_cta", pages_per_cta,
                       "is negative");
  if (pages_per_cta > 0) ppc = pages_per_cta;
  const int64_t splits = (width_pages + ppc - 1) / ppc;
  ppc = (width_pages + splits - 1) / splits;  // even runs
  if (splits > (int64_t(1) << 31) - 1)
    return value_error(Errc::invalid_value, "indexer logits decode: width", p.width,
                       "is too large");
  g->splits = splits;
  g->pages_per_cta = int(ppc);
  return Status::Ok();
}

// More than 4 new tokens (a chunk of prefill through the decode form): chunks
// of 4 (the kernel keeps a request's queries in shared memory, 8 KB each),
// each still reading every key once; the launches are independent.
// launch(c) runs one chunk c (c.s_q in [1, 4]).
template <class Launch>
Status for_each_token_chunk(const IndexerLogitsParams& p, Launch&& launch) {
  if (p.s_q < 1)
    return value_error(Errc::invalid_value, "indexer logits decode: s_q", p.s_q, "is below 1");
  for (int i0 = 0; i0 < p.s_q; i0 += 4) {
    IndexerLogitsParams c = p;
    c.tokens_per_request = p.s_q;
    c.token_begin = i0;
    c.s_q = std::min(4, p.s_q - i0);
    MLA_TRY(launch(c));
  }
  return Status::Ok();
}

}  // namespace mla::cuda::indexer::decode
