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

// A 3-D bf16 tensor [dim2][dim1][dim0] (dim0 contiguous; byte strides of dim1
// and dim2) read in boxes of box0 x 1 x box2 with 128-byte swizzle: box0 is
// 64 (one 128-byte row), so a box lands as the K-major SW128 block of box2
// rows that the wgmma descriptors describe. Rows past dim2 read as zeros.
// False as above when the driver rejects the layout.
bool encode_bf16_3d_map(CUtensorMap* map, const void* base, const int64_t (&dims)[3],
                        const int64_t (&stride_bytes)[2], const uint32_t (&box)[3]);

// The same for a byte tensor (e4m3 codes): box0 is 128 (one 128-byte row).
bool encode_u8_3d_map(CUtensorMap* map, const void* base, const int64_t (&dims)[3],
                      const int64_t (&stride_bytes)[2], const uint32_t (&box)[3]);

}  // namespace mla::cuda
