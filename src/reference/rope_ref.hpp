// CPU reference of RoPE with YaRN frequencies (include/mla/rope.hpp), in fp64
// (the frequencies: common/rope_freq.hpp).
#pragma once
#include "mla/rope.hpp"

namespace mla::reference {

// CPU backend of apply_rope (arguments validated, CPU tensors).
Status apply_rope(const ApplyRopeArgs& args);

}  // namespace mla::reference
