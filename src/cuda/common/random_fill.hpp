// Random device data for benchmarks (never zeros: zeros run faster than real
// data on tensor cores and hide wrong indexing). Counter-based (splitmix64 of
// seed and index), so a buffer is reproducible and filled at memory speed.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace mla::cuda {

// n bf16 values uniform in [lo, hi).
cudaError_t fill_uniform_bf16(void* dst, int64_t n, float lo, float hi, uint64_t seed,
                              cudaStream_t stream);
// n int32 values uniform in [0, modulo).
cudaError_t fill_uniform_i32(int32_t* dst, int64_t n, int32_t modulo, uint64_t seed,
                             cudaStream_t stream);
// n fp8_ds_mla entries (656 bytes each, `stride` bytes apart): finite e4m3
// codes, power-of-two scales 2^-8..2^-2, bf16 rope in [-1, 1).
cudaError_t fill_fp8_ds_mla(void* dst, int64_t n, int64_t stride, uint64_t seed,
                            cudaStream_t stream);

}  // namespace mla::cuda
