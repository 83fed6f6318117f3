// CUDA backend of mla_decode (src/cuda/decode/). Called by src/api/decode.cpp
// after the device-independent validation has passed, with Kernel::automatic;
// tests and benchmarks pass a specific kernel.
#pragma once
#include "cuda/decode/decode_launch.hpp"
#include "mla/decode.hpp"

namespace mla::cuda::decode {

// The main kernels of the dense decode. All run decode_kernel.cuh's math on
// the same split schedule, workspace and combine; they differ in how the
// producer warpgroup brings a tile of keys into shared memory.
enum class Kernel {
  automatic,       // choose_kernel()
  wgmma_tma,       // bf16 cache, page_size % 64 == 0: full tiles by TMA
  wgmma_cp_async,  // bf16 cache, any page size: cp.async
  wgmma_fp8,       // fp8 caches (fp8_ds_mla, fp8_e4m3): converted in registers, next tile in flight
  // The same three with the math warpgroups' one-way form (decode_kernel.cuh)
  // instead of the seesaw.
  wgmma_tma_oneway,
  wgmma_cp_async_oneway,
  wgmma_fp8_oneway,
  wgmma_fp8_narrow,  // fp8, <= 16 rows: transposed math, two raw tiles in flight
                     // (decode_narrow.cuh)
  // wgmma_fp8_oneway with the producer's sector-pair loads (a key's two
  // threads read the two halves of each 32-byte sector in one instruction;
  // decode_kernel.cuh): the same stage bytes, so the same output bits.
  // Automatic for the fp8 caches above 16 rows (measured 1.14-1.17x the
  // halves on fp8_ds_mla, 1.01-1.04x on fp8_e4m3).
  wgmma_fp8_oneway_sp,
};
inline constexpr Kernel kKernels[] = {
    Kernel::automatic,        Kernel::wgmma_tma,        Kernel::wgmma_cp_async,
    Kernel::wgmma_fp8,        Kernel::wgmma_tma_oneway, Kernel::wgmma_cp_async_oneway,
    Kernel::wgmma_fp8_oneway, Kernel::wgmma_fp8_narrow, Kernel::wgmma_fp8_oneway_sp};
const char* kernel_name(Kernel k);

// What the choice depends on.
struct Problem {
  bool fp8 = false;       // the cache format
  int64_t page_size = 0;  // tokens per page
  bool tma_map = false;   // the driver encodes a TMA map of this bf16 cache
  int64_t rows = 0;       // query rows of a request (s_q * h_q); 0: not known
};
// The kernel automatic runs: bf16, the TMA tiles where a 64-key tile is one
// page and the driver takes the cache's layout, else cp.async; fp8, the
// converting producer. Row blocks of <= 16 rows: the narrow math (fp8,
// kChooseNarrow) or the seesaw (bf16); more rows: the one-way form, for fp8
// with the producer's sector-pair loads.
Kernel choose_kernel(const Problem& problem);
// Whether `k` (not automatic) can run `problem`.
bool kernel_takes(Kernel k, const Problem& problem);
// The seesaw kernel whose producer `k` shares (k itself for the seesaw ones;
// wgmma_fp8 for the sector-pair variant, whose loads differ but whose caches
// and stages do not), the form of k's math warpgroups, and whether k's fp8
// producer reads sector pairs (kSectorPairs, decode_kernel.cuh).
Kernel producer_of(Kernel k);
MathForm form_of(Kernel k);
bool sector_pairs(Kernel k);

}  // namespace mla::cuda::decode

namespace mla::cuda {
Status decode_workspace_size(const DecodeArgs& args, const DecodeOptions& opts, size_t* bytes);
// kernel: a forced kernel that cannot run these arguments is an error.
Status mla_decode(const DecodeArgs& args, const DecodeOptions& opts, Workspace ws,
                  const ExecContext& ctx, decode::Kernel kernel = decode::Kernel::automatic);
// Runs the schedule kernel into ws and fills plan's device fields (data,
// bytes, num_workers, device); the API layer fills the shapes.
Status decode_plan(const DecodeArgs& args, const DecodeOptions& opts, Workspace ws,
                   DecodePlan* plan, const ExecContext& ctx);
}  // namespace mla::cuda
