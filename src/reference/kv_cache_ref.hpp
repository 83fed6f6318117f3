// CPU reference of the paged latent cache (docs/design.md section 2): where a slot's
// entry lives, how one entry is read as 576 values, and append/read.
//
// Every reference op that reads the cache (dense decode, sparse decode,
// block-sparse selection) goes through load_kv_entry, so the two entry formats
// are decoded in exactly one place.
#pragma once
#include <cstdint>

#include "mla/kv_cache.hpp"

namespace mla::reference {

// Address of the entry at global slot `slot` = page * page_size + offset.
// The caller has checked 0 <= slot < num_pages * page_size. Page strides may be
// padded: the address uses stride(0) and stride(1), not page_size * entry.
const uint8_t* kv_entry_ptr(const KvCacheView& cache, int64_t slot);
uint8_t* kv_entry_ptr_mut(const KvCacheView& cache, int64_t slot);

// fp8_e4m3: the cache's per-tensor scale (a CPU cache, validated).
float fp8_e4m3_scale(const KvCacheView& cache);

// The entry as 576 values [c_kv 512 ; k_rope 64], dequantised exactly (every
// stored value is representable in double: bf16, e4m3 times a power of two, or
// e4m3 times a float: 4 + 24 significant bits).
void load_kv_entry(const KvCacheView& cache, int64_t slot, double* out576);
void load_kv_entry(const KvCacheView& cache, int64_t slot, float* out576);  // exact too

// Writes one token: rounds to bf16 (bf16 cache) or quantises (fp8 caches).
void store_kv_entry(const KvCacheView& cache, int64_t slot, const float* c_kv512,
                    const float* k_rope64);

// The CPU backends of append_kv / read_kv (arguments already validated).
Status append_kv(const AppendKvArgs& args);
Status read_kv(const ReadKvArgs& args);

}  // namespace mla::reference
