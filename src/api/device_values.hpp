// The checked mode (ExecContext::check_device_values): host copies of the
// small index tensors an op reads on the device, so the CPU path's value
// checks can run on them before a CUDA launch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>
#include <vector>

#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla::detail {

// Whether the op must check device values on the host before launching.
inline bool checked_launch(const TensorView& t, const ExecContext& ctx) {
  return ctx.check_device_values && t.device.type == DeviceType::cuda;
}

// A host view of `t` with t's shape and strides: t itself for CPU tensors and
// undefined views; for CUDA tensors a copy of the bytes t spans, read on
// ctx.stream, which is then synchronised. Only for validated (extent-checked)
// views.
class HostCopy {
 public:
  Status copy(const TensorView& t, const char* name, const ExecContext& ctx);
  const TensorView& view() const { return view_; }

 private:
  std::vector<uint64_t> storage_;
  TensorView view_;
};

// The checked mode's one step: `check` (a callable taking `const Args&`) runs on a copy of
// `args` whose listed fields are replaced by host copies (HostCopy) of those tensors, each
// named by its argument name in a copy error.
template <class Args, class Check>
Status check_on_host(
    const Args& args,
    std::initializer_list<std::pair<TensorView std::type_identity_t<Args>::*, const char*>> fields,
    const ExecContext& ctx, Check&& check) {
  std::vector<HostCopy> copies(fields.size());
  Args h = args;
  size_t i = 0;
  for (const auto& [field, name] : fields) {
    MLA_TRY(copies[i].copy(args.*field, name, ctx));
    h.*field = copies[i++].view();
  }
  return std::forward<Check>(check)(std::as_const(h));
}

// The value checks of an op whose index tensors may live on the GPU: on the CPU `check`
// runs on `args` itself; on the GPU only in the checked mode (check_on_host), since the
// kernels guard the device values themselves.
template <class Args, class Check>
Status check_values(
    bool on_gpu, const Args& args,
    std::initializer_list<std::pair<TensorView std::type_identity_t<Args>::*, const char*>> fields,
    const ExecContext& ctx, Check&& check) {
  if (!on_gpu) return std::forward<Check>(check)(args);
  if (!ctx.check_device_values) return Status::Ok();
  return check_on_host(args, fields, ctx, std::forward<Check>(check));
}

}  // namespace mla::detail
