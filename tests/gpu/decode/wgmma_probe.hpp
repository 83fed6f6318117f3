// One warpgroup's wgmma products on known matrices (wgmma_probe.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace mla::testing {

// a, b: device [64][576] bf16 bits (f16: f16 bits, the MMA element type of
// the fp8 caches); s_out device [64][32], o_out device [64][256] f32.
cudaError_t run_wgmma_probe(const uint16_t* a, const uint16_t* b, float* s_out, float* o_out,
                            bool f16 = false);
// The narrow kernel's transposed f16 products (wgmma_probe.cu): st_out device
// [64][16] = A . B[0:16]^T, ot_out device [64][16] = A[:, 256:320]^T . B[0:16, 0:64]^T.
cudaError_t run_wgmma_narrow_probe(const uint16_t* a, const uint16_t* b, float* st_out,
                                   float* ot_out);

}  // namespace mla::testing
