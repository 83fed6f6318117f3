// The split-KV scheduler: one CTA reads cache_seqlens on the device and writes
// the pieces and the worker ranges into the caller's workspace, so a decode
// step needs no host synchronisation and replays in a CUDA graph with new
// lengths.
//
// Cost positions: every request occupies a run of "cost units" (tiles plus a
// fixed per-piece overhead, split_params.hpp); the total is cut into P equal
// spans, one per persistent worker, and a piece is the part of a request that
// falls in one span. Balanced mode cuts at the span boundaries (a request is
// split only where a boundary falls inside it). Batch-invariant mode cuts a
// request by its own length only, then hands the pieces to the workers by the
// same positions; its output bits cannot depend on the batch.
#include <cub/block/block_scan.cuh>

#include "cuda/decode/split/pdl.hpp"
#include "cuda/decode/split/split.hpp"

namespace mla::cuda::split {

using decode::DecodeParams;
namespace {

constexpr int kSchedThreads = 512;

__device__ __forceinline__ int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Tiles of request b, and whether its length is invalid (negative, or past the
// block table's capacity: such a request is never read, its rows become NaN).
__device__ __forceinline__ int64_t request_tiles(const DecodeParams& p, int b, bool* bad) {
  const int64_t len = p.seqlens[b * p.seqlens_stride];
  const int64_t capacity = int64_t(p.max_pages) * p.page_size;
  *bad = len < 0 || len > capacity;
  return *bad ? 0 : ceil_div(len, kTileKeys);
}

__device__ __forceinline__ int64_t invariant_pieces(int64_t tiles) {
  if (tiles == 0) return 1;
  const int64_t n = ceil_div(tiles, kInvariantChunkTiles);
  return n < kInvariantMaxSplits ? n : kInvariantMaxSplits;
}

__global__ void __launch_bounds__(kSchedThreads) split_schedule_kernel(DecodeParams p) {
  using Scan = cub::BlockScan<int64_t, kSchedThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  const int tid = threadIdx.x;
  const int64_t c = kPieceOverheadTiles;
  // The main kernel (a programmatic dependent, pdl.hpp) may be scheduled now:
  // it waits for this grid's completion before reading the schedule. This
  // kernel itself follows the stream's previous work in plain stream order.
  grid_launch_dependents();

  // Pass 0 (key source Indexed only): each request's key count from
  // topk_length, into the workspace array that p.seqlens points at.
  if (p.token_len != nullptr) {
    for (int b = tid; b < p.B; b += kSchedThreads) {
      const int32_t n = p.topk_length ? p.topk_length[b / p.tokens_per_batch] : p.topk;
      p.token_len[b] = min(max(n, 0), p.topk);
    }
    __syncthreads();  // global writes of this CTA visible to its reads below
  }

  // Pass 1: each request's first cost position.
  int64_t carry = 0;
  for (int base = 0; base < p.B; base += kSchedThreads) {
    const int b = base + tid;
    int64_t cost = 0;
    if (b < p.B) {
      bool bad;
      const int64_t tiles = request_tiles(p, b, &bad);
      cost = tiles + (p.batch_invariant ? invariant_pieces(tiles) : 1) * c;
    }
    int64_t excl, agg;
    Scan(scan_tmp).ExclusiveSum(cost, excl, agg);
    if (b < p.B) p.req_pos[b] = carry + excl;
    carry += agg;
    __syncthreads();  // scan_tmp is reused
  }
  const int64_t total = carry;
  const int64_t per = total > p.num_workers ? ceil_div(total, p.num_workers) : 1;

  // Pass 2: the pieces of each request, in position order.
  int64_t piece_carry = 0, slot_carry = 0;
  for (int base = 0; base < p.B; base += kSchedThreads) {
    const int b = base + tid;
    int64_t n = 0, tiles = 0, pos = 0;
    bool bad = false;
    if (b < p.B) {
      tiles = request_tiles(p, b, &bad);
      pos = p.req_pos[b];
      if (tiles == 0) {
        n = 1;
      } else if (p.batch_invariant) {
        n = invariant_pieces(tiles);
      } else {
        const int64_t cost = tiles + c;
        n = (pos + cost - 1) / per - pos / per + 1;
      }
    }
    int64_t piece_excl, piece_agg, slot_excl, slot_agg;
    Scan(scan_tmp).ExclusiveSum(n, piece_excl, piece_agg);
    __syncthreads();
    Scan(scan_tmp).ExclusiveSum(n > 1 ? n : int64_t(0), slot_excl, slot_agg);
    __syncthreads();
    if (b < p.B) {
      const int64_t first = piece_carry + piece_excl, slot_base = slot_carry + slot_excl;
      p.req_split[b] = RequestSplit{int32_t(n), int32_t(slot_base)};
      const int64_t chunk = p.batch_invariant ? ceil_div(tiles, n) : 0;
      for (int64_t i = 0; i < n && first + i < p.max_pieces; ++i) {
        int64_t tb, te, at;
        if (tiles == 0) {
          tb = te = 0;
          at = pos;
        } else if (p.batch_invariant) {
          tb = i * chunk;
          te = min(tb + chunk, tiles);
          at = pos + i * (chunk + c);
        } else {
          const int64_t w = pos / per + i;
          const int64_t lo = max(pos, w * per), hi = min(pos + tiles + c, (w + 1) * per);
          tb = min(max(lo - pos - c, int64_t(0)), tiles);
          te = min(max(hi - pos - c, int64_t(0)), tiles);
          at = lo;
        }
        const int32_t slot = bad ? kSlotBadRequest : n == 1 ? kSlotDirect : int32_t(slot_base + i);
        p.pieces[first + i] = Piece{b, int32_t(tb), int32_t(te), slot};
        p.piece_pos[first + i] = at;
      }
    }
    piece_carry += piece_agg;
    slot_carry += slot_agg;
  }
  const int64_t num_pieces = piece_carry < p.max_pieces ? piece_carry : p.max_pieces;
  __syncthreads();  // pieces/piece_pos (global) visible to the whole CTA

  // Pass 3: worker w starts at the first piece whose position is >= w * per.
  for (int w = tid; w <= p.num_workers; w += kSchedThreads) {
    int64_t lo = 0, hi = num_pieces;
    if (w < p.num_workers) {
      const int64_t target = int64_t(w) * per;
      while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (p.piece_pos[mid] < target)
          lo = mid + 1;
        else
          hi = mid;
      }
    } else {
      lo = num_pieces;  // the end of the last worker's range
    }
    p.worker_begin[w] = int32_t(lo);
  }
}

}  // namespace

cudaError_t launch_schedule(const DecodeParams& p, cudaStream_t stream) {
  split_schedule_kernel<<<1, kSchedThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace mla::cuda::split
