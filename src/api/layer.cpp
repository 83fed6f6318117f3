// The attention layer's entry points (mla/layer.hpp): configs, weight shapes,
// seeded synthetic weights, argument checks, then the CPU reference or the GPU
// composition (src/cuda/layer: cuBLAS projections + our kernels).
#include "mla/layer.hpp"

#include <fmt/ranges.h>

#include <cmath>
#include <random>

#include "api/backend.hpp"
#include "api/device_values.hpp"
#include "api/paged_checks.hpp"
#include "api/rope_checks.hpp"
#include "common/checked.hpp"
#include "common/validate.hpp"
#include "mla/dims.hpp"
#include "mla/topk.hpp"
#include "reference/layer_ref.hpp"
#include "reference/tensor_read.hpp"

#ifdef MLA_HAS_CUDA
#include "cuda/layer/layer_cuda.hpp"
#endif

namespace mla {

using detail::error;
using detail::expect_dtype;
using detail::expect_shape;
using detail::kAny;

LayerConfig deepseek_v32_layer() {
  return LayerConfig{};
}

LayerConfig small_test_layer() {
  LayerConfig c;
  c.hidden = 256;
  c.q_lora_rank = 64;
  c.heads = 8;
  c.d_nope = 32;
  c.d_v = 32;
  c.index_topk = 64;
  return c;
}

double layer_softmax_scale(const LayerConfig& c) {
  if (c.softmax_scale != 0) return c.softmax_scale;
  const double m = yarn_mscale(c.rope.factor, c.rope.mscale_all_dim);
  return m * m / std::sqrt(double(c.d_nope) + double(c.d_rope));
}

const char* layer_attention_name(LayerAttention a) noexcept {
  switch (a) {
    case LayerAttention::absorbed: return "absorbed";
    case LayerAttention::non_absorbed: return "non_absorbed";
    case LayerAttention::sparse: return "sparse";
  }
  return "?";
}

namespace {

Status validate_config(const LayerConfig& c) {
  if (c.hidden <= 0) return error(Errc::invalid_value, "config.hidden = {} must be > 0", c.hidden);
  if (c.q_lora_rank <= 0)
    return error(Errc::invalid_value, "config.q_lora_rank = {} must be > 0", c.q_lora_rank);
  if (c.kv_lora_rank != kDc)
    return error(Errc::invalid_value,
                 "config.kv_lora_rank = {} must be {} (the latent cache entry's width)",
                 c.kv_lora_rank, kDc);
  if (c.d_rope != kDr || c.rope.dim != kDr)
    return error(Errc::invalid_value,
                 "config.d_rope = {} and config.rope.dim = {} must both be {} (the cache entry's "
                 "rope width)",
                 c.d_rope, c.rope.dim, kDr);
  if (c.heads <= 0) return error(Errc::invalid_value, "config.heads = {} must be > 0", c.heads);
  if (c.d_nope <= 0 || c.d_v <= 0)
    return error(Errc::invalid_value, "config.d_nope = {} and config.d_v = {} must be > 0",
                 c.d_nope, c.d_v);
  if (!(c.norm_eps > 0) || !std::isfinite(c.norm_eps))
    return error(Errc::invalid_value, "config.norm_eps = {} must be finite and > 0", c.norm_eps);
  if (!std::isfinite(c.softmax_scale) || c.softmax_scale < 0)
    return error(Errc::invalid_value,
                 "config.softmax_scale = {} must be finite and >= 0 (0: V3.2's)", c.softmax_scale);
  return detail::validate_rope_config(c.rope, "config.rope");
}

Status validate_topk(const LayerConfig& c) {
  if (c.index_topk < kTopkGranule || c.index_topk > kTopkMax || c.index_topk % kTopkGranule != 0)
    return error(Errc::invalid_value, "config.index_topk = {} must be a multiple of {} in [{}, {}]",
                 c.index_topk, kTopkGranule, kTopkGranule, kTopkMax);
  return Status::Ok();
}

// splitmix64: a tiny, well-mixed generator whose stream is the same on every
// platform (std::uniform_real_distribution is not specified bit for bit).
struct SeededUniform {
  uint64_t state;
  double next() {  // U[-1, 1)
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return double(z >> 11) * 0x1.0p-52 - 1.0;
  }
};

}  // namespace

Status layer_weight_shapes(const LayerConfig& c, LayerWeightShape (&s)[kLayerWeightCount]) {
  MLA_TRY(validate_config(c));
  const int64_t D = c.hidden, qr = c.q_lora_rank, H = c.heads, dc = c.kv_lora_rank;
  // The config's numbers are the caller's: every derived dim and every
  // weight's element count is checked (the fields are int32, their products not).
  int64_t wq_b_rows = 0, wo_cols = 0;
  MLA_TRY(detail::checked_product({H, int64_t(c.d_nope) + c.d_rope},
                                  "config: wq_b rows heads * (d_nope + d_rope)", &wq_b_rows));
  MLA_TRY(detail::checked_product({H, c.d_v}, "config: wo columns heads * d_v", &wo_cols));
  s[0] = {"wq_a", 2, {qr, D, 0}};
  s[1] = {"q_norm", 1, {qr, 0, 0}};
  s[2] = {"wq_b", 2, {wq_b_rows, qr, 0}};
  s[3] = {"wkv_a", 2, {dc + c.d_rope, D, 0}};
  s[4] = {"kv_norm", 1, {dc, 0, 0}};
  s[5] = {"w_uk", 3, {H, c.d_nope, dc}};
  s[6] = {"w_uv", 3, {H, c.d_v, dc}};
  s[7] = {"wo", 2, {D, wo_cols, 0}};
  s[8] = {"idx_wq_b", 2, {int64_t(kIndexerHeads) * kIndexerDim, qr, 0}};
  s[9] = {"idx_wk", 2, {kIndexerDim, D, 0}};
  s[10] = {"idx_k_norm_w", 1, {kIndexerDim, 0, 0}};
  s[11] = {"idx_k_norm_b", 1, {kIndexerDim, 0, 0}};
  s[12] = {"idx_w_proj", 2, {kIndexerHeads, D, 0}};
  for (const LayerWeightShape& w : s) {
    int64_t n = 0;
    if (!detail::mul_ok(w.shape[0], w.ndim > 1 ? w.shape[1] : 1, &n) ||
        !detail::mul_ok(n, w.ndim > 2 ? w.shape[2] : 1, &n))
      return error(Errc::invalid_value,
                   "config (hidden = {}, q_lora_rank = {}, heads = {}, d_nope = {}, d_v = {}): "
                   "the element count of weights.{} {} overflows 64-bit arithmetic",
                   c.hidden, c.q_lora_rank, c.heads, c.d_nope, c.d_v, w.name,
                   fmt::format("[{}]", fmt::join(w.shape, w.shape + w.ndim, ", ")));
  }
  return Status::Ok();
}

TensorView& layer_weight(LayerWeights& w, int i) {
  TensorView* all[kLayerWeightCount] = {
      &w.wq_a, &w.q_norm,   &w.wq_b,   &w.wkv_a,        &w.kv_norm,      &w.w_uk,      &w.w_uv,
      &w.wo,   &w.idx_wq_b, &w.idx_wk, &w.idx_k_norm_w, &w.idx_k_norm_b, &w.idx_w_proj};
  return *all[i];
}
const TensorView& layer_weight(const LayerWeights& w, int i) {
  return layer_weight(const_cast<LayerWeights&>(w), i);
}

namespace {

// Checks weight i against its shape, dtype and device. Indexer weights are
// optional unless `need_indexer`.
Status check_weight(const LayerWeights& w, const LayerWeightShape& s, int i, bool need_indexer,
                    Device dev) {
  const TensorView& t = layer_weight(w, i);
  const bool indexer = i >= 8;
  if (indexer && !need_indexer && !t.defined()) return Status::Ok();
  std::string name = std::string("weights.") + s.name;
  const char* n = name.c_str();
  if (s.ndim == 1) MLA_TRY(expect_shape(t, n, {s.shape[0]}, "(see layer_weight_shapes)"));
  if (s.ndim == 2)
    MLA_TRY(expect_shape(t, n, {s.shape[0], s.shape[1]}, "(see layer_weight_shapes)"));
  if (s.ndim == 3)
    MLA_TRY(expect_shape(t, n, {s.shape[0], s.shape[1], s.shape[2]}, "(see layer_weight_shapes)"));
  MLA_TRY(detail::expect_known_device(t, n));
  if (!(t.device == dev))
    return error(Errc::invalid_device, "{} is on device ({}, {}) but hidden is on ({}, {})", n,
                 int(t.device.type), t.device.id, int(dev.type), dev.id);
  return expect_dtype(t, n, {DType::f32, DType::f64, DType::bf16});
}

Status check_forward_values(const LayerForwardArgs& a);

Status validate_forward(const LayerForwardArgs& a, const ExecContext& ctx) {
  const LayerConfig& c = a.config;
  MLA_TRY(validate_config(c));
  const bool sparse = a.attention == LayerAttention::sparse;
  if (a.attention != LayerAttention::absorbed && a.attention != LayerAttention::non_absorbed &&
      !sparse)
    return error(Errc::invalid_value,
                 "attention = {} is not absorbed (0), non_absorbed (1) or "
                 "sparse (2)",
                 int(a.attention));
  if (sparse) MLA_TRY(validate_topk(c));

  MLA_TRY(expect_shape(a.hidden, "hidden", {kAny, kAny, c.hidden}, "[B, s_q, config.hidden]"));
  MLA_TRY(detail::expect_known_device(a.hidden, "hidden"));
  const Device dev = a.hidden.device;
  const int64_t B = a.hidden.shape[0], s_q = a.hidden.shape[1];  // 0: an empty step
  MLA_TRY(expect_dtype(a.hidden, "hidden", {DType::f32, DType::f64, DType::bf16}));
  MLA_TRY(expect_shape(a.out, "out", {B, s_q, c.hidden}, "[B, s_q, config.hidden] (hidden's)"));
  MLA_TRY(expect_dtype(a.out, "out", {DType::f32, DType::f64, DType::bf16}));
  MLA_TRY(detail::expect_same_device(a.hidden, "hidden", a.out, "out"));

  LayerWeightShape shapes[kLayerWeightCount];
  MLA_TRY(layer_weight_shapes(c, shapes));
  // The indexer's weights are needed whenever its keys are computed: for the
  // sparse path, and whenever an indexer cache is given (its keys are written).
  const bool need_indexer = sparse || a.index_cache.data.defined();
  for (int i = 0; i < kLayerWeightCount; ++i)
    MLA_TRY(check_weight(a.weights, shapes[i], i, need_indexer, dev));

  MLA_TRY(detail::expect_cache_for(a.kv, "kv", "the layer"));
  MLA_TRY(detail::expect_same_device(a.hidden, "hidden", a.kv.data, "kv"));
  MLA_TRY(detail::expect_block_table(a.block_table, a.cache_seqlens, B));
  MLA_TRY(detail::expect_same_device(a.hidden, "hidden", a.block_table, "block_table"));
  MLA_TRY(detail::expect_same_device(a.hidden, "hidden", a.cache_seqlens, "cache_seqlens"));
  const bool has_index = a.index_cache.data.defined();
  if (sparse && !has_index)
    return error(Errc::invalid_value,
                 "index_cache: the sparse path needs the indexer key cache (it is not given)");
  if (has_index) {
    MLA_TRY(validate_indexer_cache(a.index_cache, "index_cache"));
    MLA_TRY(detail::expect_same_device(a.hidden, "hidden", a.index_cache.data, "index_cache"));
    if (a.kv.page_size() != IndexerCacheLayout::kPageTokens)
      return error(Errc::invalid_value,
                   "kv: page_size = {} must be {} when index_cache is given (the two caches "
                   "share block_table and slots)",
                   a.kv.page_size(), IndexerCacheLayout::kPageTokens);
  }
  // Written: out and the two caches (in place, the new tokens' entries). Read:
  // hidden, the weights, block_table, cache_seqlens. Weights are only read.
  for (int i = 0; i < kLayerWeightCount; ++i) {
    const std::string n = std::string("weights.") + shapes[i].name;
    MLA_TRY(detail::expect_disjoint(
        {{&a.out, "out"}, {&a.kv.data, "kv"}, {&a.index_cache.data, "index_cache"}},
        {{&layer_weight(a.weights, i), n.c_str()}}));
  }
  MLA_TRY(detail::expect_disjoint(
      {{&a.out, "out"}, {&a.kv.data, "kv"}, {&a.index_cache.data, "index_cache"}},
      {{&a.hidden, "hidden"},
       {&a.block_table, "block_table"},
       {&a.cache_seqlens, "cache_seqlens"}}));
  if (!detail::on_cuda(dev)) return check_forward_values(a);
  if (!ctx.check_device_values) return Status::Ok();  // the kernels guard the device values
  return detail::check_on_host(a,
                               {{&LayerForwardArgs::block_table, "block_table"},
                                {&LayerForwardArgs::cache_seqlens, "cache_seqlens"}},
                               ctx, check_forward_values);
}

// cache_seqlens and block_table values (host views): each request's length
// holds its s_q new tokens and fits its row, and every page it reads exists
// in both caches.
Status check_forward_values(const LayerForwardArgs& a) {
  const int64_t B = a.hidden.shape[0], s_q = a.hidden.shape[1];
  const bool has_index = a.index_cache.data.defined();
  const int64_t page = a.kv.page_size(), max_pages = a.block_table.shape[1];
  int64_t capacity = 0;  // dims of two views: saturate rather than wrap
  if (!detail::mul_ok(max_pages, page, &capacity)) capacity = INT64_MAX;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = reference::read_int(a.cache_seqlens, {b});
    if (len < s_q)
      return error(Errc::out_of_range,
                   "cache_seqlens[{}] = {} is less than s_q = {} (the new tokens are in the cache)",
                   b, len, s_q);
    if (len > capacity)
      return error(Errc::out_of_range,
                   "cache_seqlens[{}] = {} is past the capacity of block_table row {}: max_pages * "
                   "page_size = {}",
                   b, len, b, capacity);
    for (int64_t j = 0; j < (len + page - 1) / page; ++j) {
      const int64_t p = reference::read_int(a.block_table, {b, j});
      if (p < 0 || p >= a.kv.num_pages())
        return error(Errc::out_of_range, "block_table[{}][{}] = {} is outside kv's {} pages", b, j,
                     p, a.kv.num_pages());
      if (has_index && p >= a.index_cache.num_pages())
        return error(Errc::out_of_range,
                     "block_table[{}][{}] = {} is outside index_cache's {} pages", b, j, p,
                     a.index_cache.num_pages());
    }
  }
  return Status::Ok();
}

}  // namespace

Status init_layer_weights(const LayerConfig& c, uint64_t seed, const LayerWeights& w) {
  LayerWeightShape shapes[kLayerWeightCount];
  MLA_TRY(layer_weight_shapes(c, shapes));
  // Every weight is written: no two may share memory.
  for (int i = 0; i < kLayerWeightCount; ++i)
    for (int j = i + 1; j < kLayerWeightCount; ++j) {
      const std::string ni = std::string("weights.") + shapes[i].name,
                        nj = std::string("weights.") + shapes[j].name;
      MLA_TRY(detail::expect_disjoint(
          {{&layer_weight(w, i), ni.c_str()}, {&layer_weight(w, j), nj.c_str()}}, {}));
    }
  for (int i = 0; i < kLayerWeightCount; ++i) {
    const TensorView& t = layer_weight(w, i);
    if (!t.defined() && i >= 8) continue;  // indexer weights are optional
    const LayerWeightShape& s = shapes[i];
    std::string name = std::string("weights.") + s.name;
    if (s.ndim == 1) MLA_TRY(expect_shape(t, name.c_str(), {s.shape[0]}, "(layer_weight_shapes)"));
    if (s.ndim == 2)
      MLA_TRY(expect_shape(t, name.c_str(), {s.shape[0], s.shape[1]}, "(layer_weight_shapes)"));
    if (s.ndim == 3)
      MLA_TRY(expect_shape(t, name.c_str(), {s.shape[0], s.shape[1], s.shape[2]},
                           "(layer_weight_shapes)"));
    MLA_TRY(detail::expect_known_device(t, name.c_str()));
    if (detail::on_cuda(t.device)) return detail::no_cuda_backend("init_layer_weights");
    MLA_TRY(expect_dtype(t, name.c_str(), {DType::f32, DType::f64, DType::bf16}));
    // One stream per weight, so adding a weight never changes the others.
    SeededUniform rng{seed * 0x100000001B3ull + uint64_t(i) * 0x9E3779B97F4A7C15ull};
    if (s.ndim == 1) {
      const bool bias = i == 11;
      for (int64_t j = 0; j < s.shape[0]; ++j)
        reference::write(t, {j}, (bias ? 0.0 : 1.0) + 0.1 * rng.next());
      continue;
    }
    // The fan-in: the last dim of a Linear; for W_UK (applied to q_nope as
    // W_UK^T, and to c_kv) and W_UV (applied to c_kv) it is d_c.
    const int64_t fan_in = s.shape[s.ndim - 1];
    const double a = std::sqrt(3.0 / double(fan_in));
    if (s.ndim == 2) {
      for (int64_t o = 0; o < s.shape[0]; ++o)
        for (int64_t k = 0; k < s.shape[1]; ++k) reference::write(t, {o, k}, a * rng.next());
    } else {
      for (int64_t h = 0; h < s.shape[0]; ++h)
        for (int64_t d = 0; d < s.shape[1]; ++d)
          for (int64_t k = 0; k < s.shape[2]; ++k) reference::write(t, {h, d, k}, a * rng.next());
    }
  }
  return Status::Ok();
}

Status layer_workspace_size(const LayerForwardArgs& a, size_t* bytes) {
  if (bytes == nullptr) return error(Errc::invalid_value, "bytes: null pointer");
  MLA_TRY(validate_forward(a, ExecContext{}));
  *bytes = 0;
  if (!detail::on_cuda(a.hidden.device)) return Status::Ok();  // the reference needs no scratch
  if (a.hidden.numel() == 0) return Status::Ok();              // an empty step runs nothing
  return MLA_CUDA_BACKEND(cuda::layer_workspace_size(a, bytes), "layer_workspace_size");
}

Status layer_forward(const LayerForwardArgs& a, Workspace ws, const ExecContext& ctx) {
  MLA_TRY(validate_forward(a, ctx));
  if (a.hidden.numel() == 0) return Status::Ok();  // B = 0 or s_q = 0: nothing to compute
  if (detail::on_cuda(a.hidden.device)) {
    return MLA_CUDA_BACKEND(cuda::layer_forward(a, ws, ctx), "layer_forward");
  }
  return reference::layer_forward(a);
}

}  // namespace mla
