// Fail-fast checks for the benchmark executables: a benchmark that meets an
// error prints where and why and exits (no partial numbers are worth keeping).
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "mla/status.hpp"

// A CUDA runtime call that must succeed (exit code 2).
#define BENCH_CUDA(x)                                                                         \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                           \
    }                                                                                         \
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
