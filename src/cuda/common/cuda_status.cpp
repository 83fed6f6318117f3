#include "cuda/common/cuda_status.hpp"

#include <array>
#include <mutex>

#include "common/validate.hpp"
#include "cuda/common/device_support.hpp"

namespace mla::cuda {

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  if (const char* no_gpu = no_gpu_reason(e))
    return detail::error(Errc::cuda_error, "{}: {} ({})", what, no_gpu, cudaGetErrorName(e));
  return detail::error(Errc::cuda_error, "{}: CUDA error {} ({})", what, cudaGetErrorName(e),
                       cudaGetErrorString(e));
}

Status check_launch(const char* kernel) {
  return cuda_status(cudaGetLastError(), kernel);
}

Status device_facts(int id, DeviceFacts* out) {
  constexpr int kMaxDevices = 64;
  static std::mutex mu;
  static std::array<DeviceFacts, kMaxDevices> cache{};
  if (id < 0 || id >= kMaxDevices)
    return detail::error(Errc::invalid_device, "cuda device id {} is out of range [0, {})", id,
                         kMaxDevices);
  std::lock_guard<std::mutex> lock(mu);
  DeviceFacts& f = cache[id];
  if (f.sm_count == 0) {
    DeviceFacts g;
    MLA_CUDA_TRY(cudaDeviceGetAttribute(&g.sm_count, cudaDevAttrMultiProcessorCount, id),
                 "cudaDeviceGetAttribute(MultiProcessorCount)");
    MLA_CUDA_TRY(cudaDeviceGetAttribute(&g.max_smem_per_block_optin,
                                        cudaDevAttrMaxSharedMemoryPerBlockOptin, id),
                 "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
    MLA_CUDA_TRY(cudaDeviceGetAttribute(&g.major, cudaDevAttrComputeCapabilityMajor, id),
                 "cudaDeviceGetAttribute(ComputeCapabilityMajor)");
    MLA_CUDA_TRY(cudaDeviceGetAttribute(&g.minor, cudaDevAttrComputeCapabilityMinor, id),
                 "cudaDeviceGetAttribute(ComputeCapabilityMinor)");
    f = g;
  }
  *out = f;
  return Status::Ok();
}

int current_sm_count() {
  int dev = 0;
  DeviceFacts f;
  if (cudaGetDevice(&dev) != cudaSuccess || !device_facts(dev, &f).ok()) return 132;
  return f.sm_count;
}

Status value_error(Errc code, const char* what, long long value, const char* why) {
  return detail::error(code, "{} = {} {}", what, value, why);
}

}  // namespace mla::cuda
