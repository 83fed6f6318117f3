// Host side of the CUDA decode: GPU-specific argument checks, the kernel
// choice, and the three launches (schedule -> main -> combine) on the caller's
// stream. Nothing here synchronises or allocates, so the whole call can be
// captured in a CUDA graph and replayed with new cache_seqlens/block_table
// contents (the schedule is recomputed on the device at every replay).
#include "cuda/decode/decode_cuda.hpp"

#include <algorithm>
#include <cmath>

#include "common/validate.hpp"
#include "cuda/common/cuda_status.hpp"
#include "cuda/common/tma_map.hpp"
#include "cuda/decode/decode_config.hpp"
#include "cuda/decode/decode_launch.hpp"
#include "cuda/decode/split/split.hpp"

namespace mla::cuda {

using detail::error;
using namespace mla::cuda::decode;

namespace {

struct Geometry {
  int B = 0, s_q = 0, h_q = 0, rows = 0;
  int row_blocks = 0, num_workers = 0;
  WorkspaceLayout layout;
};

Status expect_cuda(const TensorView& t, const char* name, int device) {
  if (t.device.type != DeviceType::cuda)
    return error(Errc::invalid_device, "{}: is on the CPU, the CUDA decode needs a CUDA tensor",
                 name);
  if (t.device.id != device)
    return error(Errc::invalid_device, "{}: is on cuda:{} but q is on cuda:{}", name, t.device.id,
                 device);
  return Status::Ok();
}

// GPU-specific checks on top of the API's device-independent validation
// (repeated where cheap: the backend must be safe when called directly).
Status check_args(const DecodeArgs& a, bool need_data) {
  const int dev = a.q.device.id;
  if (a.q.ndim != 4 || a.q.shape[3] != kDqk)
    return error(Errc::invalid_shape, "q: shape {} does not match [B, s_q, h_q, 576]",
                 detail::shape_str(a.q));
  MLA_TRY(expect_cuda(a.q, "q", dev));
  MLA_TRY(expect_cuda(a.kv.data, "kv", dev));
  MLA_TRY(expect_cuda(a.block_table, "block_table", dev));
  MLA_TRY(expect_cuda(a.cache_seqlens, "cache_seqlens", dev));
  MLA_TRY(expect_cuda(a.out, "out", dev));
  MLA_TRY(expect_cuda(a.lse, "lse", dev));
  const int64_t s_q = a.q.shape[1], h_q = a.q.shape[2];
  if (h_q != 16 && h_q != 32 && h_q != 64 && h_q != 128)
    return error(Errc::unsupported, "q: h_q = {} is not one of the CUDA decode's 16, 32, 64, 128",
                 h_q);
  if (s_q < 1 || s_q > kCudaDecodeMaxSq)
    return error(Errc::unsupported, "q: s_q = {} is outside the CUDA decode's 1..{}", s_q,
                 kCudaDecodeMaxSq);
  MLA_TRY(detail::expect_dtype(a.q, "q", {DType::bf16}));
  MLA_TRY(detail::expect_dtype(a.out, "out", {DType::bf16, DType::f32}));
  MLA_TRY(detail::expect_dtype(a.lse, "lse", {DType::f32}));
  MLA_TRY(detail::expect_dtype(a.block_table, "block_table", {DType::i32}));
  MLA_TRY(detail::expect_dtype(a.cache_seqlens, "cache_seqlens", {DType::i32}));
  if (a.q.strides[3] != 1 || a.out.strides[3] != 1)
    return error(Errc::invalid_stride, "q/out: the last dim must be dense (strides {} / {})",
                 a.q.strides[3], a.out.strides[3]);
  if (a.kv.data.ndim != 4 || a.kv.data.strides[3] != 1 || a.kv.data.strides[2] < 0)
    return error(Errc::invalid_stride,
                 "kv: expected a [num_pages, page_size, 1, entry] view "
                 "with a dense entry");
  if (a.kv.num_pages() > INT32_MAX || a.kv.page_size() > INT32_MAX ||
      a.block_table.shape[1] > INT32_MAX)
    return error(Errc::invalid_shape,
                 "kv/block_table: num_pages {} / page_size {} / max_pages {} "
                 "past 2^31-1",
                 a.kv.num_pages(), a.kv.page_size(), a.block_table.shape[1]);
  if (need_data) {
    // 16-byte vector loads/stores: q rows, cache entries, out rows.
    MLA_TRY(detail::expect_aligned(a.q, "q", 16));
    MLA_TRY(detail::expect_aligned(a.out, "out", 16));
    MLA_TRY(detail::expect_aligned(a.kv.data, "kv", 16));
  }
  return Status::Ok();
}

Status geometry(const DecodeArgs& a, const DecodeOptions& opts, Geometry* g) {
  DeviceFacts f;
  MLA_TRY(device_facts(a.q.device.id, &f));
  if (f.major != 9)
    return error(Errc::unsupported,
                 "cuda:{} has compute capability {}.{}; the decode kernels are built for sm_90a "
                 "(Hopper)",
                 a.q.device.id, f.major, f.minor);
  g->B = int(a.q.shape[0]);
  g->s_q = int(a.q.shape[1]);
  g->h_q = int(a.q.shape[2]);
  g->rows = g->s_q * g->h_q;
  g->row_blocks = (g->rows + kM - 1) / kM;
  if (kSmemBytes > size_t(f.max_smem_per_block_optin))
    return error(Errc::unsupported,
                 "cuda:{}: the decode kernel needs {} B of shared memory, the "
                 "device allows {}",
                 a.q.device.id, kSmemBytes, f.max_smem_per_block_optin);
  // One CTA per SM (the kernel's shared memory allows no second one); the R
  // row blocks of a worker run side by side.
  g->num_workers = std::max(1, f.sm_count / g->row_blocks);
  g->layout = split::workspace_layout(g->B, g->rows, g->num_workers, opts.batch_invariant,
                                      /*token_lengths=*/false);
  return Status::Ok();
}

}  // namespace

namespace decode {

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::automatic: return "automatic";
    case Kernel::wgmma_tma: return "wgmma_tma";
    case Kernel::wgmma_cp_async: return "wgmma_cp_async";
    case Kernel::wgmma_fp8: return "wgmma_fp8";
    case Kernel::wgmma_tma_oneway: return "wgmma_tma_oneway";
    case Kernel::wgmma_cp_async_oneway: return "wgmma_cp_async_oneway";
    case Kernel::wgmma_fp8_oneway: return "wgmma_fp8_oneway";
    case Kernel::wgmma_fp8_narrow: return "wgmma_fp8_narrow";
    case Kernel::wgmma_fp8_oneway_sp: return "wgmma_fp8_oneway_sp";
  }
  return "?";
}

// The producer kernel k runs (its seesaw name; automatic stays automatic) and
// the form of its math warpgroups.
Kernel producer_of(Kernel k) {
  switch (k) {
    case Kernel::wgmma_tma_oneway: return Kernel::wgmma_tma;
    case Kernel::wgmma_cp_async_oneway: return Kernel::wgmma_cp_async;
    case Kernel::wgmma_fp8_oneway:
    case Kernel::wgmma_fp8_oneway_sp:
    case Kernel::wgmma_fp8_narrow: return Kernel::wgmma_fp8;
    default: return k;
  }
}
bool sector_pairs(Kernel k) {
  return k == Kernel::wgmma_fp8_oneway_sp;
}
MathForm form_of(Kernel k) {
  if (k == Kernel::wgmma_fp8_narrow) return MathForm::narrow;
  return producer_of(k) != k ? MathForm::oneway : MathForm::seesaw;
}

bool kernel_takes(Kernel k, const Problem& problem) {
  if (form_of(k) == MathForm::narrow && !(problem.rows > 0 && problem.rows <= kNarrowRows))
    return false;
  switch (producer_of(k)) {
    case Kernel::automatic: return true;
    case Kernel::wgmma_tma: return !problem.fp8 && problem.tma_map;
    case Kernel::wgmma_cp_async: return !problem.fp8;
    case Kernel::wgmma_fp8: return problem.fp8;
    default: break;  // mapped by producer_of
  }
  return false;
}

// Row blocks of at most kNarrowRows rows (h_q 16, s_q 1): fp8 caches take the
// narrow math, bf16 the seesaw (memory-bound there; the one-way form was not
// measured at 16 rows). More rows: the one-way form, which measured 1.0-1.27x
// the seesaw on dense bf16 and 1.08-1.25x on both fp8 layouts; for fp8 with
// the sector-pair loads (1.14-1.17x the halves on fp8_ds_mla, 1.01-1.04x on
// fp8_e4m3: H100, rounds s8c and s8g; docs/perf-log.md).
Kernel choose_kernel(const Problem& problem) {
  const bool narrow_rows = problem.rows > 0 && problem.rows <= kNarrowRows;
  if (problem.fp8) {
    if (narrow_rows) return kChooseNarrow ? Kernel::wgmma_fp8_narrow : Kernel::wgmma_fp8;
    return Kernel::wgmma_fp8_oneway_sp;
  }
  if (narrow_rows) return problem.tma_map ? Kernel::wgmma_tma : Kernel::wgmma_cp_async;
  return problem.tma_map ? Kernel::wgmma_tma_oneway : Kernel::wgmma_cp_async_oneway;
}

// The main kernel of producer k (not automatic) with math form kForm
// (kSectorPairs: the fp8 producer's sector-pair loads).
template <MathForm kForm, bool kSectorPairs = false>
cudaError_t launch_paged(Kernel k, KvFormat format, const DecodeParams& p, int row_blocks,
                         cudaStream_t stream, const CUtensorMap& kv_map) {
  // The narrow math and the sector pairs serve fp8 caches only.
  if constexpr (kForm != MathForm::narrow && !kSectorPairs) {
    if (k == Kernel::wgmma_tma)
      return launch_decode_kernel<PagedKeys, KvFormat::bf16, true, kForm>(p, row_blocks, stream,
                                                                          kv_map);
    if (k == Kernel::wgmma_cp_async)
      return launch_decode_kernel<PagedKeys, KvFormat::bf16, false, kForm>(p, row_blocks, stream,
                                                                           kv_map);
  }
  if (k == Kernel::wgmma_fp8)  // one kernel, the producer of the cache's format
    return format == KvFormat::fp8_e4m3
               ? launch_decode_kernel<PagedKeys, KvFormat::fp8_e4m3, false, kForm, kSectorPairs>(
                     p, row_blocks, stream, kv_map)
               : launch_decode_kernel<PagedKeys, KvFormat::fp8_ds_mla, false, kForm, kSectorPairs>(
                     p, row_blocks, stream, kv_map);
  return cudaErrorInvalidValue;  // automatic: resolved by the caller
}

}  // namespace decode

Status decode_workspace_size(const DecodeArgs& args, const DecodeOptions& opts, size_t* bytes) {
  MLA_TRY(check_args(args, /*need_data=*/false));
  Geometry g;
  MLA_TRY(geometry(args, opts, &g));
  *bytes = g.layout.total;
  return Status::Ok();
}

namespace {

// The checks every launching call shares, and the params of the call.
Status prepare(const DecodeArgs& a, const DecodeOptions& opts, Workspace ws, Geometry* gp,
               DecodeParams* pp) {
  MLA_TRY(check_args(a, /*need_data=*/true));
  Geometry& g = *gp;
  MLA_TRY(geometry(a, opts, &g));
  if (ws.bytes < g.layout.total)
    return error(Errc::insufficient_workspace,
                 "workspace: {} bytes given, this call needs {} (decode_workspace_size)", ws.bytes,
                 g.layout.total);
  if (ws.data == nullptr || reinterpret_cast<uintptr_t>(ws.data) % split::kWorkspaceAlign != 0)
    return error(Errc::misaligned, "workspace: pointer {} must be non-null and {}-byte aligned",
                 ws.data, split::kWorkspaceAlign);
  const DecodePlan* plan = opts.plan;
  if (plan != nullptr) MLA_TRY(split::check_plan(*plan, g.layout, g.num_workers, "opts.plan"));

  int current = -1;
  MLA_CUDA_TRY(cudaGetDevice(&current), "cudaGetDevice");
  if (current != a.q.device.id)
    return error(Errc::invalid_device,
                 "q is on cuda:{} but the current device is cuda:{}; call cudaSetDevice first",
                 a.q.device.id, current);

  const bool fp8 = kv_format_is_fp8(a.kv.format);
  const int64_t esz = fp8 ? 1 : 2;
  DecodeParams p{};
  p.k_scale =
      a.kv.format == KvFormat::fp8_e4m3 ? static_cast<const float*>(a.kv.scale.data) : nullptr;
  p.q = a.q.data;
  p.q_stride_b = a.q.strides[0];
  p.q_stride_s = a.q.strides[1];
  p.q_stride_h = a.q.strides[2];
  p.kv = static_cast<const uint8_t*>(a.kv.data.data);
  p.page_stride_bytes = a.kv.data.strides[0] * esz;
  p.token_stride_bytes = a.kv.data.strides[1] * esz;
  p.num_pages = int32_t(a.kv.num_pages());
  p.page_size = int32_t(a.kv.page_size());
  p.block_table = static_cast<const int32_t*>(a.block_table.data);
  p.bt_stride_b = a.block_table.strides[0];
  p.bt_stride_p = a.block_table.strides[1];
  p.max_pages = int32_t(a.block_table.shape[1]);
  p.seqlens = static_cast<const int32_t*>(a.cache_seqlens.data);
  p.seqlens_stride = a.cache_seqlens.strides[0];
  p.out = a.out.data;
  p.out_f32 = a.out.dtype == DType::f32;
  p.out_stride_b = a.out.strides[0];
  p.out_stride_s = a.out.strides[1];
  p.out_stride_h = a.out.strides[2];
  p.lse = static_cast<float*>(a.lse.data);
  p.lse_stride_b = a.lse.strides[0];
  p.lse_stride_h = a.lse.strides[1];
  p.lse_stride_s = a.lse.strides[2];
  p.B = g.B;
  p.s_q = g.s_q;
  p.h_q = g.h_q;
  p.rows = g.rows;
  p.causal = a.causal;
  p.scale_log2 = float(double(a.softmax_scale) * 1.4426950408889634);
  p.num_workers = g.num_workers;
  p.batch_invariant = opts.batch_invariant;
  split::bind_workspace(&p, g.layout, ws.data, plan != nullptr ? plan->data : nullptr);
  *pp = p;
  return Status::Ok();
}

}  // namespace

Status decode_plan(const DecodeArgs& a, const DecodeOptions& opts, Workspace ws, DecodePlan* plan,
                   const ExecContext& ctx) {
  Geometry g;
  DecodeParams p;
  MLA_TRY(prepare(a, opts, ws, &g, &p));
  MLA_CUDA_TRY(split::launch_schedule(p, static_cast<cudaStream_t>(ctx.stream)),
               "split_schedule_kernel launch");
  plan->data = ws.data;
  plan->bytes = g.layout.plan_bytes;
  plan->device = a.q.device.id;
  plan->num_workers = g.num_workers;
  return Status::Ok();
}

Status mla_decode(const DecodeArgs& a, const DecodeOptions& opts, Workspace ws,
                  const ExecContext& ctx, Kernel kernel) {
  Geometry g;
  DecodeParams p;
  MLA_TRY(prepare(a, opts, ws, &g, &p));
  if (g.B == 0) return Status::Ok();
  const bool fp8 = kv_format_is_fp8(a.kv.format);

  // The choice depends on the TMA map, which needs the pointers. A forced
  // kernel that cannot run this cache format and page size is refused before
  // any launch; the map is encoded (host work) while the schedule kernel runs.
  const bool tma_shape = !fp8 && p.page_size % kTileKeys == 0;
  Problem problem{.fp8 = fp8, .page_size = p.page_size, .tma_map = tma_shape, .rows = g.rows};
  auto refuse = [&](const char* why) {
    return error(Errc::unsupported,
                 "kernel: {} cannot run a {} cache of page_size {} with {} query rows{}",
                 kernel_name(kernel), kv_format_name(a.kv.format), p.page_size, g.rows, why);
  };
  if (!kernel_takes(kernel, problem)) return refuse("");

  auto stream = static_cast<cudaStream_t>(ctx.stream);
  if (opts.plan == nullptr)
    MLA_CUDA_TRY(split::launch_schedule(p, stream), "split_schedule_kernel launch");
  CUtensorMap kv_map{};
  problem.tma_map = tma_shape && encode_kv_bf16_map(&kv_map, p.kv, p.num_pages, p.page_size,
                                                    p.token_stride_bytes, p.page_stride_bytes);
  if (kernel == Kernel::automatic) kernel = choose_kernel(problem);
  if (!kernel_takes(kernel, problem))
    return refuse(" (the driver rejects its layout as a TMA map)");
  cudaError_t launched = cudaErrorInvalidValue;
  switch (form_of(kernel)) {
    case MathForm::seesaw:
      launched = launch_paged<MathForm::seesaw>(producer_of(kernel), a.kv.format, p, g.row_blocks,
                                                stream, kv_map);
      break;
    case MathForm::oneway:
      launched = sector_pairs(kernel)
                     ? launch_paged<MathForm::oneway, true>(producer_of(kernel), a.kv.format, p,
                                                            g.row_blocks, stream, kv_map)
                     : launch_paged<MathForm::oneway>(producer_of(kernel), a.kv.format, p,
                                                      g.row_blocks, stream, kv_map);
      break;
    case MathForm::narrow:
      launched = launch_paged<MathForm::narrow>(producer_of(kernel), a.kv.format, p, g.row_blocks,
                                                stream, kv_map);
      break;
  }
  MLA_CUDA_TRY(launched, "decode_kernel launch");
  MLA_CUDA_TRY(split::launch_combine(p, stream), "split_combine_kernel launch");
  return Status::Ok();
}

}  // namespace mla::cuda
