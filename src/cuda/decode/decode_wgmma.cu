// Instantiations (bf16 and fp8 caches) and the launcher of the wgmma kernel,
// paged keys (dense decode; the indexed ones are in decode_wgmma_indexed.cu).
#include "cuda/decode/decode_wgmma.hpp"
#include "cuda/decode/decode_wgmma_kernel.cuh"

namespace mla::cuda::decode {

static_assert(kWgmmaRows == v4::kM, "one constant for the launcher and the kernel");

size_t wgmma_kernel_smem_bytes() {
  return v4::kSmemBytes;
}

namespace {
// A version's bf16 kernel; fp8 caches run v6's kernel for every version from v6 on.
template <v4::Variant kBf16, v4::Variant kFp8 = v4::kV6>
cudaError_t launch_version(const DecodeParams& p, bool fp8, int row_blocks, cudaStream_t stream,
                           const CUtensorMap& map) {
  return fp8 ? v4::launch_wgmma<true, kFp8, PagedKeys>(p, row_blocks, stream, map)
             : v4::launch_wgmma<false, kBf16, PagedKeys>(p, row_blocks, stream, map);
}
}  // namespace

cudaError_t launch_decode_main_wgmma(const DecodeParams& p, bool fp8, int row_blocks,
                                     cudaStream_t stream, WgmmaVersion version,
                                     const CUtensorMap* kv_map) {
  using namespace v4;
  const CUtensorMap map = kv_map ? *kv_map : CUtensorMap{};
  const bool tma = kv_map != nullptr;  // the TMA versions without a map run their cp.async twin
  switch (version) {
    case WgmmaVersion::v4: return launch_version<kV4, kV4>(p, fp8, row_blocks, stream, map);
    case WgmmaVersion::v6: return launch_version<kV4>(p, fp8, row_blocks, stream, map);
    case WgmmaVersion::v7: return launch_version<kV7>(p, fp8, row_blocks, stream, map);
    case WgmmaVersion::v7b:
      return launch_version<kV7 | kLazyRescale>(p, fp8, row_blocks, stream, map);
    case WgmmaVersion::v8:
      return tma ? launch_version<kV4 | kTmaKv>(p, fp8, row_blocks, stream, map)
                 : launch_version<kV4>(p, fp8, row_blocks, stream, map);
    case WgmmaVersion::v8b:
      return tma ? launch_version<kV7 | kLazyRescale | kTmaKv>(p, fp8, row_blocks, stream, map)
                 : launch_version<kV7 | kLazyRescale>(p, fp8, row_blocks, stream, map);
    case WgmmaVersion::v9:
    case WgmmaVersion::v9b:
      return tma && !fp8 ? launch_decode_main_pair(p, row_blocks, stream, map,
                                                   version == WgmmaVersion::v9b, false)
                         : launch_version<kV4>(p, fp8, row_blocks, stream, map);
    case WgmmaVersion::v9_stamps:
    case WgmmaVersion::v9b_stamps:
      if (!tma || fp8) return cudaErrorNotSupported;
      return launch_decode_main_pair(p, row_blocks, stream, map,
                                     version == WgmmaVersion::v9b_stamps, true);
#ifdef MLA_DECODE_STAMPS
    // Diagnostics builds only: bf16 with stamps; fp8 runs the unstamped kernel.
    case WgmmaVersion::v4_stamps:
      return launch_version<kV4 | kStamps, kV4>(p, fp8, row_blocks, stream, map);
    case WgmmaVersion::v7_stamps:
      return launch_version<kV7 | kStamps>(p, fp8, row_blocks, stream, map);
    case WgmmaVersion::v7b_stamps:
      return launch_version<kV7 | kLazyRescale | kStamps>(p, fp8, row_blocks, stream, map);
    case WgmmaVersion::v8_stamps:
      if (!tma) return cudaErrorNotSupported;
      return launch_version<kV4 | kTmaKv | kStamps>(p, fp8, row_blocks, stream, map);
    case WgmmaVersion::v8b_stamps:
      if (!tma) return cudaErrorNotSupported;
      return launch_version<kV7 | kLazyRescale | kTmaKv | kStamps>(p, fp8, row_blocks, stream, map);
#else
    case WgmmaVersion::v4_stamps:
    case WgmmaVersion::v7_stamps:
    case WgmmaVersion::v7b_stamps:
    case WgmmaVersion::v8_stamps:
    case WgmmaVersion::v8b_stamps:
      return cudaErrorNotSupported;  // decode_cuda.cpp offers them only with MLA_DECODE_STAMPS
#endif
  }
  return cudaErrorInvalidValue;
}

}  // namespace mla::cuda::decode
