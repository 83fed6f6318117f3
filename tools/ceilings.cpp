#include "ceilings.hpp"

#include <cstdio>

#ifdef MLA_HAS_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "bench/bench_timing.hpp"  // the timing loop every benchmark shares
#endif

namespace mla::cli {

#ifdef MLA_HAS_CUDA
bool measure_ceilings(BenchCeilings* c, std::string* how) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    *how = "no CUDA GPU";
    return false;
  }
  char line[256];
  how->clear();
  if (c->read_gbps <= 0) {
    // 1 GiB copied: far past the L2, so every byte goes to HBM and back.
    const size_t bytes = size_t(1) << 30;
    void *a = nullptr, *b = nullptr;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
      *how = "cannot allocate 2 GiB for the copy ceiling";
      return false;
    }
    cudaMemset(a, 1, bytes);
    const double ms = 1e-3 * time_events(10, 2, [&] {
                               cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
                             }).median_us;
    c->read_gbps = 2.0 * double(bytes) / (ms * 1e-3) / 1e9;  // read + write
    std::snprintf(line, sizeof line, "HBM %.0f GB/s (1 GiB device copy, read + write, %.3f ms)",
                  c->read_gbps, ms);
    *how += line;
    cudaFree(a);
    cudaFree(b);
  } else {
    std::snprintf(line, sizeof line, "HBM %.0f GB/s (given)", c->read_gbps);
    *how += line;
  }
  if (c->bf16_tflops <= 0) {
    const int m = 8192;
    const size_t bytes = size_t(m) * m * 2;
    void *A = nullptr, *B = nullptr, *C = nullptr;
    cublasHandle_t h = nullptr;
    if (cudaMalloc(&A, bytes) != cudaSuccess || cudaMalloc(&B, bytes) != cudaSuccess ||
        cudaMalloc(&C, bytes) != cudaSuccess || cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
      *how = "cannot set up the bf16 GEMM ceiling";
      return false;
    }
    // Finite, varied bf16 bit patterns (0x3c00..: values near 0.0078): never zeros, which
    // some GPUs multiply faster.
    cudaMemset(A, 0x3c, bytes);
    cudaMemset(B, 0x3d, bytes);
    const float one = 1, zero = 0;
    const double ms =
        1e-3 * time_events(10, 2, [&] {
                 cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, m, m, &one, A, CUDA_R_16BF, m, B,
                              CUDA_R_16BF, m, &zero, C, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT);
               }).median_us;
    c->bf16_tflops = 2.0 * m * double(m) * m / (ms * 1e-3) / 1e12;
    std::snprintf(line, sizeof line, ", bf16 %.0f TFLOP/s (cuBLAS GEMM 8192^3, %.3f ms)",
                  c->bf16_tflops, ms);
    *how += line;
    cublasDestroy(h);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
  } else {
    std::snprintf(line, sizeof line, ", bf16 %.0f TFLOP/s (given)", c->bf16_tflops);
    *how += line;
  }
  if (c->fp8_tflops <= 0) {
    c->fp8_tflops = 2 * c->bf16_tflops;
    std::snprintf(line, sizeof line, ", fp8 %.0f TFLOP/s (2 x bf16, not measured)", c->fp8_tflops);
  } else {
    std::snprintf(line, sizeof line, ", fp8 %.0f TFLOP/s (given)", c->fp8_tflops);
  }
  *how += line;
  return cudaGetLastError() == cudaSuccess;
}
#else
bool measure_ceilings(BenchCeilings*, std::string* how) {
  *how = "no CUDA GPU support in this build";
  return false;
}
#endif

}  // namespace mla::cli
