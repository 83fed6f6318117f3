// Host-side helpers of the DSA kernels: Status from CUDA errors and formatted
// messages. Implemented in dsa_host.cpp (g++), because fmt's compile-time format
// checks do not compile under nvcc; .cu files build messages through these.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "cuda/common/cuda_status.hpp"
#include "mla/status.hpp"

namespace mla::cuda::dsa {

// CUDA errors as Status: the library's one conversion (cuda/common/cuda_status.hpp).
using ::mla::cuda::cuda_status;
// After a launch: configuration errors are reported now, not at the next sync.
inline Status launch_status(const char* kernel) { return check_launch(kernel); }
// "<what> = <value> <why>", e.g. "s_q = 5 is not in [1, 4]".
Status value_error(Errc code, const char* what, long long value, const char* why);
// Multiprocessors of the current device (cached per device by device_facts).
int num_sms();

}  // namespace mla::cuda::dsa
