// CPU reference of the non-absorbed MLA form (include/mla/prefill.hpp), fp64.
#pragma once
#include "mla/prefill.hpp"

namespace mla::reference {

// CPU backends (arguments validated, CPU tensors).
Status decompress_kv(const DecompressKvArgs& args);
Status mha_prefill(const MhaPrefillArgs& args);

}  // namespace mla::reference
