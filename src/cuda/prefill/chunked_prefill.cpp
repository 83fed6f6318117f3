#include "cuda/prefill/chunked_prefill.hpp"

#include <cuda_runtime.h>

#include <algorithm>

#include "common/validate.hpp"
#include "cuda/prefill/chunk_kernels.hpp"
#include "cuda/prefill/decompress_gemm.hpp"
#include "cuda/prefill/flash_fwd.hpp"
#include "mla/dims.hpp"

namespace mla::cuda {
namespace {

using detail::error;
constexpr int64_t kDnope = 128, kDvHead = 128, kDqkHead = 192;  // the non-absorbed form
constexpr int64_t kLatent = kDqk;  // an entry's latent: c_kv ; k_rope (576)

// Scratch carved out of the caller's workspace, 256-byte aligned pieces.
struct Scratch {
  void* latent;    // [C, 576] bf16
  void* k_nope;    // [C, h*128] bf16
  void* v;         // [C, h*128] bf16
  float* acc_out;  // [T, h, 128] f32
  float* part_out;
  float* acc_lse;  // [h, T]
  float* part_lse;
  size_t bytes;
};
Scratch layout(int64_t chunk, int64_t heads, int64_t tokens, void* base) {
  auto* p = static_cast<unsigned char*>(base);
  size_t off = 0;
  auto take = [&](size_t n) {
    void* r = p ? p + off : nullptr;
    off += (n + 255) / 256 * 256;
    return r;
  };
  Scratch s{};
  s.latent = take(size_t(chunk) * kLatent * 2);
  s.k_nope = take(size_t(chunk) * heads * kDnope * 2);
  s.v = take(size_t(chunk) * heads * kDvHead * 2);
  s.acc_out = static_cast<float*>(take(size_t(tokens) * heads * kDvHead * 4));
  s.part_out = static_cast<float*>(take(size_t(tokens) * heads * kDvHead * 4));
  s.acc_lse = static_cast<float*>(take(size_t(tokens) * heads * 4));
  s.part_lse = static_cast<float*>(take(size_t(tokens) * heads * 4));
  s.bytes = off;
  return s;
}

Status validate(const ChunkedPrefillArgs& a) {
  MLA_TRY(detail::expect_cache_for(a.cache, "cache", "chunked prefill"));
  MLA_TRY(detail::expect_shape(a.q, "q", {detail::kAny, detail::kAny, kDqkHead}, "[T, h, 192]"));
  MLA_TRY(detail::expect_dtype(a.q, "q", {DType::bf16}));
  MLA_TRY(detail::expect_inner_contiguous(a.q, "q", 1));
  const int64_t T = a.q.size(0), h = a.q.size(1);
  for (auto [t, name] : {std::pair{&a.w_uk, "w_uk"}, std::pair{&a.w_uv, "w_uv"}}) {
    MLA_TRY(detail::expect_shape(*t, name, {h, kDnope, kDc}, "[h, 128, 512]"));
    MLA_TRY(detail::expect_dtype(*t, name, {DType::bf16}));
    MLA_TRY(detail::expect_inner_contiguous(*t, name, 3));
  }
  MLA_TRY(detail::expect_shape(a.out, "out", {T, h, kDvHead}, "[T, h, 128]"));
  MLA_TRY(detail::expect_dtype(a.out, "out", {DType::bf16}));
  MLA_TRY(detail::expect_inner_contiguous(a.out, "out", 1));
  if (a.lse.defined()) {
    MLA_TRY(detail::expect_shape(a.lse, "lse", {h, T}, "[h, T]"));
    MLA_TRY(detail::expect_dtype(a.lse, "lse", {DType::f32}));
    MLA_TRY(detail::expect_inner_contiguous(a.lse, "lse", 1));
  }
  MLA_TRY(detail::expect_shape(a.block_table, "block_table", {detail::kAny}, "[max_pages]"));
  MLA_TRY(detail::expect_dtype(a.block_table, "block_table", {DType::i32}));
  MLA_TRY(detail::expect_inner_contiguous(a.block_table, "block_table", 1));
  for (const TensorView* t : {&a.q, &a.w_uk, &a.w_uv, &a.out, &a.block_table, &a.cache.data})
    if (t->device.type != DeviceType::cuda)
      return error(Errc::invalid_device, "chunked_prefill: every tensor must be on CUDA");
  if (a.lse.defined() && a.lse.device.type != DeviceType::cuda)
    return error(Errc::invalid_device, "lse: must be on CUDA");
  if (a.seqlen < T)
    return error(Errc::out_of_range, "seqlen = {} is less than the {} new tokens in q", a.seqlen,
                 T);
  const int64_t pages_needed = (a.seqlen + a.cache.page_size() - 1) / a.cache.page_size();
  if (pages_needed > a.block_table.size(0))
    return error(Errc::out_of_range,
                 "seqlen = {} needs {} pages of {} but block_table has {} entries", a.seqlen,
                 pages_needed, a.cache.page_size(), a.block_table.size(0));
  if (a.chunk_size < 1)
    return error(Errc::invalid_value, "chunk_size = {} must be >= 1", a.chunk_size);
  if (a.seqlen > INT32_MAX || T > INT32_MAX)
    return error(Errc::unsupported, "seqlen = {} past 2^31 tokens", a.seqlen);
  // The gather copies 16-byte pieces of each entry (1152 and 656 are multiples of 16).
  MLA_TRY(detail::expect_aligned(a.cache.data, "cache", 16));
  MLA_TRY(detail::expect_aligned(a.q, "q", 16));
  MLA_TRY(detail::expect_aligned(a.out, "out", 4));
  return Status::Ok();
}

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return error(Errc::cuda_error, "chunked_prefill: {}: {}", what, cudaGetErrorString(e));
}

}  // namespace

Status chunked_prefill_workspace_size(const ChunkedPrefillArgs& a, size_t* bytes) {
  if (bytes == nullptr) return error(Errc::invalid_value, "bytes: output pointer is null");
  MLA_TRY(validate(a));
  const int64_t chunk = std::min(a.chunk_size, std::max<int64_t>(a.seqlen, 1));
  *bytes = layout(chunk, a.q.size(1), a.q.size(0), nullptr).bytes;
  return Status::Ok();
}

Status chunked_prefill(const ChunkedPrefillArgs& a, Workspace ws, const ExecContext& ctx,
                       std::optional<prefill::Kernel> kernel) {
  MLA_TRY(validate(a));
  const int64_t T = a.q.size(0), h = a.q.size(1), L = a.seqlen;
  if (T == 0 || h == 0) return Status::Ok();
  const int64_t chunk = std::min(a.chunk_size, L);
  const Scratch need = layout(chunk, h, T, nullptr);
  if (ws.bytes < need.bytes || ws.data == nullptr)
    return error(Errc::insufficient_workspace, "workspace: {} bytes given, {} needed", ws.bytes,
                 need.bytes);
  const Scratch s = layout(chunk, h, T, ws.data);
  auto stream = static_cast<cudaStream_t>(ctx.stream);
  const int64_t n_chunks = (L + chunk - 1) / chunk;
  const int64_t esz = a.cache.format == KvFormat::bf16 ? 2 : 1;

  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t s0 = c * chunk, s1 = std::min(L, s0 + chunk), n = s1 - s0;
    prefill::GatherLatentParams gp;
    gp.cache = static_cast<const unsigned char*>(a.cache.data.data);
    gp.page_stride_bytes = a.cache.data.stride(0) * esz;
    gp.page_size = int32_t(a.cache.page_size());
    gp.fp8 = a.cache.format == KvFormat::fp8_ds_mla;
    gp.block_table_row = a.block_table.ptr<const int32_t>();
    gp.first_token = s0;
    gp.n = n;
    gp.out = s.latent;
    MLA_TRY(cuda_status(prefill::gather_latent(gp, stream), "gather"));
    for (auto [w, dst] : {std::pair{&a.w_uk, s.k_nope}, std::pair{&a.w_uv, s.v}}) {
      prefill::DecompressGemm g;
      g.c_kv = s.latent;
      g.c_kv_row_stride = kLatent;
      g.w = w->data;
      g.out = dst;
      g.out_row_stride = h * kDnope;
      g.n = n;
      g.rows_out = h * kDnope;
      g.d_c = kDc;
      MLA_TRY(prefill::decompress_gemm(g, stream));
    }
    const bool only = n_chunks == 1, first = c == 0, last = c == n_chunks - 1;
    prefill::FlashFwdParams p;
    p.q = a.q.data;
    p.q_row_stride = a.q.stride(0);
    p.q_head_stride = a.q.stride(1);
    p.k_nope = s.k_nope;
    p.k_nope_row_stride = h * kDnope;
    p.k_nope_head_stride = kDnope;
    p.k_rope = static_cast<const unsigned char*>(s.latent) + kDc * 2;
    p.k_rope_row_stride = kLatent;
    p.k_rope_head_stride = 0;  // one rope vector per token, shared by the heads
    p.v = s.v;
    p.v_row_stride = h * kDvHead;
    p.v_head_stride = kDvHead;
    if (only) {
      p.out = a.out.data;
      p.out_row_stride = a.out.stride(0);
      p.out_head_stride = a.out.stride(1);
      p.out_f32 = false;
      p.lse = a.lse.defined() ? a.lse.ptr<float>() : nullptr;
      p.lse_head_stride = a.lse.defined() ? a.lse.stride(0) : 0;
    } else {
      p.out = first ? s.acc_out : s.part_out;
      p.out_row_stride = h * kDvHead;
      p.out_head_stride = kDvHead;
      p.out_f32 = true;
      p.lse = first ? s.acc_lse : s.part_lse;
      p.lse_head_stride = T;
    }
    p.batch = 1;
    p.heads = int32_t(h);
    p.max_seqlen_q = int32_t(T);
    p.seqlen_k = int32_t(n);
    p.softmax_scale = a.softmax_scale;
    p.causal = true;
    p.causal_shift = int32_t(L - s1);
    MLA_TRY(prefill::launch_flash_fwd(p, stream, kernel));
    if (only || first) continue;
    prefill::MergeParams m;
    m.acc_out = s.acc_out;
    m.acc_lse = s.acc_lse;
    m.part_out = s.part_out;
    m.part_lse = s.part_lse;
    m.tokens = T;
    m.heads = int32_t(h);
    if (last) {
      m.final_out = a.out.data;
      m.final_row_stride = a.out.stride(0);
      m.final_head_stride = a.out.stride(1);
      m.final_lse = a.lse.defined() ? a.lse.ptr<float>() : nullptr;
      m.final_lse_head_stride = a.lse.defined() ? a.lse.stride(0) : 0;
    }
    MLA_TRY(cuda_status(prefill::merge_partials(m, stream), "merge"));
  }
  return Status::Ok();
}

}  // namespace mla::cuda
