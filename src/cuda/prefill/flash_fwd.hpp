// Launcher of the prefill attention kernels (flash_fwd_params.hpp).
#pragma once
#include <optional>

#include "cuda/prefill/flash_fwd_params.hpp"
#include "cuda/prefill/flash_fwd_ws_maps.hpp"
#include "mla/status.hpp"

namespace mla::cuda::prefill {

// The kernel for p: tma_warp_specialized when the TMA maps of p's tensors can
// be built (they are, into *maps), else cp_async_wgmma (e.g. a varlen batch
// without keys, or strides that are not multiples of 16 bytes).
Kernel choose_kernel(const FlashFwdParams& p, FlashWsMaps* maps);

// Arguments are assumed validated (src/api does that for the public entry
// points); this only checks what the launch itself needs. `kernel` (internal:
// the tests and the benchmark set it) overrides choose_kernel; a kernel that
// cannot take p's tensors is refused with Errc::unsupported.
Status launch_flash_fwd(const FlashFwdParams& p, void* stream,
                        std::optional<Kernel> kernel = std::nullopt);

}  // namespace mla::cuda::prefill
