// Host side of the CUDA cache append: GPU-specific checks, then one launch.
#include "cuda/kv_cache/kv_cache_cuda.hpp"

#include "common/validate.hpp"
#include "cuda/common/cuda_status.hpp"
#include "cuda/common/view_params.hpp"
#include "cuda/kv_cache/kv_cache_params.hpp"

namespace mla::cuda {

using detail::error;

Status append_kv(const AppendKvArgs& a, const ExecContext& ctx) {
  const TensorView& d = a.cache.data;
  for (const auto& [t, name] : {std::pair{&a.c_kv, "c_kv"}, std::pair{&a.k_rope, "k_rope"},
                                std::pair{&a.slots, "slots"}, std::pair{&d, "cache"}}) {
    if (t->device.type != DeviceType::cuda || t->device.id != d.device.id)
      return error(Errc::invalid_device, "{}: must be on cuda:{} with the cache", name,
                   d.device.id);
  }
  if (a.c_kv.dtype != a.k_rope.dtype)
    return error(Errc::invalid_dtype,
                 "k_rope: dtype {} differs from c_kv's {} (the CUDA append "
                 "takes both f32 or both bf16)",
                 dtype_name(a.k_rope.dtype), dtype_name(a.c_kv.dtype));
  MLA_TRY(detail::expect_dtype(a.c_kv, "c_kv", {DType::f32, DType::bf16}));
  MLA_TRY(detail::expect_dtype(a.slots, "slots", {DType::i64}));
  if (d.ndim != 4 || d.strides[3] != 1)
    return error(Errc::invalid_stride,
                 "cache: expected a [num_pages, page_size, 1, entry] view "
                 "with a dense entry");
  // Entries are written with 16-byte stores.
  MLA_TRY(detail::expect_aligned(d, "cache", 16));
  int current = -1;
  MLA_CUDA_TRY(cudaGetDevice(&current), "cudaGetDevice");
  if (current != d.device.id)
    return error(Errc::invalid_device,
                 "cache is on cuda:{} but the current device is cuda:{}; call cudaSetDevice first",
                 d.device.id, current);

  const bool fp8 = kv_format_is_fp8(a.cache.format);
  const int64_t esz = fp8 ? 1 : 2;
  kv_cache::AppendParams p{};
  take_view(a.c_kv, p.c_kv, p.c_kv_stride_t, p.c_kv_stride_d);
  take_view(a.k_rope, p.k_rope, p.rope_stride_t, p.rope_stride_d);
  p.bf16_in = a.c_kv.dtype == DType::bf16;
  p.slots = static_cast<const int64_t*>(a.slots.data);
  p.slots_stride = a.slots.strides[0];
  p.T = a.slots.shape[0];
  p.cache = static_cast<uint8_t*>(d.data);
  p.page_stride_bytes = d.strides[0] * esz;
  p.token_stride_bytes = d.strides[1] * esz;
  p.num_pages = d.shape[0];
  p.page_size = d.shape[1];
  p.format = int32_t(a.cache.format);
  p.scale = a.cache.format == KvFormat::fp8_e4m3 ? static_cast<const float*>(a.cache.scale.data)
                                                 : nullptr;
  return cuda_status(kv_cache::launch_append(p, static_cast<cudaStream_t>(ctx.stream)),
                     "append_kernel launch");
}

}  // namespace mla::cuda
