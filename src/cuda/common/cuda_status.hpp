// CUDA runtime errors as mla::Status, and the device facts the kernels are
// sized from (multiprocessor count, shared memory per block), read once per
// device and cached: the decode path must not query the driver on every call
// (and must stay legal inside CUDA graph capture).
#pragma once
#include <cuda_runtime.h>

#include "mla/status.hpp"

namespace mla::cuda {

// Errc::cuda_error naming what failed, with CUDA's own name and message.
Status cuda_status(cudaError_t e, const char* what);

// The launch error of the last kernel launch on this thread (bad configuration,
// too much shared memory...), as a Status naming the kernel.
Status check_launch(const char* kernel);

struct DeviceFacts {
  int sm_count = 0;
  int max_smem_per_block_optin = 0;  // bytes a block may use after cudaFuncSetAttribute
  int major = 0, minor = 0;
};
// Facts of device `id` (cached after the first call; thread-safe).
Status device_facts(int id, DeviceFacts* out);

// Multiprocessors of the current device, for grid sizing only: 132 (an
// H100/H200) when the query fails; the launch then reports the real error.
int current_sm_count();

// "<what> = <value> <why>", e.g. "s_q = 5 is not in [1, 4]". For .cu files,
// which cannot use fmt's compile-time format strings (nvcc).
Status value_error(Errc code, const char* what, long long value, const char* why);

}  // namespace mla::cuda

#define MLA_CUDA_TRY(expr, what) MLA_TRY(::mla::cuda::cuda_status((expr), (what)))
