// Capability probe: can this build run an operation family on a device? An
// engine asks before choosing mla (and picks another backend, with the reason,
// when the answer is no).
#pragma once
#include <string>

namespace mla {

// Operation families, each served by one set of CUDA kernels (values are the C
// ABI's MLA_FAMILY_*).
enum class OpFamily : int {
  decode = 0,          // mla_decode (dense, paged latent cache)
  sparse_decode = 1,   // sparse_decode
  sparse_prefill = 2,  // sparse_prefill
  indexer = 3,         // indexer keys, query quantisation, logits
  topk = 4,            // topk_indices
  prefill = 5,         // mha_prefill, decompress_kv
  kv_cache = 6,        // append_kv
};
inline constexpr int kNumOpFamilies = 7;

struct Support {
  bool supported = false;
  std::string reason;  // why not (empty when supported)
};

// Whether `family` can run on cuda:device_id (device_id >= 0) or on the CPU
// reference (device_id < 0: always). Asks the CUDA runtime once per call; no
// error escapes (a runtime failure is a "no" with its reason).
Support is_supported(OpFamily family, int device_id);

// "decode", "sparse_decode", ...; nullptr for a value outside the enum.
const char* op_family_name(OpFamily family);

}  // namespace mla
