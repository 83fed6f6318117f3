#include "api/device_values.hpp"

#include "common/validate.hpp"

#ifdef MLA_HAS_CUDA
#include <cuda_runtime.h>
#endif

namespace mla::detail {

Status HostCopy::copy(const TensorView& t, const char* name, const ExecContext& ctx) {
  view_ = t;
  if (!t.defined() || t.device.type != DeviceType::cuda) return Status::Ok();
  Extent e;
  MLA_TRY(expect_extent(t, name, &e));
  if (e.numel == 0) return Status::Ok();
  const int64_t esz = dtype_size(t.dtype);
  const size_t bytes = static_cast<size_t>((e.hi - e.lo + 1) * esz);
#ifdef MLA_HAS_CUDA
  storage_.assign(bytes / 8 + 1, 0);
  const char* first = static_cast<const char*>(t.data) + e.lo * esz;
  auto* stream = static_cast<cudaStream_t>(ctx.stream);
  cudaError_t err = cudaMemcpyAsync(storage_.data(), first, bytes, cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess)
    return error(Errc::cuda_error, "{}: checked mode: copying {} bytes to the host: {}", name,
                 bytes, cudaGetErrorString(err));
  view_.data = reinterpret_cast<char*>(storage_.data()) - e.lo * esz;
  view_.device = Device::cpu();
  return Status::Ok();
#else
  return error(Errc::unsupported, "{}: CUDA tensors need a CUDA build ({} bytes)", name, bytes);
#endif
}

}  // namespace mla::detail
