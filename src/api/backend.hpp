// Backend dispatch shared by the API entry points: every op validates its
// arguments device-independently, then runs the CPU reference for CPU tensors
// or the CUDA backend for CUDA tensors. Ops whose kernel does not exist yet
// answer Errc::unsupported via no_cuda_backend(); adding a kernel is one line:
//   if (on_cuda(dev)) return MLA_CUDA_BACKEND(cuda::op(args, ctx), "op");
#pragma once
#include "common/validate.hpp"
#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla::detail {

inline bool on_cuda(Device d) {
  return d.type == DeviceType::cuda;
}

inline Status no_cuda_backend(const char* op) {
  return error(Errc::unsupported,
               "{}: CUDA tensors are not supported by this build yet (no CUDA kernel for this "
               "operation); pass CPU tensors to run the CPU reference",
               op);
}

// The device every tensor of an op must share; an unknown device type is an error.
inline Status expect_known_device(const TensorView& t, const char* name) {
  if (t.device.type != DeviceType::cpu && t.device.type != DeviceType::cuda)
    return error(Errc::invalid_device, "{}: device type {} is neither cpu (1) nor cuda (2)", name,
                 static_cast<int>(t.device.type));
  return Status::Ok();
}

}  // namespace mla::detail

// `call` (a cuda:: backend function) in a build with the CUDA kernels; in a build without
// them the unsupported error naming `op`, and `call`, whose function is then not declared,
// is not compiled.
#ifdef MLA_HAS_CUDA
#define MLA_CUDA_BACKEND(call, op) (call)
#else
#define MLA_CUDA_BACKEND(call, op) ::mla::detail::no_cuda_backend(op)
#endif
