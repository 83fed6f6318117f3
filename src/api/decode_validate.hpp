// Argument checks of dense decode, shared by the CPU and CUDA backends. Two
// stages, because only one of them can run for device tensors:
//  1. validate_decode_args: shapes, dtypes, strides, devices, alignment and
//     scalars, from the views alone (any device);
//  2. validate_decode_host_values: block_table entries and cache_seqlens, which
//     are read, so CPU tensors only. For CUDA tensors the values live on the
//     GPU; the CUDA backend must not trust them: it never reads a page id
//     outside [0, num_pages) nor a length that is negative or past the block
//     table's capacity, and writes NaN out/lse rows for such a request (the
//     other requests are unaffected) since it cannot report them synchronously.
#pragma once
#include "mla/decode.hpp"
#include "mla/status.hpp"

namespace mla::detail {

// Head counts the CUDA decode kernels are built for (the new-token range is
// mla::kCudaDecodeMaxSq, public).
inline constexpr int kCudaDecodeHeads[] = {16, 32, 64, 128};

Status validate_decode_args(const DecodeArgs& a);
// Same rules, for the workspace query: data pointers are not read there, so
// they may be null.
Status validate_decode_shapes(const DecodeArgs& a);
Status validate_decode_host_values(const DecodeArgs& a);

// Partial decode: the base args, plus kv_begin/kv_end [B] i32; out f32 (f64 on
// CPU). Host values (CPU): 0 <= kv_begin[b] <= kv_end[b] <= cache_seqlens[b].
Status validate_decode_partial_args(const DecodePartialArgs& a);
Status validate_decode_partial_host_values(const DecodePartialArgs& a);

// partial_out [S, R..., D] f32, partial_lse [S, R...] f32, out [R..., D]
// f32/bf16, lse [R...] f32 (f64 accepted for each on CPU); R is 1 to 4 dims.
Status validate_merge_args(const MergeArgs& a);

}  // namespace mla::detail
