// Key sources of the main decode kernel: the only part of the kernel that
// differs between dense decode and sparse (DSA) decode.
//   PagedKeys   key p of request b is token p of its paged history:
//               block_table[b][p / page] * page + p % page. A page id outside
//               the cache makes the request "bad" (NaN rows).
//   IndexedKeys key j of request b (= one query token) is the cache slot
//               indices[token][j]; a slot outside [0, num_slots) (-1 padding)
//               is not an error: the row is zero-filled, never read, and its
//               score forced to -inf.
// entry() returns the 16-byte aligned entry address or nullptr (not read).
// lookup() + resolve() are entry() in two steps for a producer that loads the
// page ids / indices tiles ahead: lookup() the global load (Paged: the page
// id, Indexed: the slot), resolve() the address from it and the key, with
// stage_flag's bit in *flag_bit (Paged: a bad page id; Indexed: the key is
// valid). Both only for keys that exist (below the piece's end).
// stage_flag() is what a producer warp publishes per stage in the kernel's
// flag words: Paged, whether any of its keys had a bad page; Indexed, the
// warp's ballot of valid keys (lane l = key 16 * warp + l / 2, half l % 2),
// which the math warpgroups turn into the -inf mask.
#pragma once
#include <cstdint>

#include "cuda/decode/decode_params.hpp"

namespace mla::cuda::decode {

// (request b, new token s of it) -> indices of the q/out/lse/indices tensors.
// Paged: (b, s). Indexed: request b is token b of the flattened [B, s_q].
__device__ __forceinline__ void token_coords(const DecodeParams& p, int b, int s, int* tb,
                                             int* ts) {
  if (p.tokens_per_batch > 0) {
    *tb = b / p.tokens_per_batch;
    *ts = b - *tb * p.tokens_per_batch;
  } else {
    *tb = b;
    *ts = s;
  }
}

// coords(): token_coords, resolved at compile time (the paged kernel keeps
// its registers: no division in the math warpgroups' epilogue).
struct PagedKeys {
  static constexpr bool kIndexed = false;
  __device__ static __forceinline__ void coords(const DecodeParams&, int b, int s, int* tb,
                                                int* ts) {
    *tb = b;
    *ts = s;
  }
  __device__ static __forceinline__ const uint8_t* entry(const DecodeParams& p, int b, int key,
                                                         bool* bad) {
    const int page_idx = key / p.page_size;
    const int off = key - page_idx * p.page_size;
    const int page = p.block_table[b * p.bt_stride_b + int64_t(page_idx) * p.bt_stride_p];
    *bad = page < 0 || page >= p.num_pages;
    if (*bad) return nullptr;
    return p.kv + int64_t(page) * p.page_stride_bytes + int64_t(off) * p.token_stride_bytes;
  }
  __device__ static __forceinline__ int lookup(const DecodeParams& p, int b, int key) {
    return p.block_table[b * p.bt_stride_b + int64_t(key / p.page_size) * p.bt_stride_p];
  }
  __device__ static __forceinline__ const uint8_t* resolve(const DecodeParams& p, int key, int page,
                                                           bool* flag_bit) {
    *flag_bit = page < 0 || page >= p.num_pages;
    if (*flag_bit) return nullptr;
    const int off = key % p.page_size;
    return p.kv + int64_t(page) * p.page_stride_bytes + int64_t(off) * p.token_stride_bytes;
  }
  // bit: this thread's key had a bad page id
  __device__ static __forceinline__ int stage_flag(bool bad_bit) {
    return __any_sync(0xffffffffu, bad_bit) ? 1 : 0;
  }
};

struct IndexedKeys {
  static constexpr bool kIndexed = true;
  __device__ static __forceinline__ void coords(const DecodeParams& p, int b, int s, int* tb,
                                                int* ts) {
    token_coords(p, b, s, tb, ts);
  }
  __device__ static __forceinline__ const uint8_t* entry(const DecodeParams& p, int b, int key,
                                                         bool* bad) {
    *bad = false;
    const int32_t slot = __ldg(p.indices + b * p.idx_stride_token + key);
    if (slot < 0 || slot >= p.num_slots) return nullptr;
    const uint32_t page = uint32_t(slot) / uint32_t(p.page_size);
    const uint32_t off = uint32_t(slot) - page * uint32_t(p.page_size);
    return p.kv + int64_t(page) * p.page_stride_bytes + int64_t(off) * p.token_stride_bytes;
  }
  __device__ static __forceinline__ int lookup(const DecodeParams& p, int b, int key) {
    return __ldg(p.indices + b * p.idx_stride_token + key);
  }
  __device__ static __forceinline__ const uint8_t* resolve(const DecodeParams& p, int, int slot,
                                                           bool* flag_bit) {
    *flag_bit = slot >= 0 && slot < p.num_slots;
    if (!*flag_bit) return nullptr;
    const uint32_t page = uint32_t(slot) / uint32_t(p.page_size);
    const uint32_t off = uint32_t(slot) - page * uint32_t(p.page_size);
    return p.kv + int64_t(page) * p.page_stride_bytes + int64_t(off) * p.token_stride_bytes;
  }
  // bit: this thread's key is valid (read and unmasked)
  __device__ static __forceinline__ int stage_flag(bool valid_bit) {
    return int(__ballot_sync(0xffffffffu, valid_bit));
  }
};

}  // namespace mla::cuda::decode
