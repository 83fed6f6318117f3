// The top-k CUDA backend: validated API arguments -> kernel params. Layout
// demands the kernel makes beyond the API's checks are checked here and
// answered with a Status naming the argument.
#include <cstdint>

#include "common/validate.hpp"
#include "cuda/dsa/topk_cuda.hpp"
#include "cuda/dsa/topk_launch.hpp"

namespace mla::cuda {

using detail::error;
namespace k = mla::cuda::dsa;

namespace {
cudaStream_t stream_of(const ExecContext& ctx) {
  return static_cast<cudaStream_t>(ctx.stream);
}
}  // namespace

Status topk_indices(const TopkArgs& a, const ExecContext& ctx) {
  k::TopkParams p;
  p.logits = static_cast<const float*>(a.logits.data);
  p.logits_stride = a.logits.strides[0];
  p.num_rows = a.logits.shape[0];
  p.width = a.logits.shape[1];
  p.k = a.k;
  if (a.lengths.defined()) {
    if (a.lengths.shape[0] > 1 && a.lengths.strides[0] != 1)
      return error(Errc::invalid_stride, "lengths: must be dense (stride {})",
                   a.lengths.strides[0]);
    p.lengths = static_cast<const int32_t*>(a.lengths.data);
  }
  if (a.block_table.defined()) {
    p.block_table = static_cast<const int32_t*>(a.block_table.data);
    p.block_table_stride = a.block_table.strides[0];
    p.page_size = a.page_size;
    p.rows_per_request = a.rows_per_request;
  }
  p.out = static_cast<int32_t*>(a.indices.data);
  p.out_stride = a.indices.strides[0];
  return k::launch_topk(p, stream_of(ctx));
}

}  // namespace mla::cuda
