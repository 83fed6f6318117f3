// The sparse attention backends: validated API arguments -> SparseAttnParams,
// the kernel choice, the workspace check, the launch. What the kernels demand
// beyond the API's checks (bf16 q and out, h_q a multiple of 16, 16-byte
// aligned rows for their cp.async loads) is checked here and answered with a
// Status naming the argument. Decode and prefill share everything but the key
// addressing: prefill's flat kv [s_kv, 576] is a cache of pages of one token.
//
// The decode_wgmma kernel is cuda/decode's main kernel with the Indexed key
// source on the same split schedule and combine: every query token is its own
// request (h_q rows, no causal mask) whose keys are its index list; the
// scheduler derives the per-token key counts from topk_length on the GPU, so
// nothing synchronises (graph-capturable).
#include "cuda/sparse/sparse_cuda.hpp"

#include <algorithm>
#include <cstdint>

#include "common/validate.hpp"
#include "cuda/common/cuda_status.hpp"
#include "cuda/decode/decode_config.hpp"
#include "cuda/decode/decode_launch.hpp"
#include "cuda/decode/split/split.hpp"
#include "cuda/sparse/sparse_params.hpp"
#include "cuda/sparse/sparse_prefill_launch.hpp"

namespace mla::cuda {

using detail::error;
using sparse::Kernel;
using sparse::kMaxTokensPerLaunch;
using sparse::SparseAttnParams;
namespace k = mla::cuda::sparse;

namespace {

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

// A bf16 view whose rows the kernel moves in pieces of `bytes`: base and every
// outer stride aligned to them.
Status expect_bf16_rows(const TensorView& t, const char* name, int bytes) {
  MLA_TRY(detail::expect_aligned(t, name, bytes));
  const int elems = bytes / 2;
  for (int d = 0; d + 1 < t.ndim; ++d)
    if (t.shape[d] > 1 && t.strides[d] % elems != 0)
      return error(Errc::misaligned,
                   "{}: stride of dim {} is {} elements; the CUDA kernel needs multiples of {} "
                   "({}-byte pieces)",
                   name, d, t.strides[d], elems, bytes);
  return Status::Ok();
}

// q rows are loaded in 16-byte pieces (8 bf16).
Status expect_q_rows(const TensorView& q) {
  return expect_bf16_rows(q, "q", 16);
}

// out rows are written in pairs of bf16 (4 bytes).
Status expect_out_rows(const TensorView& out) {
  return expect_bf16_rows(out, "out", 4);
}

int64_t stride_or_zero(const TensorView& t, int d) {
  return t.shape[d] > 1 ? t.strides[d] : 0;
}

Status decode_params(const SparseDecodeArgs& a, SparseAttnParams* p) {
  MLA_TRY(expect_kernel_dtypes(a.q, a.out, a.lse));
  const int64_t B = a.q.shape[0], s_q = a.q.shape[1], h_q = a.q.shape[2];
  MLA_TRY(expect_heads(h_q));
  if (B * s_q > kMaxTokensPerLaunch)
    return error(Errc::unsupported, "q: B * s_q = {} * {} past the CUDA kernel's {} query rows", B,
                 s_q, kMaxTokensPerLaunch);
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
  if (a.kv.format == KvFormat::fp8_e4m3) p->k_scale = static_cast<const float*>(a.kv.scale.data);
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
// cache of s_kv pages of one token (slot = row, page_size 1, page_stride =
// the row stride). The query tokens go in launches of at most
// Options::prefill_chunk_tokens (prefill_chunk below).
Status prefill_params(const SparsePrefillArgs& a, SparseAttnParams* p) {
  MLA_TRY(expect_kernel_dtypes(a.q, a.out, a.lse));
  const int64_t s_q = a.q.shape[0], h_q = a.q.shape[1];
  MLA_TRY(expect_heads(h_q));
  const int64_t topk = a.indices.shape[1];
  if (topk > INT32_MAX) return error(Errc::unsupported, "indices: topk = {} past 2^31-1", topk);
  MLA_TRY(expect_q_rows(a.q));
  MLA_TRY(expect_out_rows(a.out));
  const bool fp8 = a.kv_format == KvFormat::fp8_ds_mla;  // u8 / e4m3 entries (validated)
  if (!fp8 && a.kv.dtype != DType::bf16)
    return error(Errc::unsupported,
                 "kv: dtype {} on CUDA; the sparse kernels take bf16 rows or fp8_ds_mla entries",
                 dtype_name(a.kv.dtype));
  MLA_TRY(detail::expect_aligned(a.kv, "kv", 16));
  const int64_t row_bytes = a.kv.strides[0] * (fp8 ? 1 : 2);
  if (a.kv.shape[0] > 1 && row_bytes % 16)
    return error(Errc::misaligned,
                 "kv: row stride {} B; the CUDA kernel loads rows in 16-byte pieces (multiples of "
                 "16 needed)",
                 row_bytes);
  p->q = a.q.data;
  p->q_sb = stride_or_zero(a.q, 0), p->q_ss = 0, p->q_sh = a.q.strides[1];
  p->batch = int(std::min(s_q, kMaxTokensPerLaunch)), p->s_q = 1, p->h_q = int(h_q);
  p->indices = static_cast<const int32_t*>(a.indices.data);
  p->idx_sb = stride_or_zero(a.indices, 0), p->idx_ss = 0;
  p->topk = int(topk);
  if (a.topk_length.defined() && s_q > 1 && a.topk_length.strides[0] != 1)
    return error(Errc::invalid_stride, "topk_length: must be dense (stride {})",
                 a.topk_length.strides[0]);
  p->topk_length =
      a.topk_length.defined() ? static_cast<const int32_t*>(a.topk_length.data) : nullptr;
  p->kv = static_cast<const uint8_t*>(a.kv.data);
  p->fp8 = fp8;
  p->page_stride = row_bytes, p->token_stride = 0, p->page_size = 1;
  p->num_slots = std::min<int64_t>(a.kv.shape[0], int64_t(INT32_MAX) + 1);
  p->softmax_scale = a.softmax_scale;
  p->out = a.out.data;
  p->out_sb = stride_or_zero(a.out, 0), p->out_ss = 0, p->out_sh = a.out.strides[1];
  p->lse = static_cast<float*>(a.lse.data);
  p->lse_sb = stride_or_zero(a.lse, 0), p->lse_sh = a.lse.strides[1], p->lse_ss = 0;
  return Status::Ok();
}

// The params of prefill chunk c (rows [c * rows, min(s_q, (c + 1) * rows))).
SparseAttnParams prefill_chunk(const SparseAttnParams& p0, int64_t s_q, int64_t c, int64_t rows) {
  SparseAttnParams p = p0;
  const int64_t r0 = c * rows;
  p.batch = int(std::min(rows, s_q - r0));
  p.q = static_cast<const uint16_t*>(p0.q) + r0 * p0.q_sb;
  p.indices = p0.indices + r0 * p0.idx_sb;
  p.out = static_cast<uint16_t*>(p0.out) + r0 * p0.out_sb;
  p.lse = p0.lse + r0 * p0.lse_sb;
  if (p0.topk_length) p.topk_length = p0.topk_length + r0;  // prefill: one length per token
  return p;
}

int64_t prefill_chunks(int64_t s_q, int64_t rows) {
  return (s_q + rows - 1) / rows;
}

// Stride between consecutive query tokens' index lists of the flattened
// [batch, s_q] (stride_or_zero views: a dim of size 1 has stride 0), or -1
// when the two dims do not flatten into one.
int64_t index_token_stride(const SparseAttnParams& p) {
  if (p.s_q == 1) return p.idx_sb;
  if (p.batch == 1 || p.idx_sb == int64_t(p.s_q) * p.idx_ss) return p.idx_ss;
  return -1;
}

k::Problem problem_of(const SparseAttnParams& p, bool prefill) {
  return {.prefill = prefill,
          .fp8 = p.fp8,
          .fp8_e4m3 = p.k_scale != nullptr,
          .h_q = p.h_q,
          .tokens = int64_t(p.batch) * p.s_q,
          .page_size = p.page_size,
          .flat_index = index_token_stride(p) >= 0};
}

Status resolve_kernel(Kernel forced, const SparseAttnParams& p, bool prefill, Kernel* kernel) {
  const k::Problem problem = problem_of(p, prefill);
  *kernel = forced == Kernel::automatic ? k::choose_kernel(problem) : forced;
  // Only the wgmma kernel reads fp8_e4m3 keys, and it walks the index lists by one token
  // stride: lists of [B, s_q] that do not flatten leave no kernel for that cache.
  if (forced == Kernel::automatic && !k::kernel_takes(*kernel, problem) && problem.fp8_e4m3)
    return error(Errc::unsupported,
                 "indices: an fp8_e4m3 cache needs index lists whose [B, s_q] rows flatten to "
                 "one token stride (strides {} and {} for s_q = {}); pass contiguous indices",
                 p.idx_sb, p.idx_ss, p.s_q);
  if (!k::kernel_takes(*kernel, problem))
    return error(Errc::unsupported,
                 "kernel: {} cannot run h_q = {}, {} query tokens, page_size {}{}",
                 k::kernel_name(*kernel), p.h_q, problem.tokens, p.page_size,
                 problem.flat_index ? "" : " (the index lists of [B, s_q] do not flatten)");
  return Status::Ok();
}

// ---- the decode_wgmma kernel ----

// The kernels that run cuda/decode's main kernel (decode_oneway: its one-way
// math form; decode_wgmma_sp: its fp8 producer's sector-pair loads): same
// schedule, workspace, plan and combine.
bool on_decode_kernel(Kernel k) {
  return k == Kernel::decode_wgmma || k == Kernel::decode_oneway || k == Kernel::decode_wgmma_sp;
}

struct DecodeGeometry {
  int64_t tokens = 0;  // requests of the decode schedule: batch * s_q
  int row_blocks = 0, num_workers = 0;
  split::WorkspaceLayout layout;
};

Status decode_geometry(const SparseAttnParams& sp, DecodeGeometry* g) {
  int dev = -1;
  MLA_CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice");
  DeviceFacts f;
  MLA_TRY(device_facts(dev, &f));
  if (f.major != 9)
    return error(Errc::unsupported,
                 "cuda:{} has compute capability {}.{}; the sparse decode kernel is built for "
                 "sm_90a (Hopper)",
                 dev, f.major, f.minor);
  if (decode::kSmemBytes > size_t(f.max_smem_per_block_optin))
    return error(Errc::unsupported,
                 "cuda:{}: the decode kernel needs {} B of shared memory, the "
                 "device allows {}",
                 dev, decode::kSmemBytes, f.max_smem_per_block_optin);
  g->tokens = int64_t(sp.batch) * sp.s_q;
  g->row_blocks = (sp.h_q + decode::kM - 1) / decode::kM;
  g->num_workers = std::max(1, f.sm_count / g->row_blocks);
  g->layout = split::workspace_layout(g->tokens, sp.h_q, g->num_workers, /*batch_invariant=*/false,
                                      /*token_lengths=*/true);
  return Status::Ok();
}

// The decode kernel's params: every query token is a request of s_q = 1 whose
// keys are its index list (decode_params.hpp, key source Indexed).
decode::DecodeParams decode_params_of(const SparseAttnParams& sp, const DecodeGeometry& g,
                                      void* workspace, const void* plan) {
  decode::DecodeParams p{};
  p.q = sp.q;
  p.q_stride_b = sp.q_sb, p.q_stride_s = sp.q_ss, p.q_stride_h = sp.q_sh;
  p.kv = sp.kv;
  p.k_scale = sp.k_scale;
  p.page_stride_bytes = sp.page_stride, p.token_stride_bytes = sp.token_stride;
  p.page_size = int32_t(sp.page_size);
  // The scheduler's length check is len <= max_pages * page_size: capacity >= topk.
  p.max_pages = int32_t((int64_t(sp.topk) + sp.page_size - 1) / sp.page_size);
  p.out = sp.out;
  p.out_f32 = false;
  p.out_stride_b = sp.out_sb, p.out_stride_s = sp.out_ss, p.out_stride_h = sp.out_sh;
  p.lse = sp.lse;
  p.lse_stride_b = sp.lse_sb, p.lse_stride_h = sp.lse_sh, p.lse_stride_s = sp.lse_ss;
  p.B = int32_t(g.tokens);
  p.s_q = 1, p.h_q = sp.h_q, p.rows = sp.h_q;
  p.causal = false;
  p.scale_log2 = float(double(sp.softmax_scale) * 1.4426950408889634);
  p.num_workers = g.num_workers;
  p.batch_invariant = false;
  split::bind_workspace(&p, g.layout, workspace, plan);
  p.tokens_per_batch = sp.s_q;
  p.indices = sp.indices;
  p.idx_stride_token = index_token_stride(sp);
  p.num_slots = sp.num_slots;
  p.topk_length = sp.topk_length;
  p.topk = sp.topk;
  p.seqlens = p.token_len;  // written by the scheduler's pass 0
  p.seqlens_stride = 1;
  return p;
}

// plan: null, or the schedule to read instead of running the schedule kernel
// (plan_only: run the schedule kernel alone, into the workspace's prefix).
// kForm: the decode kernel's math form (seesaw or one-way); kSectorPairs: its
// fp8 producer's sector-pair loads (fp8 entries only).
template <decode::MathForm kForm, bool kSectorPairs = false>
cudaError_t launch_indexed(const decode::DecodeParams& p, const SparseAttnParams& sp,
                           int row_blocks, cudaStream_t stream) {
  using decode::IndexedKeys;
  using decode::launch_decode_kernel;
  const CUtensorMap none{};  // no TMA on indexed keys
  if (sp.k_scale != nullptr)
    return launch_decode_kernel<IndexedKeys, KvFormat::fp8_e4m3, false, kForm, kSectorPairs>(
        p, row_blocks, stream, none);
  if (sp.fp8)
    return launch_decode_kernel<IndexedKeys, KvFormat::fp8_ds_mla, false, kForm, kSectorPairs>(
        p, row_blocks, stream, none);
  if constexpr (kSectorPairs)
    return cudaErrorInvalidValue;  // refused by kernel_takes
  else
    return launch_decode_kernel<IndexedKeys, KvFormat::bf16, false, kForm>(p, row_blocks, stream,
                                                                           none);
}
Status run_decode_kernel(const SparseAttnParams& sp, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream, const DecodePlan* plan = nullptr,
                         DecodePlan* plan_only = nullptr, Kernel kernel = Kernel::decode_wgmma) {
  DecodeGeometry g;
  MLA_TRY(decode_geometry(sp, &g));
  if (plan != nullptr) MLA_TRY(split::check_plan(*plan, g.layout, g.num_workers, "plan"));
  if (workspace_bytes < g.layout.total)
    return error(Errc::insufficient_workspace,
                 "workspace: {} bytes given, this call needs {} (sparse_workspace_size)",
                 workspace_bytes, g.layout.total);
  if (workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % split::kWorkspaceAlign != 0)
    return error(Errc::misaligned, "workspace: pointer {} must be non-null and {}-byte aligned",
                 workspace, split::kWorkspaceAlign);
  if (g.tokens == 0) return Status::Ok();
  const decode::DecodeParams p =
      decode_params_of(sp, g, workspace, plan != nullptr ? plan->data : nullptr);
  if (plan_only != nullptr) {
    MLA_CUDA_TRY(split::launch_schedule(p, stream), "split_schedule_kernel launch");
    plan_only->data = workspace;
    plan_only->bytes = g.layout.plan_bytes;
    plan_only->num_workers = g.num_workers;
    return Status::Ok();
  }
  if (plan == nullptr)
    MLA_CUDA_TRY(split::launch_schedule(p, stream), "split_schedule_kernel launch");
  const cudaError_t launched =
      kernel == Kernel::decode_oneway
          ? launch_indexed<decode::MathForm::oneway>(p, sp, g.row_blocks, stream)
      : kernel == Kernel::decode_wgmma_sp
          ? launch_indexed<decode::MathForm::seesaw, true>(p, sp, g.row_blocks, stream)
          : launch_indexed<decode::MathForm::seesaw>(p, sp, g.row_blocks, stream);
  MLA_CUDA_TRY(launched, "decode_kernel<IndexedKeys> launch");
  MLA_CUDA_TRY(split::launch_combine(p, stream), "split_combine_kernel launch");
  return Status::Ok();
}

// ---- the prefill kernel ----

// Its params for one launch of prefill_params' layout (token = "batch" row,
// kv rows = pages of one token).
sparse::SparsePrefillParams prefill_kernel_params(const SparseAttnParams& pc) {
  sparse::SparsePrefillParams g;
  g.q = pc.q, g.q_ss = pc.q_sb, g.q_sh = pc.q_sh, g.s_q = pc.batch, g.h_q = pc.h_q;
  g.indices = pc.indices, g.idx_ss = pc.idx_sb, g.topk = pc.topk, g.topk_length = pc.topk_length;
  g.kv = pc.kv, g.fp8 = pc.fp8;
  g.kv_row_stride = pc.num_slots > 1 ? (pc.fp8 ? pc.page_stride : pc.page_stride / 2) : 0;
  g.s_kv = pc.num_slots;
  g.softmax_scale = pc.softmax_scale;
  g.out = pc.out, g.out_ss = pc.out_sb, g.out_sh = pc.out_sh;
  g.lse = pc.lse, g.lse_ss = pc.lse_sb, g.lse_sh = pc.lse_sh;
  return g;
}

// Scratch of one launch of `kernel` on p.
Status workspace_need(Kernel kernel, const SparseAttnParams& p, size_t* bytes) {
  if (kernel == Kernel::prefill) {
    *bytes = 0;
  } else if (on_decode_kernel(kernel)) {
    DecodeGeometry g;
    MLA_TRY(decode_geometry(p, &g));
    *bytes = g.layout.total;
  } else {
    *bytes = k::sparse_mma_workspace_size(p);
  }
  return Status::Ok();
}

Status launch(Kernel kernel, const SparseAttnParams& p, Workspace ws, cudaStream_t stream,
              const DecodePlan* plan = nullptr) {
  if (kernel == Kernel::prefill)
    return sparse::launch_sparse_prefill(prefill_kernel_params(p), stream);
  if (on_decode_kernel(kernel))
    return run_decode_kernel(p, ws.data, ws.bytes, stream, plan, nullptr, kernel);
  return k::launch_sparse_mma(p, ws.data, ws.bytes, stream);
}

// The kernel a prefill call runs and the scratch it needs, computed the same
// way by the sizing call and by the call itself.
struct PrefillPlan {
  Kernel kernel = Kernel::automatic;
  size_t need = 0;
  int64_t rows = kMaxTokensPerLaunch;  // query tokens per launch
};

Status prefill_plan(const SparseAttnParams& p0, int64_t s_q, const k::Options& opts,
                    PrefillPlan* plan) {
  if (opts.prefill_chunk_tokens < 1 || opts.prefill_chunk_tokens > kMaxTokensPerLaunch)
    return error(Errc::invalid_value, "prefill_chunk_tokens: {} is outside 1..{}",
                 opts.prefill_chunk_tokens, kMaxTokensPerLaunch);
  plan->need = 0;
  plan->rows = opts.prefill_chunk_tokens;
  MLA_TRY(resolve_kernel(opts.kernel, prefill_chunk(p0, std::max<int64_t>(s_q, 1), 0, plan->rows),
                         /*prefill=*/true, &plan->kernel));
  if (s_q == 0) return Status::Ok();
  // Only the first and the last chunk differ in size.
  for (const int64_t c : {int64_t(0), prefill_chunks(s_q, plan->rows) - 1}) {
    size_t n = 0;
    MLA_TRY(workspace_need(plan->kernel, prefill_chunk(p0, s_q, c, plan->rows), &n));
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

namespace sparse {

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::automatic: return "automatic";
    case Kernel::decode_wgmma: return "decode_wgmma";
    case Kernel::decode_oneway: return "decode_oneway";
    case Kernel::decode_wgmma_sp: return "decode_wgmma_sp";
    case Kernel::mma_sync: return "mma_sync";
    case Kernel::prefill: return "prefill";
  }
  return "?";
}

bool kernel_takes(Kernel k, const Problem& problem) {
  const bool common = problem.h_q > 0 && problem.h_q % 16 == 0 && problem.page_size > 0 &&
                      problem.tokens <= kMaxTokensPerLaunch;
  switch (k) {
    case Kernel::automatic: return true;
    case Kernel::decode_wgmma:
    case Kernel::decode_oneway:
      return common && problem.page_size <= INT32_MAX && problem.flat_index;
    case Kernel::decode_wgmma_sp:  // the fp8 producer's loads: fp8 entries only
      return kernel_takes(Kernel::decode_wgmma, problem) && (problem.fp8 || problem.fp8_e4m3);
    case Kernel::mma_sync: return common && !problem.fp8_e4m3;  // reads 576 bf16 or 656 B
    case Kernel::prefill: return common && problem.prefill;
  }
  return false;
}

// Decode: bf16 entries take the decode kernel's one-way form (1.00-1.02x the
// seesaw, H100 2026-12-06), fp8 entries the seesaw (the one-way form measured
// 0.96-1.00x there: the gathering producer bounds them; docs/perf-log.md).
Kernel choose_kernel(const Problem& problem) {
  if (kernel_takes(Kernel::prefill, problem)) return Kernel::prefill;
  if (!kernel_takes(Kernel::decode_wgmma, problem)) return Kernel::mma_sync;
  return problem.fp8 || problem.fp8_e4m3 ? Kernel::decode_wgmma : Kernel::decode_oneway;
}

}  // namespace sparse

Status sparse_decode_workspace_size(const SparseDecodeArgs& a, size_t* bytes,
                                    const sparse::Options& opts) {
  SparseAttnParams p;
  MLA_TRY(decode_params(a, &p));
  Kernel kernel;
  MLA_TRY(resolve_kernel(opts.kernel, p, /*prefill=*/false, &kernel));
  return workspace_need(kernel, p, bytes);
}

Status sparse_decode(const SparseDecodeArgs& a, Workspace ws, const ExecContext& ctx,
                     const sparse::Options& opts) {
  SparseAttnParams p;
  MLA_TRY(decode_params(a, &p));
  Kernel kernel;
  MLA_TRY(resolve_kernel(opts.kernel, p, /*prefill=*/false, &kernel));
  if (kernel == Kernel::mma_sync) {
    size_t need = 0;
    MLA_TRY(workspace_need(kernel, p, &need));
    MLA_TRY(expect_workspace(ws, need, "sparse_workspace_size"));
  }
  if (a.plan != nullptr && !on_decode_kernel(kernel))
    return error(Errc::unsupported, "plan: the {} kernel runs this call, it takes no plan",
                 k::kernel_name(kernel));
  return launch(kernel, p, ws, stream_of(ctx), a.plan);
}

Status sparse_decode_plan(const SparseDecodeArgs& a, Workspace ws, DecodePlan* plan,
                          const ExecContext& ctx, const sparse::Options& opts) {
  SparseAttnParams p;
  MLA_TRY(decode_params(a, &p));
  Kernel kernel;
  MLA_TRY(resolve_kernel(opts.kernel, p, /*prefill=*/false, &kernel));
  if (!on_decode_kernel(kernel))
    return error(Errc::unsupported,
                 "sparse_decode_plan: the {} kernel runs these arguments, it takes no plan",
                 k::kernel_name(kernel));
  return run_decode_kernel(p, ws.data, ws.bytes, stream_of(ctx), nullptr, plan);
}

Status sparse_prefill_workspace_size(const SparsePrefillArgs& a, size_t* bytes,
                                     const sparse::Options& opts) {
  SparseAttnParams p;
  MLA_TRY(prefill_params(a, &p));
  PrefillPlan plan;
  MLA_TRY(prefill_plan(p, a.q.shape[0], opts, &plan));
  *bytes = plan.need;
  return Status::Ok();
}

Status sparse_prefill(const SparsePrefillArgs& a, Workspace ws, const ExecContext& ctx,
                      const sparse::Options& opts) {
  SparseAttnParams p;
  MLA_TRY(prefill_params(a, &p));
  const int64_t s_q = a.q.shape[0];
  PrefillPlan plan;
  MLA_TRY(prefill_plan(p, s_q, opts, &plan));
  MLA_TRY(expect_workspace(ws, plan.need, "sparse_workspace_size"));
  // Chunks run one after another on the stream, so they can share the scratch.
  for (int64_t c = 0; c < prefill_chunks(s_q, plan.rows); ++c)
    MLA_TRY(launch(plan.kernel, prefill_chunk(p, s_q, c, plan.rows), ws, stream_of(ctx)));
  return Status::Ok();
}

}  // namespace mla::cuda
