#include "cuda/common/tma_map.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "mla/dims.hpp"

namespace mla::cuda {

namespace {
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return PFN_cuTensorMapEncodeTiled_v12000{nullptr};
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}
}  // namespace

bool encode_kv_bf16_map(CUtensorMap* map, const void* kv, int64_t num_pages, int64_t page_size,
                        int64_t token_stride_bytes, int64_t page_stride_bytes) {
  const auto fn = encoder();
  if (fn == nullptr || num_pages < 1 || page_size < 1) return false;
  const cuuint64_t dims[3] = {kDqk, cuuint64_t(page_size), cuuint64_t(num_pages)};
  const cuuint64_t strides[2] = {cuuint64_t(token_stride_bytes), cuuint64_t(page_stride_bytes)};
  const cuuint32_t box[3] = {64, 64, 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(kv), dims, strides, box,
            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

namespace {
bool encode_3d_map(CUtensorMap* map, CUtensorMapDataType dtype, const void* base,
                   const int64_t (&dims)[3], const int64_t (&stride_bytes)[2],
                   const uint32_t (&box)[3]) {
  const auto fn = encoder();
  if (fn == nullptr || dims[0] < 1 || dims[1] < 1 || dims[2] < 1) return false;
  const cuuint64_t gdims[3] = {cuuint64_t(dims[0]), cuuint64_t(dims[1]), cuuint64_t(dims[2])};
  const cuuint64_t strides[2] = {cuuint64_t(stride_bytes[0]), cuuint64_t(stride_bytes[1])};
  const cuuint32_t gbox[3] = {box[0], box[1], box[2]};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  return fn(map, dtype, 3, const_cast<void*>(base), gdims, strides, gbox, elem_strides,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
}  // namespace

bool encode_bf16_3d_map(CUtensorMap* map, const void* base, const int64_t (&dims)[3],
                        const int64_t (&stride_bytes)[2], const uint32_t (&box)[3]) {
  return encode_3d_map(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base, dims, stride_bytes, box);
}

bool encode_u8_3d_map(CUtensorMap* map, const void* base, const int64_t (&dims)[3],
                      const int64_t (&stride_bytes)[2], const uint32_t (&box)[3]) {
  return encode_3d_map(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, base, dims, stride_bytes, box);
}

}  // namespace mla::cuda
