// C ABI of block-sparse selection (mla/block_sparse.hpp).
#include <string_view>

#include "capi/capi_common.hpp"
#include "mla/block_sparse.hpp"

using namespace mla;
using namespace mla::capi;

namespace {

// The C struct and the C++ one hold the same seven int32 fields in the same order.
static_assert(sizeof(mla_block_sparse_params) == sizeof(BlockSparseParams),
              "mla_block_sparse_params must mirror mla::BlockSparseParams");

BlockSparseParams from_c(const mla_block_sparse_params& c) {
  return BlockSparseParams{c.block_size,          c.stride,         c.selected_block_size,
                           c.num_selected_blocks, c.initial_blocks, c.local_blocks,
                           c.sliding_window};
}

mla_block_sparse_params to_c(const BlockSparseParams& p) {
  return mla_block_sparse_params{p.block_size,          p.stride,         p.selected_block_size,
                                 p.num_selected_blocks, p.initial_blocks, p.local_blocks,
                                 p.sliding_window};
}

// NULL parameters mean the defaults (as a NULL mla_rope_config does).
BlockSparseParams params_or_default(const mla_block_sparse_params* c) {
  return c == nullptr ? BlockSparseParams{} : from_c(*c);
}

}  // namespace

extern "C" {

void mla_block_sparse_default_params(mla_block_sparse_params* params) {
  if (params != nullptr) *params = to_c(BlockSparseParams{});
}

int32_t mla_validate_block_sparse_params(const mla_block_sparse_params* params) {
  return guarded([&] { return validate_block_sparse_params(params_or_default(params)); });
}

int32_t mla_block_sparse_capacity(const mla_block_sparse_params* params, int64_t* capacity) {
  return guarded([&] {
    MLA_TRY(expect_pointer(capacity, "capacity"));
    const BlockSparseParams p = params_or_default(params);
    MLA_TRY(validate_block_sparse_params(p));
    *capacity = block_sparse_capacity(p);
    return Status::Ok();
  });
}

int32_t mla_block_sparse_num_presets(void) {
  return int32_t(block_sparse_presets().size());
}

int32_t mla_block_sparse_preset_at(int32_t i, const char** name, mla_block_sparse_params* params,
                                   const char** source) {
  return guarded([&] {
    const auto presets = block_sparse_presets();
    if (i < 0 || size_t(i) >= presets.size())
      return Status(Errc::out_of_range, "preset index " + std::to_string(i) + " is outside [0, " +
                                            std::to_string(presets.size()) + ")");
    if (name != nullptr) *name = presets[i].name;
    if (params != nullptr) *params = to_c(presets[i].params);
    if (source != nullptr) *source = presets[i].source;
    return Status::Ok();
  });
}

int32_t mla_block_sparse_preset(const char* name, mla_block_sparse_params* params) {
  return guarded([&] {
    MLA_TRY(expect_pointer(name, "name"));
    MLA_TRY(expect_pointer(params, "params"));
    BlockSparseParams p;
    MLA_TRY(block_sparse_preset(std::string_view(name), &p));
    *params = to_c(p);
    return Status::Ok();
  });
}

int32_t mla_block_sparse_select(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                                const mla_tensor* block_table, const mla_tensor* cache_seqlens,
                                const mla_block_sparse_params* params, const mla_tensor* indices,
                                const mla_tensor* num_selected, void* stream) {
  return guarded([&] {
    BlockSparseSelectArgs a;
    MLA_TRY(to_view(q, "q", &a.q));
    MLA_TRY(to_cache(kv, kv_format, "kv", &a.kv));
    MLA_TRY(to_views({MLA_VIEW(a, block_table), MLA_VIEW(a, cache_seqlens), MLA_VIEW(a, indices),
                      MLA_VIEW(a, num_selected)}));
    a.params = params_or_default(params);
    return block_sparse_select(a, to_context(stream));
  });
}

}  // extern "C"
