// Non-absorbed MLA entry points: validation, then the CPU reference (the CUDA
// prefill kernel is a later issue: CUDA tensors answer Errc::unsupported).
#include "mla/prefill.hpp"

#include "api/backend.hpp"
#include "api/device_values.hpp"
#include "common/validate.hpp"
#include "reference/mha_ref.hpp"
#include "reference/tensor_read.hpp"
#ifdef MLA_HAS_CUDA
#include "cuda/prefill/prefill_cuda.hpp"  // the CUDA backend (src/cuda/prefill)
#endif

namespace mla {
namespace {

using detail::error;
using detail::kAny;

Status expect_float(const TensorView& t, const char* name) {
  MLA_TRY(detail::expect_known_device(t, name));
  if (detail::on_cuda(t.device)) return detail::expect_dtype(t, name, {DType::bf16, DType::f32});
  return detail::expect_dtype(t, name, {DType::bf16, DType::f32, DType::f64});
}

// Non-negative strides and a dense last dim (what a kernel can address).
Status expect_layout(const TensorView& t, const char* name) {
  return detail::expect_inner_contiguous(t, name, 1);
}

// cu_seqlens [B+1]: starts at 0, never decreases, ends at `total`.
Status check_cu_seqlens(const TensorView& cu, const char* name, int64_t total,
                        const char* total_name) {
  const int64_t n = cu.shape[0];
  if (reference::read_int(cu, {0}) != 0)
    return error(Errc::invalid_value, "{}[0] = {} must be 0", name, reference::read_int(cu, {0}));
  for (int64_t b = 1; b < n; ++b) {
    const int64_t prev = reference::read_int(cu, {b - 1}), cur = reference::read_int(cu, {b});
    if (cur < prev)
      return error(Errc::out_of_range,
                   "{}[{}] = {} is less than {}[{}] = {} (lengths must be >= 0)", name, b, cur,
                   name, b - 1, prev);
  }
  const int64_t last = reference::read_int(cu, {n - 1});
  if (last != total)
    return error(Errc::out_of_range, "{}[{}] = {} does not match {} = {}", name, n - 1, last,
                 total_name, total);
  return Status::Ok();
}

// Both offset tensors of a validated call (host views); T and Tk are q's and k's rows.
Status check_offsets(const MhaPrefillArgs& a) {
  MLA_TRY(check_cu_seqlens(a.cu_seqlens_q, "cu_seqlens_q", a.q.shape[0], "T (q's rows)"));
  return check_cu_seqlens(a.cu_seqlens_k, "cu_seqlens_k", a.k.shape[0], "Tk (k's rows)");
}

// chunked_prefill runs on CUDA only: a defined q on the CPU is named here (an undefined
// one, and every other tensor, by the CUDA backend's validation).
Status expect_chunked_on_cuda(const ChunkedPrefillArgs& a) {
  if (!a.q.defined()) return Status::Ok();
  MLA_TRY(detail::expect_known_device(a.q, "q"));
  if (!detail::on_cuda(a.q.device))
    return error(Errc::unsupported,
                 "q: a CPU tensor; chunked_prefill runs on CUDA only (on the CPU the same "
                 "attention is decompress_kv of the gathered latents, then mha_prefill)");
  return Status::Ok();
}

}  // namespace

Status chunked_prefill_workspace_size(const ChunkedPrefillArgs& a, size_t* bytes) {
  if (bytes == nullptr) return error(Errc::invalid_value, "bytes: output pointer is null");
  *bytes = 0;
  MLA_TRY(expect_chunked_on_cuda(a));
  return MLA_CUDA_BACKEND(cuda::chunked_prefill_workspace_size(a, bytes),
                          "chunked_prefill_workspace_size");
}

Status chunked_prefill(const ChunkedPrefillArgs& a, Workspace ws, const ExecContext& ctx) {
  MLA_TRY(expect_chunked_on_cuda(a));
  return MLA_CUDA_BACKEND(cuda::chunked_prefill(a, ws, ctx), "chunked_prefill");
}

Status decompress_kv(const DecompressKvArgs& a, const ExecContext& ctx) {
  MLA_TRY(detail::expect_shape(a.c_kv, "c_kv", {kAny, kAny}, "[N, d_c]"));
  const int64_t N = a.c_kv.shape[0], d_c = a.c_kv.shape[1];
  MLA_TRY(detail::expect_shape(a.w_uk, "w_uk", {kAny, kAny, d_c}, "[h, d_nope, d_c]"));
  const int64_t H = a.w_uk.shape[0], d_nope = a.w_uk.shape[1];
  MLA_TRY(detail::expect_shape(a.w_uv, "w_uv", {H, kAny, d_c}, "[h, d_v, d_c]"));
  const int64_t d_v = a.w_uv.shape[1];
  MLA_TRY(detail::expect_shape(a.k_nope, "k_nope", {N, H, d_nope}, "[N, h, d_nope]"));
  MLA_TRY(detail::expect_shape(a.v, "v", {N, H, d_v}, "[N, h, d_v]"));
  for (auto [t, name] :
       {std::pair{&a.c_kv, "c_kv"}, std::pair{&a.w_uk, "w_uk"}, std::pair{&a.w_uv, "w_uv"},
        std::pair{&a.k_nope, "k_nope"}, std::pair{&a.v, "v"}}) {
    MLA_TRY(expect_float(*t, name));
    MLA_TRY(expect_layout(*t, name));
    MLA_TRY(detail::expect_same_device(a.c_kv, "c_kv", *t, name));
  }
  MLA_TRY(detail::expect_disjoint({{&a.k_nope, "k_nope"}, {&a.v, "v"}},
                                  {{&a.c_kv, "c_kv"}, {&a.w_uk, "w_uk"}, {&a.w_uv, "w_uv"}}));
  // Empty outputs: a no-op on every device (nothing to write, no launch).
  if (a.k_nope.numel() == 0 && a.v.numel() == 0) return Status::Ok();
  if (detail::on_cuda(a.c_kv.device)) {
    return MLA_CUDA_BACKEND(cuda::decompress_kv(a, ctx), "decompress_kv");
  }
  return reference::decompress_kv(a);
}

Status mha_prefill(const MhaPrefillArgs& a, const ExecContext& ctx) {
  MLA_TRY(detail::expect_shape(a.q, "q", {kAny, kAny, kAny}, "[T, h, d_qk]"));
  const int64_t T = a.q.shape[0], H = a.q.shape[1], d_qk = a.q.shape[2];
  if (H < 1) return error(Errc::invalid_shape, "q: h = {} must be at least 1", H);
  if (d_qk < 1) return error(Errc::invalid_shape, "q: d_qk = {} must be at least 1", d_qk);
  MLA_TRY(detail::expect_shape(a.k, "k", {kAny, H, d_qk}, "[Tk, h, d_qk] (h and d_qk of q)"));
  const int64_t Tk = a.k.shape[0];
  MLA_TRY(detail::expect_shape(a.v, "v", {Tk, H, kAny}, "[Tk, h, d_v] (Tk and h of k)"));
  const int64_t d_v = a.v.shape[2];
  MLA_TRY(detail::expect_shape(a.cu_seqlens_q, "cu_seqlens_q", {kAny}, "[B+1]"));
  const int64_t B1 = a.cu_seqlens_q.shape[0];
  if (B1 < 1)
    return error(Errc::invalid_shape, "cu_seqlens_q: shape [{}] must be [B+1] with B >= 0", B1);
  MLA_TRY(detail::expect_shape(a.cu_seqlens_k, "cu_seqlens_k", {B1}, "[B+1] (cu_seqlens_q's)"));
  MLA_TRY(detail::expect_shape(a.out, "out", {T, H, d_v}, "[T, h, d_v]"));
  MLA_TRY(detail::expect_shape(a.lse, "lse", {H, T}, "[h, T]"));
  for (auto [t, name] : {std::pair{&a.q, "q"}, std::pair{&a.k, "k"}, std::pair{&a.v, "v"},
                         std::pair{&a.out, "out"}}) {
    MLA_TRY(expect_float(*t, name));
    MLA_TRY(expect_layout(*t, name));
  }
  MLA_TRY(detail::expect_known_device(a.lse, "lse"));
  if (detail::on_cuda(a.lse.device))
    MLA_TRY(detail::expect_dtype(a.lse, "lse", {DType::f32}));
  else
    MLA_TRY(detail::expect_dtype(a.lse, "lse", {DType::f32, DType::f64}));
  MLA_TRY(expect_layout(a.lse, "lse"));
  for (auto [t, name] :
       {std::pair{&a.cu_seqlens_q, "cu_seqlens_q"}, std::pair{&a.cu_seqlens_k, "cu_seqlens_k"}}) {
    MLA_TRY(detail::expect_dtype(*t, name, {DType::i32}));
    MLA_TRY(expect_layout(*t, name));
  }
  for (auto [t, name] :
       {std::pair{&a.k, "k"}, std::pair{&a.v, "v"}, std::pair{&a.cu_seqlens_q, "cu_seqlens_q"},
        std::pair{&a.cu_seqlens_k, "cu_seqlens_k"}, std::pair{&a.out, "out"},
        std::pair{&a.lse, "lse"}})
    MLA_TRY(detail::expect_same_device(a.q, "q", *t, name));
  MLA_TRY(detail::expect_softmax_scale(a.softmax_scale));
  MLA_TRY(detail::expect_disjoint({{&a.out, "out"}, {&a.lse, "lse"}},
                                  {{&a.q, "q"},
                                   {&a.k, "k"},
                                   {&a.v, "v"},
                                   {&a.cu_seqlens_q, "cu_seqlens_q"},
                                   {&a.cu_seqlens_k, "cu_seqlens_k"}}));
  // Empty outputs: a no-op on every device (nothing to write, no launch).
  if (T == 0) return Status::Ok();  // no query rows
  const bool on_gpu = detail::on_cuda(a.q.device);
  MLA_TRY(detail::check_values(on_gpu, a,
                               {{&MhaPrefillArgs::cu_seqlens_q, "cu_seqlens_q"},
                                {&MhaPrefillArgs::cu_seqlens_k, "cu_seqlens_k"}},
                               ctx, check_offsets));
  if (on_gpu) return MLA_CUDA_BACKEND(cuda::mha_prefill(a, ctx), "mha_prefill");
  return reference::mha_prefill(a);
}

}  // namespace mla
