// CPU reference of sparse absorbed attention (mla/sparse.hpp): gather the listed
// entries, then the same exact softmax attention as dense decode (attend_row).
#pragma once
#include "mla/kv_cache.hpp"
#include "mla/sparse.hpp"

namespace mla::reference {

// Prefill's flat fp8_ds_mla rows [s_kv, 656] as a cache of pages of one token
// (slot = row), so that entries are decoded by load_kv_entry like the cache's.
inline KvCacheView prefill_fp8_cache(const TensorView& kv) {
  KvCacheView c;
  c.format = KvFormat::fp8_ds_mla;
  c.data = kv;
  c.data.ndim = 4;
  c.data.shape[1] = c.data.shape[2] = 1, c.data.shape[3] = kv.shape[1];
  c.data.strides[1] = c.data.strides[2] = kv.shape[1], c.data.strides[3] = 1;
  return c;
}

Status sparse_decode(const SparseDecodeArgs& args);
Status sparse_prefill(const SparsePrefillArgs& args);

}  // namespace mla::reference
