// Fail-fast checks of the examples: a failed CUDA, NCCL or mla call prints
// what failed and why, and exits (exit code 1).
#pragma once
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "mla/status.hpp"

namespace mla::examples {

[[noreturn]] inline void die(const std::string& what) {
  fmt::print(stderr, "{}\n", what);
  std::exit(1);
}
inline void check(const Status& s, const char* what) {
  if (!s.ok()) die(fmt::format("{}: {}", what, s.to_string()));
}
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}
inline void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) die(fmt::format("{}: {}", what, ncclGetErrorString(r)));
}

}  // namespace mla::examples

// A call that must succeed, named by its own text.
#define EXAMPLE_CHECK(x) ::mla::examples::check((x), #x)
