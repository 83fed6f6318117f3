// Host side of TMA (Hopper's tensor memory accelerator): the tensor map of a
// paged bf16 KV cache, encoded through the driver entry point that the CUDA
// runtime hands out (no link against libcuda).
#pragma once
#include <cuda.h>

#include <cstdint>

namespace mla::cuda {

// A [num_pages][page_size][576] bf16 cache with the given byte strides, read
// in 64-token x 64-dim boxes (8 KB, 128-byte swizzle: the K-major SW128 block
// layout the wgmma descriptors of the decode kernel describe). False when the
// driver has no encoder or rejects the layout (strides not multiples of 16,
// base not 16-byte aligned, ...): the caller then loads without TMA.
bool encode_kv_bf16_map(CUtensorMap* map, const void* kv, int64_t num_pages, int64_t page_size,
                        int64_t token_stride_bytes, int64_t page_stride_bytes);

}  // namespace mla::cuda
