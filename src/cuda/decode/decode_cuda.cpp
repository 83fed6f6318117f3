// Host side of the CUDA decode: GPU-specific argument checks, the workspace
// layout, and the three launches (schedule -> main -> combine) on the caller's
// stream. Nothing here synchronises or allocates, so the whole call can be
// captured in a CUDA graph and replayed with new cache_seqlens/block_table
// contents (the schedule is recomputed on the device at every replay).
#include "cuda/decode/decode_cuda.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/validate.hpp"
#include "cuda/common/cuda_status.hpp"
#include "cuda/common/tma_map.hpp"
#include "cuda/decode/decode_launch.hpp"
#include "cuda/decode/decode_wgmma.hpp"

namespace mla::cuda {

using detail::error;
using namespace mla::cuda::decode;

namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

// The main kernels (same schedule, params, workspace and combine): v1, the
// mma.sync kernel (decode_kernel.cuh), also every shape the wgmma kernels do
// not take; or a version of the wgmma kernel (decode_wgmma.hpp).
struct MainKernel {
  bool mma = true;
  WgmmaVersion wgmma = WgmmaVersion::v8;
};

struct Geometry {
  int B = 0, s_q = 0, h_q = 0, rows = 0;
  int row_tiles = 0, row_blocks = 0, num_workers = 0;
  MainKernel kernel;
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

// Which main kernel runs. Both share the schedule, the workspace and the
// combine, and use the same number of row blocks (ceil(rows / 64) for rows >
// 32; one block otherwise), so the choice does not change the workspace size.
// The wgmma kernel (decode_wgmma_kernel.cuh, "v4") passed every GPU decode
// test (all heads, s_q, pages, both caches, invariant mode, graphs) and
// measured (H200, 2026-11-29, docs/perf-log.md v4): decode-128 and -long
// 1.5-1.7x, decode-tp h32 1.07-1.28x, fp8 tp 1.15-1.3x, varlen 1.13-1.5x;
// equal at h16 L 4K bf16 (216 vs 214 us, noise) and 0.94x on varlen B1 64K
// bf16 (one request over all workers: per-piece fill). That case is not
// worth a rule of its own, so the wgmma kernel is the default everywhere.
// Its "v6" form (same kernel; the fp8 producer keeps the next tile's loads in
// flight; bf16 identical) passed WgmmaGpu.* + DecodeGpu.* forced and racecheck,
// and measured 1.12x (h16 L32K) and 1.10x (h128 L32K) of v4 on fp8 caches
// (docs/perf-log.md v6). Its "v8" form (bf16 whole tiles by TMA when
// page_size % 64 == 0; otherwise, and for fp8, v6) passed WgmmaGpu.* +
// DecodeGpu.* forced and racecheck, and measured 1.06-1.26x of v6 on every
// bf16 shape of `mla bench decode --suite all` (fp8: the same kernel) (docs/
// perf-log.md v7, step 4): it is the default.
// MLA_DECODE_KERNEL forces one (tests and benchmarks of all kernels on one
// build): mma (v1), wgmma or v4 (v4's fp8 producer), v6, v7 (bf16: S split
// over the dims; fp8: v6), v7b (v7 + lazy O rescale), v8 (v6 + TMA tiles),
// v8b (v7b + TMA tiles), docs/perf-log.md v7; v9 (alternate tiles per math
// warpgroup for S, bf16 TMA only, else v8; docs/perf-log.md v9), v9stamps (v9
// printing phase cycles, every build), v9b / v9bstamps (v9 with the chained
// max: WG 0's own P.V before tile b's max); in builds with
// MLA_DECODE_STAMPS also v4stamps, v7stamps, v7bstamps, v8stamps, v8bstamps
// (bf16 phase cycles printed).
// (v5, P.V(j) and S(j+1) back to back, passed every GPU test but measured
// 0.96-1.02x of v4 (docs/perf-log.md v5): removed, the experiment stays in
// the log and in git history.)
MainKernel wgmma_kernel_choice() {
  MainKernel k{.mma = false, .wgmma = WgmmaVersion::v8};
  if (const char* env = std::getenv("MLA_DECODE_KERNEL")) {
    if (std::strcmp(env, "mma") == 0) k.mma = true;
    if (std::strcmp(env, "wgmma") == 0 || std::strcmp(env, "v4") == 0) k.wgmma = WgmmaVersion::v4;
    if (std::strcmp(env, "v6") == 0) k.wgmma = WgmmaVersion::v6;
    if (std::strcmp(env, "v7") == 0) k.wgmma = WgmmaVersion::v7;
    if (std::strcmp(env, "v7b") == 0) k.wgmma = WgmmaVersion::v7b;
    if (std::strcmp(env, "v8") == 0) k.wgmma = WgmmaVersion::v8;
    if (std::strcmp(env, "v8b") == 0) k.wgmma = WgmmaVersion::v8b;
    if (std::strcmp(env, "v9") == 0) k.wgmma = WgmmaVersion::v9;
    if (std::strcmp(env, "v9b") == 0) k.wgmma = WgmmaVersion::v9b;
    if (std::strcmp(env, "v9stamps") == 0) k.wgmma = WgmmaVersion::v9_stamps;
    if (std::strcmp(env, "v9bstamps") == 0) k.wgmma = WgmmaVersion::v9b_stamps;
#ifdef MLA_DECODE_STAMPS
    if (std::strcmp(env, "v4stamps") == 0) k.wgmma = WgmmaVersion::v4_stamps;
    if (std::strcmp(env, "v7stamps") == 0) k.wgmma = WgmmaVersion::v7_stamps;
    if (std::strcmp(env, "v7bstamps") == 0) k.wgmma = WgmmaVersion::v7b_stamps;
    if (std::strcmp(env, "v8stamps") == 0) k.wgmma = WgmmaVersion::v8_stamps;
    if (std::strcmp(env, "v8bstamps") == 0) k.wgmma = WgmmaVersion::v8b_stamps;
#endif
  }
  return k;
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
  g->row_tiles = row_tiles_for(g->rows);
  g->row_blocks = (g->rows + 16 * g->row_tiles - 1) / (16 * g->row_tiles);
  const bool fp8 = a.kv.format == KvFormat::fp8_ds_mla;
  // The wgmma kernels take 64-row blocks: only where that is the v1 grid too.
  const bool wgmma_rows = (g->rows + kWgmmaRows - 1) / kWgmmaRows == g->row_blocks;
  g->kernel = wgmma_rows ? wgmma_kernel_choice() : MainKernel{};
  const size_t smem =
      !g->kernel.mma ? wgmma_kernel_smem_bytes() : main_kernel_smem_bytes(g->row_tiles, fp8);
  if (smem > size_t(f.max_smem_per_block_optin))
    return error(Errc::unsupported,
                 "cuda:{}: the decode kernel needs {} B of shared memory, the "
                 "device allows {}",
                 a.q.device.id, smem, f.max_smem_per_block_optin);
  // One CTA per SM (the kernel's shared memory allows no second one); the R
  // row blocks of a worker run side by side.
  g->num_workers = std::max(1, f.sm_count / g->row_blocks);
  g->layout = decode_workspace_layout(g->B, g->rows, g->num_workers, opts.batch_invariant,
                                      /*token_lengths=*/false);
  return Status::Ok();
}

}  // namespace

namespace decode {
WorkspaceLayout decode_workspace_layout(int64_t B, int64_t rows, int64_t P, bool batch_invariant,
                                        bool token_lengths) {
  WorkspaceLayout L;
  L.max_pieces = batch_invariant ? B * kInvariantMaxSplits : B + P;
  // Balanced mode gives partial slots only to split requests, and a request is
  // split only where one of the P - 1 span boundaries falls inside its cost run
  // (decode_schedule.cu): the split requests hold at most P - 1 of them plus
  // one piece each, < 2P slots at any B. Without this bound the fp32 partials
  // grow with B (sparse prefill: 4096 tokens x 128 heads = 1 GiB for B + P).
  L.max_slots = batch_invariant ? L.max_pieces : std::min(L.max_pieces, 2 * P);
  size_t off = 0;
  L.pieces = off;
  off = align_up(off + sizeof(Piece) * L.max_pieces);
  L.piece_pos = off;
  off = align_up(off + sizeof(int64_t) * L.max_pieces);
  L.req_pos = off;
  off = align_up(off + sizeof(int64_t) * B);
  L.req_split = off;
  off = align_up(off + sizeof(RequestSplit) * B);
  L.worker_begin = off;
  off = align_up(off + sizeof(int32_t) * (P + 1));
  L.partial_lse = off;
  off = align_up(off + sizeof(float) * L.max_slots * rows);
  L.partial_out = off;
  off = align_up(off + sizeof(float) * L.max_slots * rows * kDv);
  if (token_lengths) {
    L.token_len = off;
    off = align_up(off + sizeof(int32_t) * B);
  }
  L.total = off;
  return L;
}

void bind_workspace(DecodeParams* p, const WorkspaceLayout& L, void* workspace) {
  auto* base = static_cast<uint8_t*>(workspace);
  p->max_pieces = L.max_pieces;
  p->pieces = reinterpret_cast<Piece*>(base + L.pieces);
  p->piece_pos = reinterpret_cast<int64_t*>(base + L.piece_pos);
  p->req_pos = reinterpret_cast<int64_t*>(base + L.req_pos);
  p->req_split = reinterpret_cast<RequestSplit*>(base + L.req_split);
  p->worker_begin = reinterpret_cast<int32_t*>(base + L.worker_begin);
  p->partial_lse = reinterpret_cast<float*>(base + L.partial_lse);
  p->partial_out = reinterpret_cast<float*>(base + L.partial_out);
  if (L.token_len != 0) p->token_len = reinterpret_cast<int32_t*>(base + L.token_len);
}
}  // namespace decode

Status decode_workspace_size(const DecodeArgs& args, const DecodeOptions& opts, size_t* bytes) {
  MLA_TRY(check_args(args, /*need_data=*/false));
  Geometry g;
  MLA_TRY(geometry(args, opts, &g));
  *bytes = g.layout.total;
  return Status::Ok();
}

Status mla_decode(const DecodeArgs& a, const DecodeOptions& opts, Workspace ws,
                  const ExecContext& ctx) {
  MLA_TRY(check_args(a, /*need_data=*/true));
  Geometry g;
  MLA_TRY(geometry(a, opts, &g));
  if (ws.bytes < g.layout.total)
    return error(Errc::insufficient_workspace,
                 "workspace: {} bytes given, this call needs {} (decode_workspace_size)", ws.bytes,
                 g.layout.total);
  if (ws.data == nullptr || reinterpret_cast<uintptr_t>(ws.data) % kAlign != 0)
    return error(Errc::misaligned, "workspace: pointer {} must be non-null and {}-byte aligned",
                 ws.data, kAlign);
  if (g.B == 0) return Status::Ok();

  int current = -1;
  MLA_CUDA_TRY(cudaGetDevice(&current), "cudaGetDevice");
  if (current != a.q.device.id)
    return error(Errc::invalid_device,
                 "q is on cuda:{} but the current device is cuda:{}; call cudaSetDevice first",
                 a.q.device.id, current);

  const bool fp8 = a.kv.format == KvFormat::fp8_ds_mla;
  const int64_t esz = fp8 ? 1 : 2;
  DecodeParams p{};
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
  bind_workspace(&p, g.layout, ws.data);

  auto stream = static_cast<cudaStream_t>(ctx.stream);
  MLA_CUDA_TRY(launch_decode_schedule(p, stream), "decode_schedule_kernel launch");
  if (g.kernel.mma)
    MLA_CUDA_TRY(launch_decode_main(p, g.row_tiles, fp8, g.row_blocks, stream),
                 "decode_main_kernel launch");
  else {
    // TMA tiles (v8): a 64-key tile must be one page, and the driver must
    // accept the cache's layout; otherwise the version's cp.async twin runs.
    const WgmmaVersion v = g.kernel.wgmma;
    const bool wants_tma = v == WgmmaVersion::v8 || v == WgmmaVersion::v8b ||
                           v == WgmmaVersion::v9 || v == WgmmaVersion::v9b ||
                           v == WgmmaVersion::v9_stamps || v == WgmmaVersion::v9b_stamps ||
                           v == WgmmaVersion::v8_stamps || v == WgmmaVersion::v8b_stamps;
    CUtensorMap kv_map;
    const bool tma = wants_tma && !fp8 && p.page_size % 64 == 0 &&
                     encode_kv_bf16_map(&kv_map, p.kv, p.num_pages, p.page_size,
                                        p.token_stride_bytes, p.page_stride_bytes);
    MLA_CUDA_TRY(launch_decode_main_wgmma(p, fp8, g.row_blocks, stream, g.kernel.wgmma,
                                          tma ? &kv_map : nullptr),
                 "decode_wgmma_kernel launch");
  }
  MLA_CUDA_TRY(launch_decode_combine(p, stream), "decode_combine_kernel launch");
  return Status::Ok();
}

}  // namespace mla::cuda
