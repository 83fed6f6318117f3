// CPU reference of RoPE with YaRN frequencies (include/mla/rope.hpp), in fp64.
#pragma once
#include <vector>

#include "mla/rope.hpp"

namespace mla::reference {

// The YaRN-corrected inverse frequencies, dim/2 of them (config validated).
std::vector<double> yarn_inv_freq(const RopeConfig& config);

// CPU backend of apply_rope (arguments validated, CPU tensors).
Status apply_rope(const ApplyRopeArgs& args);

}  // namespace mla::reference
