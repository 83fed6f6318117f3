// Host-side value checks of paged-cache addressing shared by the API entry
// points: global slot lists and block tables with their lengths. They read the
// values, so they run for CPU tensors only (a CUDA backend must itself never
// dereference a slot or page outside the pool).
#pragma once
#include <cstdint>
#include <limits>

#include "common/validate.hpp"
#include "reference/tensor_read.hpp"

namespace mla::detail {

// The shapes and dtypes of a paged batch's addressing: block_table [B, max_pages] and
// cache_seqlens [B], both i32.
inline Status expect_block_table(const TensorView& block_table, const TensorView& cache_seqlens,
                                 int64_t B) {
  MLA_TRY(expect_shape(block_table, "block_table", {B, kAny}, "[B, max_pages]"));
  MLA_TRY(expect_dtype(block_table, "block_table", {DType::i32}));
  MLA_TRY(expect_shape(cache_seqlens, "cache_seqlens", {B}, "[B]"));
  return expect_dtype(cache_seqlens, "cache_seqlens", {DType::i32});
}

// slots [T]: each in [0, num_pages * page_size), or -1 where allow_skip.
inline Status check_slot_values(const TensorView& slots, const char* name, int64_t num_pages,
                                int64_t page_size, bool allow_skip) {
  int64_t capacity = 0;  // both dims of a checked view, yet saturate rather than wrap
  if (__builtin_mul_overflow(num_pages, page_size, &capacity)) capacity = INT64_MAX;
  for (int64_t t = 0; t < slots.shape[0]; ++t) {
    const int64_t s = reference::read_int(slots, {t});
    if (s == -1 && allow_skip) continue;
    if (s < 0 || s >= capacity)
      return error(Errc::out_of_range,
                   "{}[{}] = {} is outside the cache: capacity num_pages * page_size = {} * {} = "
                   "{}{}",
                   name, t, s, num_pages, page_size, capacity,
                   allow_skip ? " (-1 skips a token)" : "");
  }
  return Status::Ok();
}

// cache_seqlens [B] in [0, min(max_len, max_pages * page_size)], and the block
// table pages each request reads, block_table[b][0, ceil(len / page_size)), in
// [0, num_pages). max_len < 0: no output-width limit. `table` and `pool` name
// the block table and the cache it addresses in the messages.
inline Status check_block_table_values(const TensorView& block_table, const TensorView& seqlens,
                                       int64_t page_size, int64_t num_pages, int64_t max_len,
                                       const char* table = "block_table",
                                       const char* pool = "the cache") {
  using reference::read_int;
  const int64_t max_pages = block_table.shape[1];
  // max_pages and page_size are shape dims of checked views, but their product
  // is not a view's extent: saturate instead of wrapping (no length reaches it).
  int64_t capacity = 0;
  if (__builtin_mul_overflow(max_pages, page_size, &capacity)) capacity = INT64_MAX;
  for (int64_t b = 0; b < seqlens.shape[0]; ++b) {
    const int64_t len = read_int(seqlens, {b});
    if (len < 0) return error(Errc::out_of_range, "cache_seqlens[{}] = {} is negative", b, len);
    if (len > capacity)
      return error(Errc::out_of_range,
                   "cache_seqlens[{}] = {} is past the capacity of {}: max_pages * "
                   "page_size = {} * {} = {}",
                   b, len, table, max_pages, page_size, capacity);
    if (max_len >= 0 && len > max_len)
      return error(Errc::out_of_range,
                   "cache_seqlens[{}] = {} is past max_len = {} (the last dim of logits)", b, len,
                   max_len);
    const int64_t pages = (len + page_size - 1) / page_size;
    for (int64_t j = 0; j < pages; ++j) {
      const int64_t id = read_int(block_table, {b, j});
      if (id < 0 || id >= num_pages)
        return error(
            Errc::out_of_range,
            "{}[{}][{}] = {} is {} (request {} has cache_seqlens = {}, so it "
            "reads its first {} pages)",
            table, b, j, id,
            id < 0 ? "negative" : fmt::format("past num_pages = {} of {}", num_pages, pool), b, len,
            pages);
    }
  }
  return Status::Ok();
}

}  // namespace mla::detail
