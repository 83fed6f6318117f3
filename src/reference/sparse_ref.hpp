// CPU reference of sparse absorbed attention (mla/sparse.hpp): gather the listed
// entries, then the same exact softmax attention as dense decode (attend_row).
#pragma once
#include "mla/sparse.hpp"

namespace mla::reference {

Status sparse_decode(const SparseDecodeArgs& args);
Status sparse_prefill(const SparsePrefillArgs& args);

}  // namespace mla::reference
