// C ABI of the rotary position embedding (mla/rope.hpp).
#include "capi/capi_common.hpp"
#include "capi/capi_rope.hpp"
#include "mla/rope.hpp"

using namespace mla;
using namespace mla::capi;

static_assert(MLA_ROPE_INTERLEAVED == int(RopeLayout::interleaved) &&
                  MLA_ROPE_HALF_SPLIT == int(RopeLayout::half_split),
              "MLA_ROPE_* must equal mla::RopeLayout values");

namespace {

Status to_rope_config(const mla_rope_config* c, RopeConfig* out) {
  if (c == nullptr) {
    *out = deepseek_v3_rope();
    return Status::Ok();
  }
  *out = rope_from_c(*c);
  return Status::Ok();
}

}  // namespace

extern "C" {

void mla_rope_default_config(mla_rope_config* c) {
  if (c == nullptr) return;
  *c = rope_to_c(deepseek_v3_rope());
}

int32_t mla_rope_inv_freq(const mla_rope_config* config, const mla_tensor* inv_freq) {
  return guarded([&] {
    RopeConfig c;
    TensorView t;
    MLA_TRY(to_rope_config(config, &c));
    MLA_TRY(to_view(inv_freq, "inv_freq", &t));
    return rope_inv_freq(c, t);
  });
}

int32_t mla_rope_attention_factor(const mla_rope_config* config, double* factor) {
  return guarded([&] {
    RopeConfig c;
    MLA_TRY(to_rope_config(config, &c));
    if (factor == nullptr) return Status(Errc::invalid_value, "factor: null pointer");
    *factor = rope_attention_factor(c);
    return Status::Ok();
  });
}

int32_t mla_apply_rope(const mla_tensor* x, const mla_tensor* positions, const mla_tensor* out,
                       const mla_rope_config* config, int32_t layout, void* stream) {
  return guarded([&] {
    ApplyRopeArgs a;
    MLA_TRY(to_views({MLA_VIEW(a, x), MLA_VIEW(a, positions), MLA_VIEW(a, out)}));
    MLA_TRY(to_rope_config(config, &a.config));
    if (layout != MLA_ROPE_INTERLEAVED && layout != MLA_ROPE_HALF_SPLIT)
      return Status(Errc::invalid_value, "layout = " + std::to_string(layout) +
                                             " is neither interleaved (0) nor half_split (1)");
    a.layout = RopeLayout(layout);
    return apply_rope(a, to_context(stream));
  });
}

}  // extern "C"
