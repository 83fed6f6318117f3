#include "reference/merge_ref.hpp"

#include <vector>

#include "reference/tensor_read.hpp"

namespace mla::reference {

Status merge_attn_partials(const MergeArgs& a) {
  const int64_t S = a.partial_lse.shape[0];
  const int row_dims = a.partial_lse.ndim - 1;
  const int64_t D = a.out.shape[row_dims];
  int64_t R = 1;
  for (int k = 0; k < row_dims; ++k) R *= a.out.shape[k];
  std::vector<double> o(D);
  for (int64_t r = 0; r < R; ++r) {
    // Element offsets of row r (a multi-index over the row dims) in each tensor.
    int64_t po = 0, pl = 0, oo = 0, lo = 0, rem = r;
    for (int k = row_dims - 1; k >= 0; --k) {
      const int64_t idx = rem % a.out.shape[k];
      rem /= a.out.shape[k];
      po += idx * a.partial_out.strides[k + 1];
      pl += idx * a.partial_lse.strides[k + 1];
      oo += idx * a.out.strides[k];
      lo += idx * a.lse.strides[k];
    }
    const double lse = merge_row(
        S, D,
        [&](int64_t s, int64_t c) {
          return load_at(a.partial_out, po + s * a.partial_out.strides[0] +
                                            c * a.partial_out.strides[row_dims + 1]);
        },
        [&](int64_t s) { return load_at(a.partial_lse, pl + s * a.partial_lse.strides[0]); },
        o.data());
    for (int64_t c = 0; c < D; ++c) store_at(a.out, oo + c * a.out.strides[row_dims], o[c]);
    store_at(a.lse, lo, lse);
  }
  return Status::Ok();
}

}  // namespace mla::reference
