// Whether a CUDA device can run the kernels of this build (mla/support.hpp).
#pragma once
#include "mla/support.hpp"

namespace mla::cuda {

// The kernels are compiled for sm_90a only (no PTX): a device runs them iff it is
// compute capability 9.0. No GPU, no driver, or a driver older than the runtime
// is a "no" that says which.
Support device_support(int device_id);

// A sentence for the runtime's answer when it finds no usable GPU
// (cudaErrorNoDevice, cudaErrorInsufficientDriver), which on a machine without
// an NVIDIA driver reads "CUDA driver version is insufficient".
const char* no_gpu_reason(int cuda_error);

}  // namespace mla::cuda
