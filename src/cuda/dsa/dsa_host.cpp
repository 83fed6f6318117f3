#include "cuda/dsa/dsa_host.hpp"

#include "common/validate.hpp"

namespace mla::cuda::dsa {

Status value_error(Errc code, const char* what, long long value, const char* why) {
  return detail::error(code, "{} = {} {}", what, value, why);
}

int num_sms() {
  // Only grid sizing depends on it: an H100/H200's 132 is a safe answer when the
  // query fails (the launch itself then reports the real error).
  int dev = 0;
  DeviceFacts f;
  if (cudaGetDevice(&dev) != cudaSuccess || !device_facts(dev, &f).ok()) return 132;
  return f.sm_count;
}

}  // namespace mla::cuda::dsa
