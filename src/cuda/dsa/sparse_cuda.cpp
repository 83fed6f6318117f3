// The sparse attention backends: validated API arguments -> SparseAttnParams,
// the workspace check, the launch. What the kernel demands beyond the API's
// checks (bf16 q and out, h_q a multiple of 16, 16-byte aligned rows for its
// cp.async loads) is checked here and answered with a Status naming the
// argument. Decode and prefill share everything but the key addressing:
// prefill's flat kv [s_kv, 576] is a cache of pages of one token. Decode runs
// the wgmma decode kernel with the Indexed key source (decode_sparse.hpp)
// where it takes the call; MLA_SPARSE_KERNEL=mma forces sparse_attn.cu's.
// Prefill runs the sparse prefill kernel (src/cuda/sparse); MLA_SPARSE_KERNEL=
// wgmma / mma force the two older paths.
#include "cuda/dsa/sparse_cuda.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/validate.hpp"
#include "cuda/decode/decode_sparse.hpp"
#include "cuda/dsa/sparse_launch.hpp"
#include "cuda/sparse/sparse_prefill_launch.hpp"

namespace mla::cuda {

using detail::error;
namespace k = mla::cuda::dsa;

namespace {

// The mma.sync kernel's grid has one y-row per query row; CUDA allows 65535.
// Prefill cuts its query tokens into chunks of this size for both kernels: the
// wgmma path has no such limit, but a chunk of 65535 tokens is ~40 TFLOP at
// top-2048 / 128 heads, so the drain between chunks costs nothing measurable
// and one chunking rule serves both.
constexpr int64_t kMaxRowsPerLaunch = 65535;

Status expect_kernel_dtypes(const TensorView& q, const TensorView& out, const TensorView& lse) {
  if (q.dtype != DType::bf16)
    return error(Errc::unsupported, "q: dtype {} on CUDA; the sparse attention kernel takes bf16",
                 dtype_name(q.dtype));
  if (out.dtype != DType::bf16)
    return error(Errc::unsupported,
                 "out: dtype {} on CUDA; the sparse attention kernel writes bf16",
                 dtype_name(out.dtype));
  if (lse.dtype != DType::f32)
    return error(Errc::unsupported, "lse: dtype {} on CUDA; the kernel writes f32",
                 dtype_name(lse.dtype));
  return Status::Ok();
}

Status expect_heads(int64_t h_q) {
  if (h_q % 16 != 0)
    return error(Errc::unsupported,
                 "q: h_q = {} on CUDA; the sparse attention kernel takes multiples of 16 heads",
                 h_q);
  return Status::Ok();
}

// q rows are loaded in 16-byte pieces (8 bf16): base and every stride aligned.
Status expect_q_rows(const TensorView& q) {
  MLA_TRY(detail::expect_aligned(q, "q", 16));
  for (int d = 0; d + 1 < q.ndim; ++d)
    if (q.shape[d] > 1 && q.strides[d] % 8 != 0)
      return error(Errc::misaligned,
                   "q: stride of dim {} is {} elements; the CUDA kernel needs multiples of 8 "
                   "(16-byte rows)",
                   d, q.strides[d]);
  return Status::Ok();
}

// out rows are written in pairs of bf16 (4 bytes).
Status expect_out_rows(const TensorView& out) {
  MLA_TRY(detail::expect_aligned(out, "out", 4));
  for (int d = 0; d + 1 < out.ndim; ++d)
    if (out.shape[d] > 1 && out.strides[d] % 2 != 0)
      return error(Errc::misaligned,
                   "out: stride of dim {} is {} elements; the CUDA kernel needs even strides", d,
                   out.strides[d]);
  return Status::Ok();
}

int64_t stride_or_zero(const TensorView& t, int d) {
  return t.shape[d] > 1 ? t.strides[d] : 0;
}

Status decode_params(const SparseDecodeArgs& a, k::SparseAttnParams* p) {
  MLA_TRY(expect_kernel_dtypes(a.q, a.out, a.lse));
  const int64_t B = a.q.shape[0], s_q = a.q.shape[1], h_q = a.q.shape[2];
  MLA_TRY(expect_heads(h_q));
  if (B * s_q > kMaxRowsPerLaunch)
    return error(Errc::unsupported, "q: B * s_q = {} * {} past the CUDA kernel's {} query rows", B,
                 s_q, kMaxRowsPerLaunch);
  const int64_t topk = a.indices.shape[2];
  if (topk > INT32_MAX) return error(Errc::unsupported, "indices: topk = {} past 2^31-1", topk);
  MLA_TRY(expect_q_rows(a.q));
  MLA_TRY(expect_out_rows(a.out));
  const TensorView& kv = a.kv.data;
  MLA_TRY(detail::expect_aligned(kv, "kv", 16));
  const int64_t esz = dtype_size(kv.dtype);
  const int64_t page_stride = kv.strides[0] * esz, token_stride = kv.strides[1] * esz;
  if ((kv.shape[0] > 1 && page_stride % 16) || (kv.shape[1] > 1 && token_stride % 16))
    return error(Errc::misaligned,
                 "kv: page stride {} B / token stride {} B; the CUDA kernel loads entries in "
                 "16-byte pieces (multiples of 16 needed)",
                 page_stride, token_stride);
  if (a.topk_length.defined() && B > 1 && a.topk_length.strides[0] != 1)
    return error(Errc::invalid_stride, "topk_length: must be dense (stride {})",
                 a.topk_length.strides[0]);
  p->q = a.q.data;
  p->q_sb = stride_or_zero(a.q, 0), p->q_ss = stride_or_zero(a.q, 1), p->q_sh = a.q.strides[2];
  p->batch = int(B), p->s_q = int(s_q), p->h_q = int(h_q);
  p->indices = static_cast<const int32_t*>(a.indices.data);
  p->idx_sb = stride_or_zero(a.indices, 0), p->idx_ss = stride_or_zero(a.indices, 1);
  p->topk = int(topk);
  p->topk_length =
      a.topk_length.defined() ? static_cast<const int32_t*>(a.topk_length.data) : nullptr;
  p->kv = static_cast<const uint8_t*>(kv.data);
  p->fp8 = a.kv.format == KvFormat::fp8_ds_mla;
  p->page_stride = page_stride, p->token_stride = token_stride;
  p->page_size = a.kv.page_size();
  p->num_slots = std::min<int64_t>(a.kv.num_pages() * a.kv.page_size(), int64_t(INT32_MAX) + 1);
  p->softmax_scale = a.softmax_scale;
  p->out = a.out.data;
  p->out_sb = stride_or_zero(a.out, 0), p->out_ss = stride_or_zero(a.out, 1);
  p->out_sh = a.out.strides[2];
  p->lse = static_cast<float*>(a.lse.data);
  p->lse_sb = stride_or_zero(a.lse, 0), p->lse_sh = a.lse.strides[1],
  p->lse_ss = stride_or_zero(a.lse, 2);
  return Status::Ok();
}

// Prefill as decode: every query token is a "request" of one query, kv is a
// cache of s_kv pages of one token (slot = row). Rows past kMaxRowsPerLaunch
// go in several launches; chunk c covers rows [c * kMax, ...). These params
// feed either kernel: sparse_attn.cu's, or the wgmma decode kernel's Indexed
// key source (page_size 1, page_stride = the row stride).
Status prefill_params(const SparsePrefillArgs& a, k::SparseAttnParams* p) {
  MLA_TRY(expect_kernel_dtypes(a.q, a.out, a.lse));
  const int64_t s_q = a.q.shape[0], h_q = a.q.shape[1];
  MLA_TRY(expect_heads(h_q));
  const int64_t topk = a.indices.shape[1];
  if (topk > INT32_MAX) return error(Errc::unsupported, "indices: topk = {} past 2^31-1", topk);
  MLA_TRY(expect_q_rows(a.q));
  MLA_TRY(expect_out_rows(a.out));
  if (a.kv.dtype != DType::bf16)
    return error(Errc::unsupported, "kv: dtype {} on CUDA; the sparse prefill kernel takes bf16",
                 dtype_name(a.kv.dtype));
  MLA_TRY(detail::expect_aligned(a.kv, "kv", 16));
  const int64_t row_bytes = a.kv.strides[0] * 2;
  if (a.kv.shape[0] > 1 && row_bytes % 16)
    return error(Errc::misaligned,
                 "kv: row stride {} B; the CUDA kernel loads rows in 16-byte pieces (multiples of "
                 "16 needed)",
                 row_bytes);
  p->q = a.q.data;
  p->q_sb = stride_or_zero(a.q, 0), p->q_ss = 0, p->q_sh = a.q.strides[1];
  p->batch = int(std::min(s_q, kMaxRowsPerLaunch)), p->s_q = 1, p->h_q = int(h_q);
  p->indices = static_cast<const int32_t*>(a.indices.data);
  p->idx_sb = stride_or_zero(a.indices, 0), p->idx_ss = 0;
  p->topk = int(topk);
  if (a.topk_length.defined() && s_q > 1 && a.topk_length.strides[0] != 1)
    return error(Errc::invalid_stride, "topk_length: must be dense (stride {})",
                 a.topk_length.strides[0]);
  p->topk_length =
      a.topk_length.defined() ? static_cast<const int32_t*>(a.topk_length.data) : nullptr;
  p->kv = static_cast<const uint8_t*>(a.kv.data);
  p->fp8 = false;
  p->page_stride = row_bytes, p->token_stride = 0, p->page_size = 1;
  p->num_slots = std::min<int64_t>(a.kv.shape[0], int64_t(INT32_MAX) + 1);
  p->softmax_scale = a.softmax_scale;
  p->out = a.out.data;
  p->out_sb = stride_or_zero(a.out, 0), p->out_ss = 0, p->out_sh = a.out.strides[1];
  p->lse = static_cast<float*>(a.lse.data);
  p->lse_sb = stride_or_zero(a.lse, 0), p->lse_sh = a.lse.strides[1], p->lse_ss = 0;
  return Status::Ok();
}

// Query tokens per prefill launch: kMaxRowsPerLaunch, or fewer with
// MLA_SPARSE_PREFILL_CHUNK=<rows> (tests: the chunked path at a small s_q).
int64_t prefill_chunk_rows() {
  if (const char* env = std::getenv("MLA_SPARSE_PREFILL_CHUNK")) {
    const long long v = std::atoll(env);
    if (v >= 1 && v < kMaxRowsPerLaunch) return v;
  }
  return kMaxRowsPerLaunch;
}

// The params of prefill chunk c (rows [c * rows, min(s_q, (c + 1) * rows))).
k::SparseAttnParams prefill_chunk(const k::SparseAttnParams& p0, int64_t s_q, int64_t c,
                                  int64_t rows) {
  k::SparseAttnParams p = p0;
  const int64_t r0 = c * rows;
  p.batch = int(std::min(rows, s_q - r0));
  p.q = static_cast<const uint16_t*>(p0.q) + r0 * p0.q_sb;
  p.indices = p0.indices + r0 * p0.idx_sb;
  p.out = static_cast<uint16_t*>(p0.out) + r0 * p0.out_sb;
  p.lse = p0.lse + r0 * p0.lse_sb;
  if (p0.topk_length) p.topk_length = p0.topk_length + r0;
  return p;
}

// The sparse prefill kernel's params of one chunk (prefill_params' layout:
// token = "batch" row, kv rows = pages of one token).
mla::cuda::sparse::SparsePrefillParams gather_params(const k::SparseAttnParams& pc) {
  mla::cuda::sparse::SparsePrefillParams g;
  g.q = pc.q, g.q_ss = pc.q_sb, g.q_sh = pc.q_sh, g.s_q = pc.batch, g.h_q = pc.h_q;
  g.indices = pc.indices, g.idx_ss = pc.idx_sb, g.topk = pc.topk, g.topk_length = pc.topk_length;
  g.kv = pc.kv, g.kv_row_stride = pc.num_slots > 1 ? pc.page_stride / 2 : 0;
  g.s_kv = pc.num_slots;
  g.softmax_scale = pc.softmax_scale;
  g.out = pc.out, g.out_ss = pc.out_sb, g.out_sh = pc.out_sh;
  g.lse = pc.lse, g.lse_ss = pc.lse_sb, g.lse_sh = pc.lse_sh;
  return g;
}

int64_t prefill_chunks(int64_t s_q, int64_t rows) {
  return (s_q + rows - 1) / rows;
}

// The kernel a prefill call runs and the scratch it needs, computed the same
// way by the sizing call and by the call itself. The wgmma decode kernel
// (decode_sparse.hpp: each query token is a request of one query, kv a cache
// of pages of one token) unless MLA_SPARSE_KERNEL=mma or it cannot take p.
enum class PrefillKernel { gather, decode_wgmma, mma };
struct PrefillPlan {
  PrefillKernel kernel = PrefillKernel::gather;
  size_t need = 0;
  int64_t rows = kMaxRowsPerLaunch;  // query tokens per launch
};

Status prefill_plan(const k::SparseAttnParams& p0, int64_t s_q, PrefillPlan* plan) {
  // The sparse prefill kernel (src/cuda/sparse); MLA_SPARSE_KERNEL=wgmma / mma
  // force the older paths (same-run comparisons).
  const std::string forced =
      std::getenv("MLA_SPARSE_KERNEL") ? std::getenv("MLA_SPARSE_KERNEL") : "";
  plan->kernel = forced == "mma" ? PrefillKernel::mma
                 : forced == "wgmma" && mla::cuda::decode::sparse_wgmma_chosen(p0)
                     ? PrefillKernel::decode_wgmma
                     : PrefillKernel::gather;
  plan->need = 0;
  plan->rows = prefill_chunk_rows();
  if (s_q == 0 || plan->kernel == PrefillKernel::gather) return Status::Ok();
  // Only the first and the last chunk differ in size.
  for (const int64_t c : {int64_t(0), prefill_chunks(s_q, plan->rows) - 1}) {
    const k::SparseAttnParams pc = prefill_chunk(p0, s_q, c, plan->rows);
    size_t n = 0;
    if (plan->kernel == PrefillKernel::decode_wgmma)
      MLA_TRY(mla::cuda::decode::sparse_wgmma_workspace_size(pc, &n));
    else
      n = k::sparse_attn_workspace_size(pc);
    plan->need = std::max(plan->need, n);
  }
  return Status::Ok();
}

// The kernel works without scratch too (no split), but the API promises the
// documented size is what a call uses: a short workspace is an error, not a
// silent slow path.
Status expect_workspace(const Workspace& ws, size_t need, const char* sizer) {
  if (need == 0) return Status::Ok();
  if (ws.bytes < need)
    return error(Errc::insufficient_workspace, "workspace: {} bytes given, this call needs {} ({})",
                 ws.bytes, need, sizer);
  if (ws.data == nullptr || reinterpret_cast<uintptr_t>(ws.data) % 16 != 0)
    return error(Errc::misaligned, "workspace: pointer {} must be non-null and 16-byte aligned",
                 ws.data);
  return Status::Ok();
}

cudaStream_t stream_of(const ExecContext& ctx) {
  return static_cast<cudaStream_t>(ctx.stream);
}

}  // namespace

Status sparse_decode_workspace_size(const SparseDecodeArgs& a, size_t* bytes) {
  k::SparseAttnParams p;
  MLA_TRY(decode_params(a, &p));
  if (mla::cuda::decode::sparse_wgmma_chosen(p))
    return mla::cuda::decode::sparse_wgmma_workspace_size(p, bytes);
  *bytes = k::sparse_attn_workspace_size(p);
  return Status::Ok();
}

Status sparse_decode(const SparseDecodeArgs& a, Workspace ws, const ExecContext& ctx) {
  k::SparseAttnParams p;
  MLA_TRY(decode_params(a, &p));
  if (mla::cuda::decode::sparse_wgmma_chosen(p))
    return mla::cuda::decode::launch_sparse_wgmma(p, ws.data, ws.bytes, stream_of(ctx));
  const size_t need = k::sparse_attn_workspace_size(p);
  MLA_TRY(expect_workspace(ws, need, "sparse_workspace_size"));
  return k::launch_sparse_attn(p, ws.data, ws.bytes, stream_of(ctx));
}

Status sparse_prefill_workspace_size(const SparsePrefillArgs& a, size_t* bytes) {
  k::SparseAttnParams p;
  MLA_TRY(prefill_params(a, &p));
  PrefillPlan plan;
  MLA_TRY(prefill_plan(p, a.q.shape[0], &plan));
  *bytes = plan.need;
  return Status::Ok();
}

Status sparse_prefill(const SparsePrefillArgs& a, Workspace ws, const ExecContext& ctx) {
  k::SparseAttnParams p;
  MLA_TRY(prefill_params(a, &p));
  const int64_t s_q = a.q.shape[0];
  PrefillPlan plan;
  MLA_TRY(prefill_plan(p, s_q, &plan));
  MLA_TRY(expect_workspace(ws, plan.need, "sparse_workspace_size"));
  // Chunks run one after another on the stream, so they can share the scratch.
  for (int64_t c = 0; c < prefill_chunks(s_q, plan.rows); ++c) {
    const k::SparseAttnParams pc = prefill_chunk(p, s_q, c, plan.rows);
    switch (plan.kernel) {
      case PrefillKernel::gather:
        MLA_TRY(mla::cuda::sparse::launch_sparse_prefill(gather_params(pc), stream_of(ctx)));
        break;
      case PrefillKernel::decode_wgmma:
        MLA_TRY(mla::cuda::decode::launch_sparse_wgmma(pc, ws.data, ws.bytes, stream_of(ctx)));
        break;
      case PrefillKernel::mma:
        MLA_TRY(k::launch_sparse_attn(pc, ws.data, ws.bytes, stream_of(ctx)));
        break;
    }
  }
  return Status::Ok();
}

}  // namespace mla::cuda
