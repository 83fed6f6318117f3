#include "cuda/prefill/prefill_cuda.hpp"

#include <cuda_runtime.h>

#include <vector>

#include "common/validate.hpp"
#include "cuda/common/view_params.hpp"
#include "cuda/prefill/decompress_gemm.hpp"
#include "cuda/prefill/flash_fwd.hpp"

namespace mla::cuda {
namespace {

using detail::error;

Status expect_bf16_cuda(const TensorView& t, const char* name) {
  if (t.dtype != DType::bf16)
    return error(Errc::unsupported, "{}: dtype {} has no CUDA kernel (bf16 only)", name,
                 dtype_name(t.dtype));
  return Status::Ok();
}

// Reads cu_seqlens back and checks it as the CPU path does: starts at 0, never
// decreases, ends at `total`. The kernel trusts these values.
Status read_cu_seqlens(const TensorView& cu, const char* name, int64_t total, cudaStream_t stream,
                       std::vector<int32_t>* host) {
  host->resize(cu.shape[0]);
  cudaError_t e =
      cudaMemcpyAsync(host->data(), cu.data, host->size() * 4, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess)
    return error(Errc::cuda_error, "{}: reading it back: {}", name, cudaGetErrorString(e));
  const auto& v = *host;
  if (v[0] != 0) return error(Errc::invalid_value, "{}[0] = {} must be 0", name, v[0]);
  for (size_t b = 1; b < v.size(); ++b)
    if (v[b] < v[b - 1])
      return error(Errc::out_of_range,
                   "{}[{}] = {} is less than {}[{}] = {} (lengths must be >= 0)", name, b, v[b],
                   name, b - 1, v[b - 1]);
  if (v.back() != total)
    return error(Errc::out_of_range, "{}[{}] = {} does not match the {} rows of its tensor", name,
                 v.size() - 1, v.back(), total);
  return Status::Ok();
}

}  // namespace

Status decompress_kv(const DecompressKvArgs& a, const ExecContext& ctx) {
  for (auto [t, name] :
       {std::pair{&a.c_kv, "c_kv"}, std::pair{&a.w_uk, "w_uk"}, std::pair{&a.w_uv, "w_uv"},
        std::pair{&a.k_nope, "k_nope"}, std::pair{&a.v, "v"}})
    MLA_TRY(expect_bf16_cuda(*t, name));
  const int64_t N = a.c_kv.shape[0], d_c = a.c_kv.shape[1], H = a.w_uk.shape[0];
  for (auto [t, name] : {std::pair{&a.w_uk, "w_uk"}, std::pair{&a.w_uv, "w_uv"}}) {
    MLA_TRY(detail::expect_inner_contiguous(*t, name, 3));  // viewed as one [h*d, d_c] matrix
  }
  for (auto [t, name] : {std::pair{&a.k_nope, "k_nope"}, std::pair{&a.v, "v"}})
    if (t->shape[0] > 1 && H > 1 && t->strides[1] != t->shape[2])
      return error(Errc::unsupported,
                   "{}: head stride {} must equal its head dim {} (one GEMM writes all heads)",
                   name, t->strides[1], t->shape[2]);
  auto stream = ctx.stream;
  for (auto [w, dst] : {std::pair{&a.w_uk, &a.k_nope}, std::pair{&a.w_uv, &a.v}}) {
    prefill::DecompressGemm g;
    g.c_kv = a.c_kv.data;
    g.c_kv_row_stride = a.c_kv.strides[0];
    g.w = w->data;
    g.out = dst->data;
    g.out_row_stride = dst->strides[0];
    g.n = N;
    g.rows_out = H * w->shape[1];
    g.d_c = d_c;
    MLA_TRY(prefill::decompress_gemm(g, stream));
  }
  return Status::Ok();
}

Status mha_prefill(const MhaPrefillArgs& a, const ExecContext& ctx) {
  const int64_t T = a.q.shape[0], H = a.q.shape[1], Tk = a.k.shape[0];
  if (a.q.shape[2] != 192 || a.v.shape[2] != 128)
    return error(Errc::unsupported,
                 "mha_prefill on CUDA: d_qk = {}, d_v = {}; the kernel is built for 192 / 128",
                 a.q.shape[2], a.v.shape[2]);
  for (auto [t, name] : {std::pair{&a.q, "q"}, std::pair{&a.k, "k"}, std::pair{&a.v, "v"}}) {
    MLA_TRY(expect_bf16_cuda(*t, name));
    MLA_TRY(detail::expect_aligned(*t, name, 16));  // 16-byte cp.async of every row
  }
  MLA_TRY(detail::expect_aligned(a.out, "out", a.out.dtype == DType::f32 ? 8 : 4));
  if (H > 65535) return error(Errc::unsupported, "q: h = {} past the grid limit 65535", H);
  auto stream = static_cast<cudaStream_t>(ctx.stream);
  std::vector<int32_t> cu_q, cu_k;
  MLA_TRY(read_cu_seqlens(a.cu_seqlens_q, "cu_seqlens_q", T, stream, &cu_q));
  MLA_TRY(read_cu_seqlens(a.cu_seqlens_k, "cu_seqlens_k", Tk, stream, &cu_k));
  const int64_t B = int64_t(cu_q.size()) - 1;
  if (B > 65535) return error(Errc::unsupported, "batch {} past the grid limit 65535", B);
  int32_t max_q = 0;
  for (int64_t b = 0; b < B; ++b) max_q = std::max(max_q, cu_q[b + 1] - cu_q[b]);

  prefill::FlashFwdParams p;
  take_view(a.q, p.q, p.q_row_stride, p.q_head_stride);
  take_view(a.k, p.k_nope, p.k_nope_row_stride, p.k_nope_head_stride);
  take_view(a.k, p.k_rope, p.k_rope_row_stride, p.k_rope_head_stride);
  p.k_rope = static_cast<const unsigned char*>(p.k_rope) + 128 * 2;  // k = [k_nope ; k_rope]
  take_view(a.v, p.v, p.v_row_stride, p.v_head_stride);
  take_view(a.out, p.out, p.out_row_stride, p.out_head_stride);
  p.out_f32 = a.out.dtype == DType::f32;
  take_view(a.lse, p.lse, p.lse_head_stride, p.lse_row_stride);
  p.cu_seqlens_q = a.cu_seqlens_q.ptr<const int32_t>();
  p.cu_seqlens_k = a.cu_seqlens_k.ptr<const int32_t>();
  p.batch = int32_t(B);
  p.heads = int32_t(H);
  p.max_seqlen_q = max_q;
  p.total_q = T;
  p.total_k = Tk;
  p.softmax_scale = a.softmax_scale;
  p.causal = a.causal;
  return prefill::launch_flash_fwd(p, stream);
}

}  // namespace mla::cuda
