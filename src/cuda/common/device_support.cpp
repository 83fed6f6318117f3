#include "cuda/common/device_support.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

namespace mla::cuda {

const char* no_gpu_reason(int cuda_error) {
  if (cuda_error == cudaErrorNoDevice) return "no CUDA GPU: the driver sees no device";
  if (cuda_error == cudaErrorInsufficientDriver) {
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0)
      return "no CUDA GPU: no NVIDIA driver is installed";
    return "no usable CUDA GPU: the NVIDIA driver is older than this build's CUDA runtime";
  }
  return nullptr;
}

Support device_support(int device_id) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // the probe leaves no sticky error behind
    const char* why = no_gpu_reason(e);
    return {false, why ? std::string(why)
                       : fmt::format("cudaGetDeviceCount: {} ({})", cudaGetErrorName(e),
                                     cudaGetErrorString(e))};
  }
  if (count == 0) return {false, "no CUDA GPU: the driver sees no device"};
  if (device_id >= count)
    return {false, fmt::format("cuda:{} does not exist ({} CUDA device{})", device_id, count,
                               count == 1 ? "" : "s")};
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_id) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_id) != cudaSuccess) {
    cudaGetLastError();
    return {false, fmt::format("cuda:{}: its compute capability could not be read", device_id)};
  }
  if (major != 9 || minor != 0)
    return {false, fmt::format("cuda:{} has compute capability {}.{}; the kernels of this build "
                               "are compiled for sm_90a (Hopper: H100, H200, H20) only",
                               device_id, major, minor)};
  return {true, ""};
}

}  // namespace mla::cuda
