// Fail-fast checks for the benchmark executables, and their device buffers: a benchmark
// that meets an error prints where and why and exits (no partial numbers are worth keeping).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "mla/status.hpp"
#include "mla/support.hpp"

// What a failed CUDA call means: with no GPU or no driver the runtime says "CUDA
// driver version is insufficient"; mla's probe says which it is.
inline std::string bench_cuda_error_text(cudaError_t e) {
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
    const mla::Support s = mla::is_supported(mla::OpFamily::decode, 0);
    if (!s.supported) return s.reason;
  }
  return cudaGetErrorString(e);
}

// A CUDA runtime call that must succeed (exit code 2).
#define BENCH_CUDA(x)                                                \
  do {                                                               \
    cudaError_t e_ = (x);                                            \
    if (e_ != cudaSuccess) {                                         \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, \
                   bench_cuda_error_text(e_).c_str());               \
      std::exit(2);                                                  \
    }                                                                \
  } while (0)

// An mla call that must return Status::Ok (exit code 3).
#define BENCH_OK(x)                                                                           \
  do {                                                                                        \
    ::mla::Status s_ = (x);                                                                   \
    if (!s_.ok()) {                                                                           \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_.to_string().c_str()); \
      std::exit(3);                                                                           \
    }                                                                                         \
  } while (0)

// Device memory that must be allocated (exit code 2 otherwise), freed on scope exit. At
// least 256 bytes: an empty buffer still has its own address.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { BENCH_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 256))); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};
