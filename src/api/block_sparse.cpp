// Public entry points of block-sparse selection: parameters, presets, and the
// selection itself (validate, then dispatch).
#include "mla/block_sparse.hpp"

#include <string>

#include "api/attention_checks.hpp"
#include "api/backend.hpp"
#include "api/paged_checks.hpp"
#include "common/validate.hpp"
#include "mla/dims.hpp"
#include "reference/block_sparse_ref.hpp"

namespace mla {

using detail::error;
using detail::kAny;

Status validate_block_sparse_params(const BlockSparseParams& p) {
  for (auto [v, name] : {std::pair{p.block_size, "block_size"}, std::pair{p.stride, "stride"},
                         std::pair{p.selected_block_size, "selected_block_size"},
                         std::pair{p.num_selected_blocks, "num_selected_blocks"}})
    if (v < 1) return error(Errc::invalid_value, "params.{} = {} must be at least 1", name, v);
  for (auto [v, name] :
       {std::pair{p.initial_blocks, "initial_blocks"}, std::pair{p.local_blocks, "local_blocks"},
        std::pair{p.sliding_window, "sliding_window"}})
    if (v < 0) return error(Errc::invalid_value, "params.{} = {} is negative", name, v);
  if (p.stride > p.block_size)
    return error(Errc::invalid_value,
                 "params.stride = {} is past block_size = {}: compressed blocks would leave "
                 "tokens uncovered",
                 p.stride, p.block_size);
  if (int64_t(p.initial_blocks) + p.local_blocks > p.num_selected_blocks)
    return error(Errc::invalid_value,
                 "params.initial_blocks + local_blocks = {} + {} is past num_selected_blocks = {} "
                 "(the forced blocks count among the selected ones)",
                 p.initial_blocks, p.local_blocks, p.num_selected_blocks);
  if (int64_t(p.num_selected_blocks) * p.selected_block_size + p.sliding_window > (1 << 20))
    return error(Errc::invalid_value,
                 "params: num_selected_blocks * selected_block_size + sliding_window = {} * {} + "
                 "{} is past 2^20 tokens per list",
                 p.num_selected_blocks, p.selected_block_size, p.sliding_window);
  return Status::Ok();
}

int64_t block_sparse_capacity(const BlockSparseParams& p) {
  const int64_t need = int64_t(p.num_selected_blocks) * p.selected_block_size + p.sliding_window;
  return (need + 63) / 64 * 64;
}

namespace {
// Seed 000 (section 8.2) gives ranges per GPU; we take the middle of each range
// (rounded down). It has no H200 row: the H200 has the H100's SMs and clocks, so
// it gets the H100 set (its extra bandwidth would allow more blocks: measure).
constexpr BlockSparsePreset kPresets[] = {
    {"nsa", {32, 16, 64, 16, 1, 2, 512}, "NSA (arXiv 2502.11089) = seed 000 section 6.1 defaults"},
    {"h100", {64, 32, 64, 13, 1, 2, 512}, "seed 000 section 8.2, H100 (12-14 blocks)"},
    {"h200", {64, 32, 64, 13, 1, 2, 512}, "H100's set (seed 000 has no H200 row)"},
    {"h800",
     {64, 32, 64, 11, 1, 2, 448},
     "seed 000 section 8.2, H800 (10-12 blocks, window 384-512)"},
    {"b200",
     {32, 16, 64, 18, 1, 2, 768},
     "seed 000 section 8.2, B200 (16-20 blocks, window 512-1024, local 2-3)"},
    {"b300",
     {32, 16, 64, 18, 1, 2, 768},
     "seed 000 section 8.2, B300 (16-20 blocks, window 512-1024, local 2-3)"},
};
}  // namespace

std::span<const BlockSparsePreset> block_sparse_presets() {
  return kPresets;
}

Status block_sparse_preset(std::string_view name, BlockSparseParams* out) {
  std::string known;
  for (const auto& p : kPresets) {
    if (name == p.name) {
      *out = p.params;
      return Status::Ok();
    }
    known += (known.empty() ? "" : ", ") + std::string(p.name);
  }
  return error(Errc::invalid_value, "unknown block-sparse preset '{}' (known: {})", name, known);
}

Status block_sparse_select(const BlockSparseSelectArgs& a, const ExecContext& ctx) {
  using detail::expect_dtype;
  using detail::expect_shape;
  MLA_TRY(validate_block_sparse_params(a.params));
  MLA_TRY(detail::expect_absorbed_query(a.q));
  const int64_t B = a.q.shape[0], s_q = a.q.shape[1];
  MLA_TRY(expect_dtype(a.q, "q", {DType::bf16, DType::f32, DType::f64}));
  MLA_TRY(validate_kv_cache(a.kv, "kv"));
  MLA_TRY(detail::expect_block_table(a.block_table, a.cache_seqlens, B));
  MLA_TRY(expect_shape(a.indices, "indices", {B, s_q, kAny}, "[B, s_q, C]"));
  MLA_TRY(expect_dtype(a.indices, "indices", {DType::i32}));
  const int64_t need = block_sparse_capacity(a.params);
  if (a.indices.shape[2] < need)
    return error(Errc::invalid_shape,
                 "indices: C = {} entries per list is below block_sparse_capacity(params) = {}",
                 a.indices.shape[2], need);
  if (a.num_selected.defined()) {
    MLA_TRY(expect_shape(a.num_selected, "num_selected", {B, s_q}, "[B, s_q]"));
    MLA_TRY(expect_dtype(a.num_selected, "num_selected", {DType::i32}));
    MLA_TRY(detail::expect_same_device(a.q, "q", a.num_selected, "num_selected"));
  }
  for (auto [t, name] :
       {std::pair{&a.q, "q"}, std::pair{&a.kv.data, "kv"}, std::pair{&a.block_table, "block_table"},
        std::pair{&a.cache_seqlens, "cache_seqlens"}, std::pair{&a.indices, "indices"}}) {
    MLA_TRY(detail::expect_inner_contiguous(*t, name, 1));
    MLA_TRY(detail::expect_same_device(a.q, "q", *t, name));
  }
  MLA_TRY(detail::expect_disjoint({{&a.indices, "indices"}, {&a.num_selected, "num_selected"}},
                                  {{&a.q, "q"},
                                   {&a.kv.data, "kv"},
                                   {&a.block_table, "block_table"},
                                   {&a.cache_seqlens, "cache_seqlens"}}));
  if (detail::on_cuda(a.q.device)) return detail::no_cuda_backend("block_sparse_select");
  MLA_TRY(detail::check_block_table_values(a.block_table, a.cache_seqlens, a.kv.page_size(),
                                           a.kv.num_pages(), /*max_len=*/-1));
  if (a.indices.numel() == 0) return Status::Ok();  // B = 0 or s_q = 0: nothing to write
  return reference::block_sparse_select(a);
}

}  // namespace mla
