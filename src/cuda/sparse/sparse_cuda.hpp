// CUDA backend of sparse absorbed attention (mla/sparse.hpp), called by
// src/api/sparse.cpp for CUDA tensors after its device-independent shape and
// dtype checks, with the default Options; tests and benchmarks pass others.
// The index lists and topk_length live on the GPU and are not read here: the
// kernels skip any entry outside the cache (and clamp topk_length to
// [0, topk]) instead of reading it.
#pragma once
#include <cstddef>
#include <cstdint>

#include "mla/sparse.hpp"

namespace mla::cuda::sparse {

// The kernels of sparse decode and sparse prefill.
enum class Kernel {
  automatic,     // choose_kernel()
  decode_wgmma,  // the decode kernel (cuda/decode) with indexed keys, on the split schedule
  mma_sync,      // sparse_mma.cu: one CTA per (query, head block, list range)
  prefill,       // sparse_prefill_kernel.cuh: prefill only, gathered key tiles, no workspace
  // decode_wgmma with the math warpgroups' one-way form (decode_kernel.cuh):
  // not chosen automatically until measured
  decode_oneway,
  // decode_wgmma with the fp8 producer's sector-pair loads (decode_kernel.cuh:
  // the same stage bytes, the same output bits); fp8 entries only, not chosen
  // automatically (fp8_ds_mla measured 0.95-0.97x decode_wgmma, round s8c)
  decode_wgmma_sp,
};
inline constexpr Kernel kKernels[] = {Kernel::automatic,     Kernel::decode_wgmma,
                                      Kernel::mma_sync,      Kernel::prefill,
                                      Kernel::decode_oneway, Kernel::decode_wgmma_sp};
const char* kernel_name(Kernel k);

// The most query tokens of one launch: the mma_sync kernel's grid has one
// y-row per query token, and CUDA allows 65535. Prefill cuts its query tokens
// into chunks of this size for both kernels (a chunk of 65535 tokens is ~40
// TFLOP at top-2048 / 128 heads, so the drain between chunks costs nothing
// measurable), decode rejects more.
inline constexpr int64_t kMaxTokensPerLaunch = 65535;

struct Options {
  Kernel kernel = Kernel::automatic;
  // Query tokens per prefill launch, 1..kMaxTokensPerLaunch (tests: the
  // chunked path at a small s_q).
  int64_t prefill_chunk_tokens = kMaxTokensPerLaunch;
};

// What the choice depends on.
struct Problem {
  bool prefill = false;   // sparse_prefill (flat kv), else sparse_decode (paged cache)
  bool fp8 = false;       // fp8_ds_mla entries
  bool fp8_e4m3 = false;  // fp8_e4m3 entries (decode_wgmma only)
  int64_t h_q = 0;
  int64_t tokens = 0;       // query tokens of one launch
  int64_t page_size = 0;    // tokens per page (prefill: 1)
  bool flat_index = false;  // the [B, s_q] index lists flatten to one stride
};
// Prefill: the sparse prefill kernel. Decode: the decode kernel wherever it
// takes the problem (every shape the API takes except index lists whose
// [B, s_q] dims do not flatten to one stride), in its one-way form for bf16
// entries and the seesaw for fp8 ones.
Kernel choose_kernel(const Problem& problem);
// Whether `k` (not automatic) can run `problem`.
bool kernel_takes(Kernel k, const Problem& problem);

}  // namespace mla::cuda::sparse

namespace mla::cuda {
Status sparse_decode_workspace_size(const SparseDecodeArgs& args, size_t* bytes,
                                    const sparse::Options& opts = {});
Status sparse_decode(const SparseDecodeArgs& args, Workspace ws, const ExecContext& ctx,
                     const sparse::Options& opts = {});
// The decode kernel's schedule into ws; fills plan's data, bytes, num_workers.
Status sparse_decode_plan(const SparseDecodeArgs& args, Workspace ws, DecodePlan* plan,
                          const ExecContext& ctx, const sparse::Options& opts = {});
Status sparse_prefill_workspace_size(const SparsePrefillArgs& args, size_t* bytes,
                                     const sparse::Options& opts = {});
Status sparse_prefill(const SparsePrefillArgs& args, Workspace ws, const ExecContext& ctx,
                      const sparse::Options& opts = {});
}  // namespace mla::cuda
