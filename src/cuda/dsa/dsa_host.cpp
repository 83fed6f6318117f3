#include "cuda/dsa/dsa_host.hpp"

#include "common/validate.hpp"

namespace mla::cuda::dsa {

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return detail::error(Errc::cuda_error, "{}: {} ({})", what, cudaGetErrorName(e),
                       cudaGetErrorString(e));
}

Status value_error(Errc code, const char* what, long long value, const char* why) {
  return detail::error(code, "{} = {} {}", what, value, why);
}

int num_sms() {
  static const int n = [] {
    int dev = 0, v = 132;
    if (cudaGetDevice(&dev) != cudaSuccess) return v;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 132;
    return v;
  }();
  return n;
}

}  // namespace mla::cuda::dsa
