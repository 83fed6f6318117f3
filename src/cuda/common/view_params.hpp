// A view's base and first two element strides, copied into a kernel's POD
// params (which name them per operand: row/head, t/d...).
#pragma once
#include <cstdint>

#include "mla/tensor.hpp"

namespace mla::cuda {

template <class Ptr>
void take_view(const TensorView& t, Ptr& data, int64_t& stride0, int64_t& stride1) {
  data = static_cast<Ptr>(t.data);
  stride0 = t.strides[0];
  stride1 = t.strides[1];
}

}  // namespace mla::cuda
