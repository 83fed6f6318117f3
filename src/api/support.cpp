// Capability probe (mla/support.hpp): the CPU reference runs everything; a CUDA
// device needs a build with the kernels and a device they were compiled for.
#include "mla/support.hpp"

#ifdef MLA_HAS_CUDA
#include "cuda/common/device_support.hpp"
#endif

namespace mla {

const char* op_family_name(OpFamily family) {
  switch (family) {
    case OpFamily::decode: return "decode";
    case OpFamily::sparse_decode: return "sparse_decode";
    case OpFamily::sparse_prefill: return "sparse_prefill";
    case OpFamily::indexer: return "indexer";
    case OpFamily::topk: return "topk";
    case OpFamily::prefill: return "prefill";
    case OpFamily::kv_cache: return "kv_cache";
  }
  return nullptr;
}

Support is_supported(OpFamily family, int device_id) {
  if (op_family_name(family) == nullptr) return {false, "unknown operation family"};
  if (device_id < 0) return {true, ""};  // the CPU reference
#ifdef MLA_HAS_CUDA
  // Every family's kernels are compiled for the same target, so the device
  // decides for all of them alike.
  return cuda::device_support(device_id);
#else
  return {false, "this libmla was built without the CUDA kernels (nvcc was not found)"};
#endif
}

}  // namespace mla
