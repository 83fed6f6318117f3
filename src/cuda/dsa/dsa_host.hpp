// Host-side helpers of the top-k and sparse-attention kernels, kept under this
// name for them: the helpers themselves live in cuda/common/cuda_status.hpp
// (the indexer uses them from there).
#pragma once
#include <cuda_runtime.h>

#include "cuda/common/cuda_status.hpp"
#include "mla/status.hpp"

namespace mla::cuda::dsa {

using ::mla::cuda::cuda_status;
using ::mla::cuda::value_error;
// After a launch: configuration errors are reported now, not at the next sync.
inline Status launch_status(const char* kernel) {
  return check_launch(kernel);
}
inline int num_sms() {
  return current_sm_count();
}

}  // namespace mla::cuda::dsa
