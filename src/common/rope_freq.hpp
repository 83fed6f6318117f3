// The YaRN-corrected RoPE inverse frequencies (include/mla/rope.hpp), in fp64:
// the one table the CPU reference and the CUDA layer both rotate with.
#pragma once
#include <vector>

#include "mla/rope.hpp"

namespace mla::detail {

// dim/2 frequencies for a validated config.
std::vector<double> yarn_inv_freq(const RopeConfig& config);

}  // namespace mla::detail
