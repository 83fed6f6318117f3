// Host side of sparse decode on the wgmma decode kernel (decode_sparse.hpp):
// SparseAttnParams -> DecodeParams with the Indexed key source.
#include "cuda/decode/decode_sparse.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/validate.hpp"
#include "cuda/common/cuda_status.hpp"
#include "cuda/decode/decode_launch.hpp"
#include "cuda/decode/decode_wgmma.hpp"

namespace mla::cuda::decode {

using detail::error;

namespace {

struct SparseGeometry {
  int64_t tokens = 0;  // requests of the decode schedule: batch * s_q
  int row_blocks = 0, num_workers = 0;
  WorkspaceLayout layout;
};

Status geometry(const dsa::SparseAttnParams& sp, SparseGeometry* g) {
  int dev = -1;
  MLA_CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice");
  DeviceFacts f;
  MLA_TRY(device_facts(dev, &f));
  if (f.major != 9)
    return error(Errc::unsupported,
                 "cuda:{} has compute capability {}.{}; the wgmma sparse decode is built for "
                 "sm_90a (Hopper)",
                 dev, f.major, f.minor);
  if (wgmma_kernel_smem_bytes() > size_t(f.max_smem_per_block_optin))
    return error(Errc::unsupported,
                 "cuda:{}: the decode kernel needs {} B of shared memory, the "
                 "device allows {}",
                 dev, wgmma_kernel_smem_bytes(), f.max_smem_per_block_optin);
  g->tokens = int64_t(sp.batch) * sp.s_q;
  g->row_blocks = (sp.h_q + kWgmmaRows - 1) / kWgmmaRows;
  g->num_workers = std::max(1, f.sm_count / g->row_blocks);
  g->layout = decode_workspace_layout(g->tokens, sp.h_q, g->num_workers, /*batch_invariant=*/false,
                                      /*token_lengths=*/true);
  return Status::Ok();
}

// Stride between consecutive query tokens' index lists of the flattened
// [batch, s_q] (stride_or_zero views: a dim of size 1 has stride 0), or -1
// when the two dims do not flatten into one.
int64_t index_token_stride(const dsa::SparseAttnParams& p) {
  if (p.s_q == 1) return p.idx_sb;
  if (p.batch == 1 || p.idx_sb == int64_t(p.s_q) * p.idx_ss) return p.idx_ss;
  return -1;
}

}  // namespace

bool sparse_wgmma_supports(const dsa::SparseAttnParams& p) {
  return p.h_q > 0 && p.h_q % 16 == 0 && p.page_size > 0 && p.page_size <= INT32_MAX &&
         int64_t(p.batch) * p.s_q <= INT32_MAX && index_token_stride(p) >= 0;
}

bool sparse_wgmma_chosen(const dsa::SparseAttnParams& p) {
  if (!sparse_wgmma_supports(p)) return false;
  if (const char* env = std::getenv("MLA_SPARSE_KERNEL")) {
    if (std::strcmp(env, "mma") == 0) return false;
  }
  return true;
}

Status sparse_wgmma_workspace_size(const dsa::SparseAttnParams& p, size_t* bytes) {
  SparseGeometry g;
  MLA_TRY(geometry(p, &g));
  *bytes = g.layout.total;
  return Status::Ok();
}

Status launch_sparse_wgmma(const dsa::SparseAttnParams& sp, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream) {
  if (!sparse_wgmma_supports(sp))
    return error(Errc::unsupported,
                 "q: h_q = {} (page_size {}) is not taken by the wgmma sparse "
                 "decode (multiples of 16 heads)",
                 sp.h_q, sp.page_size);
  SparseGeometry g;
  MLA_TRY(geometry(sp, &g));
  if (workspace_bytes < g.layout.total)
    return error(Errc::insufficient_workspace,
                 "workspace: {} bytes given, this call needs {} (sparse_workspace_size)",
                 workspace_bytes, g.layout.total);
  if (workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
    return error(Errc::misaligned, "workspace: pointer {} must be non-null and 256-byte aligned",
                 workspace);
  if (g.tokens == 0) return Status::Ok();

  DecodeParams p{};
  p.q = sp.q;
  p.q_stride_b = sp.q_sb, p.q_stride_s = sp.q_ss, p.q_stride_h = sp.q_sh;
  p.kv = sp.kv;
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
  bind_workspace(&p, g.layout, workspace);
  p.tokens_per_batch = sp.s_q;
  p.indices = sp.indices;
  p.idx_stride_token = index_token_stride(sp);
  p.num_slots = sp.num_slots;
  p.topk_length = sp.topk_length;
  p.topk = sp.topk;
  p.seqlens = p.token_len;  // written by the scheduler's pass 0
  p.seqlens_stride = 1;

  MLA_CUDA_TRY(launch_decode_schedule(p, stream), "decode_schedule_kernel launch");
  MLA_CUDA_TRY(launch_decode_main_wgmma_indexed(p, sp.fp8, g.row_blocks, stream,
                                                /*fp8_prefetch=*/true),
               "decode_wgmma_kernel<IndexedKeys> launch");
  MLA_CUDA_TRY(launch_decode_combine(p, stream), "decode_combine_kernel launch");
  return Status::Ok();
}

}  // namespace mla::cuda::decode
