// C ABI of the whole attention layer (mla/layer.hpp).
#include "capi/capi_common.hpp"
#include "capi/capi_rope.hpp"
#include "mla/layer.hpp"

using namespace mla;
using namespace mla::capi;

static_assert(MLA_LAYER_ABSORBED == int(LayerAttention::absorbed) &&
                  MLA_LAYER_NON_ABSORBED == int(LayerAttention::non_absorbed) &&
                  MLA_LAYER_SPARSE == int(LayerAttention::sparse),
              "MLA_LAYER_* must equal mla::LayerAttention values");
static_assert(MLA_LAYER_WEIGHT_COUNT == kLayerWeightCount,
              "the C weight array holds every mla::LayerWeights view");

namespace {

mla_layer_config to_c(const LayerConfig& c) {
  return mla_layer_config{c.hidden, c.q_lora_rank, c.kv_lora_rank,  c.heads,
                          c.d_nope, c.d_rope,      c.d_v,           c.index_topk,
                          0,        c.norm_eps,    c.softmax_scale, rope_to_c(c.rope)};
}

Status to_config(const mla_layer_config* c, LayerConfig* out) {
  MLA_TRY(expect_pointer(c, "config"));
  out->hidden = c->hidden;
  out->q_lora_rank = c->q_lora_rank;
  out->kv_lora_rank = c->kv_lora_rank;
  out->heads = c->heads;
  out->d_nope = c->d_nope;
  out->d_rope = c->d_rope;
  out->d_v = c->d_v;
  out->index_topk = c->index_topk;
  out->norm_eps = c->norm_eps;
  out->softmax_scale = c->softmax_scale;
  out->rope = rope_from_c(c->rope);
  return Status::Ok();
}

Status to_weights(const mla_tensor* const* w, LayerWeights* out) {
  MLA_TRY(expect_pointer(w, "weights"));
  LayerWeightShape shapes[kLayerWeightCount];
  MLA_TRY(layer_weight_shapes(LayerConfig{}, shapes));  // names only
  for (int i = 0; i < kLayerWeightCount; ++i) {
    const std::string name = std::string("weights.") + shapes[i].name;
    MLA_TRY(to_view(w[i], name.c_str(), &layer_weight(*out, i)));
  }
  return Status::Ok();
}

}  // namespace

extern "C" {

void mla_layer_default_config(mla_layer_config* c) {
  if (c != nullptr) *c = to_c(deepseek_v32_layer());
}

void mla_layer_small_test_config(mla_layer_config* c) {
  if (c != nullptr) *c = to_c(small_test_layer());
}

int32_t mla_layer_softmax_scale(const mla_layer_config* config, double* scale) {
  return guarded([&] {
    LayerConfig c;
    MLA_TRY(to_config(config, &c));
    MLA_TRY(expect_pointer(scale, "scale"));
    *scale = layer_softmax_scale(c);
    return Status::Ok();
  });
}

int32_t mla_layer_weight_shape(const mla_layer_config* config, int32_t i, const char** name,
                               int32_t* ndim, int64_t* shape) {
  return guarded([&] {
    LayerConfig c;
    MLA_TRY(to_config(config, &c));
    MLA_TRY(expect_pointer(name, "name"));
    MLA_TRY(expect_pointer(ndim, "ndim"));
    MLA_TRY(expect_pointer(shape, "shape"));
    if (i < 0 || i >= kLayerWeightCount)
      return Status(Errc::out_of_range, "i = " + std::to_string(i) + " is outside [0, " +
                                            std::to_string(kLayerWeightCount) + ")");
    LayerWeightShape s[kLayerWeightCount];
    MLA_TRY(layer_weight_shapes(c, s));
    *name = s[i].name;
    *ndim = s[i].ndim;
    for (int d = 0; d < 3; ++d) shape[d] = d < s[i].ndim ? s[i].shape[d] : 0;
    return Status::Ok();
  });
}

int32_t mla_layer_init_weights(const mla_layer_config* config, uint64_t seed,
                               const mla_tensor* const* weights) {
  return guarded([&] {
    LayerConfig c;
    LayerWeights w;
    MLA_TRY(to_config(config, &c));
    MLA_TRY(to_weights(weights, &w));
    return init_layer_weights(c, seed, w);
  });
}

static Status to_forward_args(const mla_layer_config* config, const mla_tensor* const* weights,
                              const mla_tensor* hidden, const mla_tensor* kv, int32_t kv_format,
                              const mla_tensor* index_cache, const mla_tensor* block_table,
                              const mla_tensor* cache_seqlens, int32_t attention,
                              const mla_tensor* out, LayerForwardArgs* a) {
  MLA_TRY(to_config(config, &a->config));
  MLA_TRY(to_weights(weights, &a->weights));
  MLA_TRY(to_view(hidden, "hidden", &a->hidden));
  MLA_TRY(to_cache(kv, kv_format, "kv", &a->kv));
  MLA_TRY(to_view(index_cache, "index_cache", &a->index_cache.data));
  MLA_TRY(to_views({MLA_VIEW(*a, block_table), MLA_VIEW(*a, cache_seqlens), MLA_VIEW(*a, out)}));
  a->attention = LayerAttention(attention);  // range-checked by layer_forward
  return Status::Ok();
}

int32_t mla_layer_workspace_size(const mla_layer_config* config, const mla_tensor* const* weights,
                                 const mla_tensor* hidden, const mla_tensor* kv, int32_t kv_format,
                                 const mla_tensor* index_cache, const mla_tensor* block_table,
                                 const mla_tensor* cache_seqlens, int32_t attention,
                                 const mla_tensor* out, size_t* bytes) {
  return guarded([&] {
    LayerForwardArgs a;
    MLA_TRY(to_forward_args(config, weights, hidden, kv, kv_format, index_cache, block_table,
                            cache_seqlens, attention, out, &a));
    MLA_TRY(expect_pointer(bytes, "bytes"));
    return layer_workspace_size(a, bytes);
  });
}

int32_t mla_layer_forward(const mla_layer_config* config, const mla_tensor* const* weights,
                          const mla_tensor* hidden, const mla_tensor* kv, int32_t kv_format,
                          const mla_tensor* index_cache, const mla_tensor* block_table,
                          const mla_tensor* cache_seqlens, int32_t attention, const mla_tensor* out,
                          void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    LayerForwardArgs a;
    MLA_TRY(to_forward_args(config, weights, hidden, kv, kv_format, index_cache, block_table,
                            cache_seqlens, attention, out, &a));
    return layer_forward(a, Workspace{workspace, workspace_bytes}, to_context(stream));
  });
}

}  // extern "C"
