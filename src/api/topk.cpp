// Public entry point of token top-k: validate, then dispatch.
#include "mla/topk.hpp"

#include <limits>

#include "api/backend.hpp"
#include "api/device_values.hpp"
#include "api/topk_checks.hpp"
#ifdef MLA_HAS_CUDA
#include "cuda/topk/topk_cuda.hpp"
#endif
#include "common/checked.hpp"
#include "common/validate.hpp"
#include "reference/tensor_read.hpp"
#include "reference/topk_ref.hpp"

namespace mla {

using detail::error;
using detail::kAny;

namespace {

Status check_topk_values(const TopkArgs& a) {
  using reference::read_int;
  const int64_t R = a.logits.shape[0], N = a.logits.shape[1];
  const bool translate = a.block_table.defined();
  const int64_t max_pages = translate ? a.block_table.shape[1] : 0;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t len = a.lengths.defined() ? read_int(a.lengths, {r}) : N;
    if (len < 0) return error(Errc::out_of_range, "lengths[{}] = {} is negative", r, len);
    if (len > N)
      return error(Errc::out_of_range, "lengths[{}] = {} is past N = {} (the last dim of logits)",
                   r, len, N);
    if (!translate) continue;
    const int64_t b = r / a.rows_per_request, pages = (len + a.page_size - 1) / a.page_size;
    if (pages > max_pages)
      return error(Errc::out_of_range,
                   "lengths[{}] = {} is past the capacity of block_table row {}: max_pages * "
                   "page_size = {} * {} = {}",
                   r, len, b, max_pages, a.page_size, max_pages * a.page_size);
    for (int64_t j = 0; j < pages; ++j) {
      const int64_t id = read_int(a.block_table, {b, j});
      if (id < 0)
        return error(Errc::out_of_range,
                     "block_table[{}][{}] = {} is negative (row {} has length {})", b, j, id, r,
                     len);
      if (a.num_pages >= 0 && id >= a.num_pages)
        return error(Errc::out_of_range,
                     "block_table[{}][{}] = {} is past num_pages = {} (row {} has length {})", b, j,
                     id, a.num_pages, r, len);
      if ((id + 1) * int64_t(a.page_size) - 1 > std::numeric_limits<int32_t>::max())
        return error(Errc::out_of_range,
                     "block_table[{}][{}] = {}: its slots (page * page_size {}) do not fit the i32 "
                     "indices",
                     b, j, id, a.page_size);
    }
  }
  return Status::Ok();
}

}  // namespace

namespace detail {

Status validate_topk_k_order(int32_t k, TopkOrder order) {
  if (k < kTopkGranule || k > kTopkMax || k % kTopkGranule != 0)
    return error(Errc::invalid_value,
                 "k = {} is not allowed: k must be a multiple of {} in [{}, {}]", k, kTopkGranule,
                 kTopkGranule, kTopkMax);
  if (order != TopkOrder::best_first && order != TopkOrder::by_position)
    return error(Errc::invalid_value, "order = {} is not a TopkOrder (best_first or by_position)",
                 static_cast<int>(order));
  return Status::Ok();
}

Status validate_topk_indices(const TensorView& indices, int64_t rows, int32_t k,
                             const char* symbolic, const TensorView& like, const char* like_name) {
  MLA_TRY(detail::expect_shape(indices, "indices", {rows, k}, symbolic));
  MLA_TRY(detail::expect_dtype(indices, "indices", {DType::i32}));
  MLA_TRY(detail::expect_inner_contiguous(indices, "indices", 1));
  return detail::expect_same_device(like, like_name, indices, "indices");
}

}  // namespace detail

Status topk_indices(const TopkArgs& a, const ExecContext& ctx) {
  MLA_TRY(detail::expect_shape(a.logits, "logits", {kAny, kAny}, "[R, N]"));
  MLA_TRY(detail::expect_known_device(a.logits, "logits"));
  MLA_TRY(detail::expect_dtype(a.logits, "logits", {DType::f32}));
  MLA_TRY(detail::expect_inner_contiguous(a.logits, "logits", 1));
  const int64_t R = a.logits.shape[0];
  MLA_TRY(detail::validate_topk_k_order(a.k, a.order));
  MLA_TRY(detail::validate_topk_indices(a.indices, R, a.k, "[R, k]", a.logits, "logits"));
  if (a.lengths.defined()) {
    MLA_TRY(detail::expect_shape(a.lengths, "lengths", {R}, "[R]"));
    MLA_TRY(detail::expect_dtype(a.lengths, "lengths", {DType::i32}));
    MLA_TRY(detail::expect_same_device(a.logits, "logits", a.lengths, "lengths"));
  }
  if (a.block_table.defined()) {
    if (a.page_size < 1)
      return error(Errc::invalid_value, "page_size = {} must be at least 1", a.page_size);
    if (a.rows_per_request < 1)
      return error(Errc::invalid_value, "rows_per_request = {} must be at least 1",
                   a.rows_per_request);
    MLA_TRY(detail::expect_shape(a.block_table, "block_table", {kAny, kAny}, "[B, max_pages]"));
    MLA_TRY(detail::expect_dtype(a.block_table, "block_table", {DType::i32}));
    MLA_TRY(detail::expect_inner_contiguous(a.block_table, "block_table", 1));
    MLA_TRY(detail::expect_same_device(a.logits, "logits", a.block_table, "block_table"));
    // An empty block_table may have any first dim: the product is checked.
    int64_t rows = 0;
    if (!detail::mul_ok(a.block_table.shape[0], a.rows_per_request, &rows) || rows != R)
      return error(Errc::invalid_shape,
                   "block_table: {} requests * rows_per_request {} rows, but logits has R = {}",
                   a.block_table.shape[0], a.rows_per_request, R);
  }
  MLA_TRY(detail::expect_disjoint(
      {{&a.indices, "indices"}},
      {{&a.logits, "logits"}, {&a.lengths, "lengths"}, {&a.block_table, "block_table"}}));
  // Empty outputs: a no-op on every device (nothing to write, no launch).
  if (R == 0) return Status::Ok();  // no rows
  const bool on_gpu = detail::on_cuda(a.logits.device);
  MLA_TRY(detail::check_values(
      on_gpu, a, {{&TopkArgs::lengths, "lengths"}, {&TopkArgs::block_table, "block_table"}}, ctx,
      check_topk_values));
  if (on_gpu) return MLA_CUDA_BACKEND(cuda::topk_indices(a, ctx), "topk_indices");
  return reference::topk_indices(a);
}

}  // namespace mla
