// TopkArgs (validated by src/api/topk.cpp) to kernel params, and the plan.
#include "cuda/topk/topk_cuda.hpp"

#include "common/validate.hpp"
#include "cuda/common/cuda_status.hpp"

namespace mla::cuda {

using detail::error;

namespace {
cudaStream_t stream_of(const ExecContext& ctx) {
  return static_cast<cudaStream_t>(ctx.stream);
}
}  // namespace

Status topk_indices(const TopkArgs& a, const ExecContext& ctx, topk::TopkPlan plan) {
  topk::TopkParams p;
  p.logits = static_cast<const float*>(a.logits.data);
  p.logits_stride = a.logits.strides[0];
  p.num_rows = a.logits.shape[0];
  p.width = a.logits.shape[1];
  p.k = a.k;
  p.best_first = a.order == TopkOrder::best_first;
  p.l2_prefetch = plan.l2_prefetch;
  if (a.k > topk::max_k(plan.kernel))
    return error(Errc::invalid_value, "k = {} is past {}, the largest the {} top-k kernel takes",
                 a.k, topk::max_k(plan.kernel), topk::kernel_name(plan.kernel));
  if (plan.cluster != 1 && plan.cluster != 2 && plan.cluster != 4 && plan.cluster != 8)
    return error(Errc::invalid_value, "top-k cluster = {} must be 1, 2, 4 or 8", plan.cluster);
  if (!topk::fits(plan.kernel, p.width, plan.cluster))
    return error(Errc::invalid_value,
                 "logits: N = {} positions split over a cluster of {} do not fit the {} top-k "
                 "kernel's {} logits per CTA",
                 p.width, plan.cluster, topk::kernel_name(plan.kernel), topk::kResidentFloats);
  if (p.width > (int64_t(1) << 31) - 4)
    return error(Errc::unsupported, "logits: N = {} positions do not fit the i32 indices", p.width);
  if (p.num_rows * plan.cluster > 0x7fffffffLL)
    return error(Errc::unsupported, "logits: R = {} rows are too many for one launch", p.num_rows);
  if (a.lengths.defined()) {
    if (a.lengths.shape[0] > 1 && a.lengths.strides[0] != 1)
      return error(Errc::invalid_stride, "lengths: must be dense (stride {})",
                   a.lengths.strides[0]);
    p.lengths = static_cast<const int32_t*>(a.lengths.data);
  }
  if (a.block_table.defined()) {
    p.block_table = static_cast<const int32_t*>(a.block_table.data);
    p.block_table_stride = a.block_table.strides[0];
    p.max_pages = a.block_table.shape[1];
    p.page_size = a.page_size;
    p.rows_per_request = a.rows_per_request;
  }
  p.out = static_cast<int32_t*>(a.indices.data);
  p.out_stride = a.indices.strides[0];
  return topk::launch_topk(p, plan.kernel, plan.cluster, stream_of(ctx));
}

Status topk_indices(const TopkArgs& a, const ExecContext& ctx) {
  int dev = 0;
  DeviceFacts f;
  MLA_CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice");
  MLA_TRY(device_facts(dev, &f));
  return topk_indices(a, ctx, topk::choose(a.logits.shape[0], a.logits.shape[1], a.k, f.sm_count));
}

}  // namespace mla::cuda
