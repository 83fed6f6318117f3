#include "cuda/layer/layer_cuda.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <map>

#include "common/layer_shape.hpp"
#include "common/rope_freq.hpp"
#include "common/validate.hpp"
#include "cuda/layer/layer_kernels.hpp"
#include "mla/decode.hpp"
#include "mla/dims.hpp"
#include "mla/dsa.hpp"
#include "mla/indexer.hpp"

namespace mla::cuda {
namespace {

using detail::error;

// One host thread keeps one cuBLAS handle per device (creation costs milliseconds).
Status cublas_handle(void* stream, cublasHandle_t* out) {
  thread_local std::map<int, cublasHandle_t> handles;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess)
    return error(Errc::cuda_error, "layer_forward: cudaGetDevice failed");
  auto it = handles.find(dev);
  if (it == handles.end()) {
    cublasHandle_t h = nullptr;
    const cublasStatus_t st = cublasCreate(&h);
    if (st != CUBLAS_STATUS_SUCCESS)
      return error(Errc::cuda_error, "layer_forward: cublasCreate: {}", cublasGetStatusString(st));
    it = handles.emplace(dev, h).first;
  }
  const cublasStatus_t st = cublasSetStream(it->second, static_cast<cudaStream_t>(stream));
  if (st != CUBLAS_STATUS_SUCCESS)
    return error(Errc::cuda_error, "layer_forward: cublasSetStream: {}", cublasGetStatusString(st));
  *out = it->second;
  return Status::Ok();
}

Status cublas_check(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return error(Errc::cuda_error, "layer_forward: {}: {}", what, cublasGetStatusString(st));
}

// Row-major y[n, out] (ld_y) = x[n, in] (bf16, ld_x) * W[out, in]^T (bf16, dense):
// column-major y^T = op_T(W^T as [in, out]) * x^T.
Status linear(cublasHandle_t h, const void* w, int64_t out, int64_t in, const void* x, int64_t ld_x,
              int64_t n, void* y, cudaDataType y_type, int64_t ld_y, const char* what) {
  if (n == 0) return Status::Ok();
  const float one = 1.f, zero = 0.f;
  return cublas_check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(n), int(in), &one, w,
                                   CUDA_R_16BF, int(in), x, CUDA_R_16BF, int(ld_x), &zero, y,
                                   y_type, int(ld_y), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      what);
}

// Where every intermediate lives inside the caller's workspace (256-byte aligned).
struct Layout {
  size_t positions = 0, slots = 0, q_lat = 0, q_lat16 = 0, q = 0, q16 = 0, kv = 0, q_abs = 0,
         o_lat = 0, lse = 0, o = 0, qi = 0, wts = 0, q8 = 0, w_folded = 0, ki = 0, attn_ws = 0,
         total = 0;
  size_t attn_ws_bytes = 0;
};

// The call's sizes, plus the hidden and query-latent widths and the longest context the
// block table addresses.
struct Dims : detail::LayerShape {
  int64_t D = 0, qr = 0, Lmax = 0;
};

Dims dims_of(const LayerForwardArgs& a) {
  Dims d;
  static_cast<detail::LayerShape&>(d) = detail::layer_shape(a);
  d.D = a.config.hidden;
  d.qr = a.config.q_lora_rank;
  d.Lmax = a.block_table.shape[1] * a.kv.page_size();
  return d;
}

// Views of the attention op's arguments over the workspace (data pointers
// filled from `base`, or null when only sizes are wanted).
TensorView dev_view(char* base, size_t off, DType t, std::initializer_list<int64_t> shape,
                    Device dev) {
  return TensorView::make(base == nullptr ? nullptr : base + off, t, shape, dev);
}

// What the dense and the DSA attention steps take alike: q, out and lse in the
// layer's workspace, the paged cache, the softmax scale.
template <class Args>
Args attention_args(const LayerForwardArgs& a, const Dims& d, const Layout& L, char* base) {
  const Device dev = a.hidden.device;
  Args r;
  r.q = dev_view(base, L.q_abs, DType::bf16, {d.B, d.s_q, d.H, kDqk}, dev);
  r.kv = a.kv;
  r.block_table = a.block_table;
  r.cache_seqlens = a.cache_seqlens;
  r.softmax_scale = float(layer_softmax_scale(a.config));
  r.out = dev_view(base, L.o_lat, DType::bf16, {d.B, d.s_q, d.H, kDv}, dev);
  r.lse = dev_view(base, L.lse, DType::f32, {d.B, d.H, d.s_q}, dev);
  return r;
}

DecodeArgs decode_args(const LayerForwardArgs& a, const Dims& d, const Layout& L, char* base) {
  DecodeArgs r = attention_args<DecodeArgs>(a, d, L, base);
  r.causal = true;
  return r;
}

// The DSA step over the layer's workspace: indexer -> top-k -> sparse
// attention, forced sparse (the layer's caller chose DSA), top-k of the config.
DsaDecodeArgs dsa_args(const LayerForwardArgs& a, const Dims& d, const Layout& L, char* base) {
  const Device dev = a.hidden.device;
  DsaDecodeArgs r = attention_args<DsaDecodeArgs>(a, d, L, base);
  r.max_seqlen = d.Lmax;
  r.index_q8 = dev_view(base, L.q8, DType::e4m3, {d.B, d.s_q, kIndexerHeads, kIndexerDim}, dev);
  r.index_w_folded = dev_view(base, L.w_folded, DType::f32, {d.B, d.s_q, kIndexerHeads}, dev);
  r.index_cache = a.index_cache;
  return r;
}

DsaPolicy dsa_policy(const LayerConfig& c) {
  DsaPolicy p;
  p.topk = int32_t(c.index_topk);
  p.path = DsaPath::sparse;
  return p;
}

Status layout_of(const LayerForwardArgs& a, Layout* out) {
  const Dims d = dims_of(a);
  Layout L;
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off += (bytes + 255) / 256 * 256;
    return at;
  };
  const size_t N = size_t(d.N);
  L.positions = take(N * 8);
  L.slots = take(N * 8);
  L.q_lat = take(N * d.qr * 4);
  L.q_lat16 = take(N * d.qr * 2);
  L.q = take(N * d.H * (d.dn + d.dr) * 4);
  L.q16 = take(N * d.H * (d.dn + d.dr) * 2);
  L.kv = take(N * kDqk * 4);
  L.q_abs = take(N * d.H * kDqk * 2);
  L.o_lat = take(N * d.H * kDv * 2);
  L.lse = take(N * d.H * 4);
  L.o = take(N * d.H * d.dv * 2);
  const bool sparse = a.attention == LayerAttention::sparse;
  const bool index = a.index_cache.data.defined();
  if (index) {
    L.ki = take(N * kIndexerDim * 4);
  }
  if (sparse) {
    L.qi = take(N * kIndexerHeads * kIndexerDim * 4);
    L.wts = take(N * kIndexerHeads * 4);
    L.q8 = take(N * kIndexerHeads * kIndexerDim);
    L.w_folded = take(N * kIndexerHeads * 4);
    MLA_TRY(dsa_decode_workspace_size(dsa_args(a, d, L, nullptr), dsa_policy(a.config),
                                      &L.attn_ws_bytes));
  } else {
    MLA_TRY(
        decode_workspace_size(decode_args(a, d, L, nullptr), DecodeOptions{}, &L.attn_ws_bytes));
  }
  L.attn_ws = take(L.attn_ws_bytes);
  L.total = off;
  *out = L;
  return Status::Ok();
}

Status check_cuda_layout(const LayerForwardArgs& a) {
  if (a.attention == LayerAttention::non_absorbed)
    return error(Errc::unsupported,
                 "layer_forward: the non-absorbed path has no GPU composition yet (the paged "
                 "cache has no CUDA read-back to decompress from); use absorbed or sparse, as "
                 "DeepSeek-V3.2 does for both phases");
  MLA_TRY(detail::expect_dtype(a.hidden, "hidden", {DType::bf16}));
  MLA_TRY(detail::expect_dtype(a.out, "out", {DType::bf16, DType::f32}));
  if (!a.hidden.is_contiguous() || !a.out.is_contiguous())
    return error(Errc::invalid_stride, "layer_forward: hidden and out must be contiguous on CUDA");
  LayerWeightShape shapes[kLayerWeightCount];
  MLA_TRY(layer_weight_shapes(a.config, shapes));
  for (int i = 0; i < kLayerWeightCount; ++i) {
    const TensorView& t = layer_weight(a.weights, i);
    if (!t.defined()) continue;  // optional indexer weights: checked by the API
    const std::string name = std::string("weights.") + shapes[i].name;
    MLA_TRY(
        detail::expect_dtype(t, name.c_str(), {shapes[i].ndim == 1 ? DType::f32 : DType::bf16}));
    if (!t.is_contiguous())
      return error(Errc::invalid_stride, "{} must be contiguous on CUDA", name);
  }
  const int64_t big = std::max<int64_t>({a.config.hidden, int64_t(a.config.heads) * kDqk,
                                         a.hidden.shape[0] * a.hidden.shape[1] * a.config.heads});
  if (big > INT_MAX)
    return error(Errc::unsupported, "layer_forward: sizes past the 32-bit cuBLAS interface");
  return Status::Ok();
}

}  // namespace

Status layer_workspace_size(const LayerForwardArgs& a, size_t* bytes) {
  MLA_TRY(check_cuda_layout(a));
  Layout L;
  MLA_TRY(layout_of(a, &L));
  *bytes = L.total;
  return Status::Ok();
}

Status layer_forward(const LayerForwardArgs& a, Workspace ws, const ExecContext& ctx) {
  MLA_TRY(check_cuda_layout(a));
  Layout L;
  MLA_TRY(layout_of(a, &L));
  if (ws.bytes < L.total || (L.total > 0 && ws.data == nullptr))
    return error(Errc::insufficient_workspace,
                 "layer_forward: ws.bytes = {} is less than layer_workspace_size = {}", ws.bytes,
                 L.total);
  const Dims d = dims_of(a);
  const LayerConfig& c = a.config;
  const LayerWeights& w = a.weights;
  const Device dev = a.hidden.device;
  void* s = ctx.stream;
  char* base = static_cast<char*>(ws.data);
  auto at = [&](size_t off) { return static_cast<void*>(base + off); };
  auto f32 = [&](size_t off) { return reinterpret_cast<float*>(base + off); };
  const float eps = float(c.norm_eps);
  const int64_t wq = d.H * (d.dn + d.dr);
  cublasHandle_t h = nullptr;
  MLA_TRY(cublas_handle(s, &h));

  // Positions and cache slots of the new tokens (device data, so on device).
  auto* positions = reinterpret_cast<int64_t*>(at(L.positions));
  MLA_TRY(layer::token_slots(a.cache_seqlens.ptr<int32_t>(), a.block_table.ptr<int32_t>(),
                             a.block_table.strides[0], d.B, d.s_q, a.kv.page_size(), positions,
                             reinterpret_cast<int64_t*>(at(L.slots)), s));
  layer::RopeTable rope{};
  const std::vector<double> inv_freq = detail::yarn_inv_freq(c.rope);
  for (int j = 0; j < kDr / 2; ++j) rope.inv_freq[j] = inv_freq[j];
  rope.attn_factor = float(rope_attention_factor(c.rope));

  // Queries: q_lat = RMSNorm(W_qa x); q = W_qb q_lat; RoPE (interleaved) on q_rope.
  const void* x = a.hidden.data;
  MLA_TRY(linear(h, w.wq_a.data, d.qr, d.D, x, d.D, d.N, at(L.q_lat), CUDA_R_32F, d.qr, "wq_a"));
  MLA_TRY(layer::rms_norm(f32(L.q_lat), d.N, d.qr, d.qr, w.q_norm.ptr<float>(), eps, s));
  MLA_TRY(layer::to_bf16(f32(L.q_lat), d.qr, at(L.q_lat16), d.qr, d.N, d.qr, s));
  MLA_TRY(
      linear(h, w.wq_b.data, wq, d.qr, at(L.q_lat16), d.qr, d.N, at(L.q), CUDA_R_32F, wq, "wq_b"));
  MLA_TRY(layer::rope(f32(L.q), d.N, d.H, d.dn + d.dr, d.dn, positions, rope, false, s));
  MLA_TRY(layer::to_bf16(f32(L.q), wq, at(L.q16), wq, d.N, wq, s));

  // Keys: [c_kv ; k_rope] = W_kva x; RMSNorm on c_kv; RoPE on k_rope; append.
  MLA_TRY(linear(h, w.wkv_a.data, kDqk, d.D, x, d.D, d.N, at(L.kv), CUDA_R_32F, kDqk, "wkv_a"));
  MLA_TRY(layer::rms_norm(f32(L.kv), d.N, kDc, kDqk, w.kv_norm.ptr<float>(), eps, s));
  MLA_TRY(layer::rope(f32(L.kv), d.N, 1, kDqk, kDc, positions, rope, false, s));
  {
    AppendKvArgs ap;
    ap.c_kv = dev_view(base, L.kv, DType::f32, {d.N, kDc}, dev);
    ap.c_kv.strides[0] = kDqk;
    ap.k_rope = dev_view(base, L.kv + kDc * 4, DType::f32, {d.N, kDr}, dev);
    ap.k_rope.strides[0] = kDqk;
    ap.slots = dev_view(base, L.slots, DType::i64, {d.N}, dev);
    ap.cache = a.kv;
    MLA_TRY(append_kv(ap, ctx));
  }

  // Indexer keys: LayerNorm(W_ik x), RoPE (half-split) on the first 64, Hadamard.
  if (a.index_cache.data.defined()) {
    MLA_TRY(linear(h, w.idx_wk.data, kIndexerDim, d.D, x, d.D, d.N, at(L.ki), CUDA_R_32F,
                   kIndexerDim, "idx_wk"));
    MLA_TRY(layer::layer_norm(f32(L.ki), d.N, kIndexerDim, kIndexerDim, w.idx_k_norm_w.ptr<float>(),
                              w.idx_k_norm_b.ptr<float>(), eps, s));
    MLA_TRY(layer::rope(f32(L.ki), d.N, 1, kIndexerDim, 0, positions, rope, true, s));
    MLA_TRY(layer::hadamard128(f32(L.ki), d.N, s));
    AppendIndexerKeysArgs ap;
    ap.keys = dev_view(base, L.ki, DType::f32, {d.N, kIndexerDim}, dev);
    ap.slots = dev_view(base, L.slots, DType::i64, {d.N}, dev);
    ap.cache = a.index_cache;
    MLA_TRY(append_indexer_keys(ap, ctx));
  }

  // Absorbed queries: q_abs[n, h] = [W_UK[h]^T q_nope ; q_rope] (bf16, 576).
  {
    const float one = 1.f, zero = 0.f;
    // Column-major per head: C_h (512 x N, ldc H*576) = A_h (W_UK[h] as 512 x dn) * B_h (dn x N).
    MLA_TRY(cublas_check(
        cublasGemmStridedBatchedEx(
            h, CUBLAS_OP_N, CUBLAS_OP_N, kDc, int(d.N), int(d.dn), &one, w.w_uk.data, CUDA_R_16BF,
            kDc, d.dn * kDc, at(L.q16), CUDA_R_16BF, int(wq), d.dn + d.dr, &zero, at(L.q_abs),
            CUDA_R_16BF, int(d.H * kDqk), kDqk, int(d.H), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "W_UK absorption"));
    // Rope part, per (token, head) row: q[.., dn:] -> q_abs[.., 512:].
    MLA_TRY(layer::to_bf16(f32(L.q) + d.dn, d.dn + d.dr, base + L.q_abs + kDc * 2, kDqk, d.N * d.H,
                           d.dr, s));
  }

  Workspace attn_ws{base + L.attn_ws, L.attn_ws_bytes};
  if (a.attention == LayerAttention::sparse) {
    // Indexer queries: W_iqb q_lat, RoPE (half-split), Hadamard; weights W_iw x.
    MLA_TRY(linear(h, w.idx_wq_b.data, kIndexerHeads * kIndexerDim, d.qr, at(L.q_lat16), d.qr, d.N,
                   at(L.qi), CUDA_R_32F, kIndexerHeads * kIndexerDim, "idx_wq_b"));
    MLA_TRY(layer::rope(f32(L.qi), d.N, kIndexerHeads, kIndexerDim, 0, positions, rope, true, s));
    MLA_TRY(layer::hadamard128(f32(L.qi), d.N * kIndexerHeads, s));
    MLA_TRY(linear(h, w.idx_w_proj.data, kIndexerHeads, d.D, x, d.D, d.N, at(L.wts), CUDA_R_32F,
                   kIndexerHeads, "idx_w_proj"));
    QuantizeIndexerQueryArgs qa;
    qa.q = dev_view(base, L.qi, DType::f32, {d.B, d.s_q, kIndexerHeads, kIndexerDim}, dev);
    qa.weights = dev_view(base, L.wts, DType::f32, {d.B, d.s_q, kIndexerHeads}, dev);
    qa.q8 = dev_view(base, L.q8, DType::e4m3, {d.B, d.s_q, kIndexerHeads, kIndexerDim}, dev);
    qa.w_folded = dev_view(base, L.w_folded, DType::f32, {d.B, d.s_q, kIndexerHeads}, dev);
    MLA_TRY(quantize_indexer_query(qa, ctx));
    MLA_TRY(dsa_decode(dsa_args(a, d, L, base), dsa_policy(c), attn_ws, ctx));
  } else {
    MLA_TRY(mla_decode(decode_args(a, d, L, base), DecodeOptions{}, attn_ws, ctx));
  }

  // o[n, h] = W_UV[h] o_lat[n, h] (bf16): column-major C_h (dv x N, ldc H*dv) =
  // op_T(W_UV[h] as 512 x dv) * B_h (o_lat[., h] as 512 x N, ldb H*512).
  {
    const float one = 1.f, zero = 0.f;
    MLA_TRY(cublas_check(
        cublasGemmStridedBatchedEx(
            h, CUBLAS_OP_T, CUBLAS_OP_N, int(d.dv), int(d.N), kDc, &one, w.w_uv.data, CUDA_R_16BF,
            kDc, d.dv * kDc, at(L.o_lat), CUDA_R_16BF, int(d.H * kDv), kDv, &zero, at(L.o),
            CUDA_R_16BF, int(d.H * d.dv), d.dv, int(d.H), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "W_UV"));
  }
  return linear(h, w.wo.data, d.D, d.H * d.dv, at(L.o), d.H * d.dv, d.N, a.out.data,
                a.out.dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F, d.D, "wo");
}

}  // namespace mla::cuda
