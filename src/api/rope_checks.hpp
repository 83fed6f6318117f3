// The RoPE config's checks, shared by the rope entry points and by the layer
// (whose config holds one): `prefix` names the config in the messages
// ("config" for apply_rope, "config.rope" for the layer).
#pragma once
#include "mla/rope.hpp"
#include "mla/status.hpp"

namespace mla::detail {

Status validate_rope_config(const RopeConfig& c, const char* prefix);

}  // namespace mla::detail
