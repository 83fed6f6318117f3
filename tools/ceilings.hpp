// The ceilings `mla bench` takes fractions of, measured on this machine at the start of a
// run rather than copied from a datasheet: a device-to-device copy (HBM bandwidth) and a
// cuBLAS bf16 GEMM (tensor-core FLOP/s).
#pragma once
#include <string>

#include "bench_suites.hpp"

namespace mla::cli {

// Fills the ceilings not already set (> 0) in `c` by measuring them on GPU 0 and says how
// in `how`. Returns false (and why, in `how`) when there is no CUDA GPU.
bool measure_ceilings(BenchCeilings* c, std::string* how);

}  // namespace mla::cli
