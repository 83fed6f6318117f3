// The paged latent cache and its two entry formats (docs/design.md section 2), and
// the operations that write and read it.
#pragma once
#include <cstdint>

#include "mla/dims.hpp"
#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla {

enum class KvFormat : int32_t {
  bf16 = 0,        // 576 bf16 per token: [c_kv 512 ; k_rope 64], 1152 B
  fp8_ds_mla = 1,  // FlashMLA's V3.2 entry, 656 B (layout below)
  fp8_e4m3 = 2,    // vLLM's kv_cache_dtype "fp8"/"fp8_e4m3": 576 e4m3 per token, 576 B,
                   // one per-tensor scale (KvCacheView::scale; layout below)
};

// fp8_ds_mla entry layout, bytes:
//   [0, 512)    c_kv as e4m3, one scale per 128 values
//   [512, 528)  four fp32 scales (powers of two)
//   [528, 656)  k_rope as 64 bf16 (not quantised: rope carries position, keep it exact-ish)
struct Fp8DsMlaLayout {
  static constexpr int kNopeBytes = kDc;                             // 512
  static constexpr int kGroup = 128;                                 // values per scale
  static constexpr int kNumScales = kDc / kGroup;                    // 4
  static constexpr int kScaleOffset = kNopeBytes;                    // 512
  static constexpr int kRopeOffset = kScaleOffset + 4 * kNumScales;  // 528
  static constexpr int kEntryBytes = kRopeOffset + 2 * kDr;          // 656
};
static_assert(Fp8DsMlaLayout::kEntryBytes == 656, "fp8_ds_mla entry is 656 bytes");
inline constexpr int kBf16EntryBytes = 2 * kDqk;  // 1152

// fp8_e4m3 entry: [c_kv 512 ; k_rope 64] as 576 e4m3 codes, nothing else. The
// cache has one fp32 scale s for every value of every entry (vLLM's k_scale):
// stored code = e4m3(clamp(v / s, -448, 448)), RNE, satfinite (+-inf -> +-448,
// NaN -> 0x7f); read back as code * s. Unlike fp8_ds_mla the rope is
// quantised too, and s is chosen by the engine (calibrated or 1), not per token.
inline constexpr int kFp8E4m3EntryBytes = kDqk;  // 576

constexpr int kv_entry_bytes(KvFormat f) {
  return f == KvFormat::bf16         ? kBf16EntryBytes
         : f == KvFormat::fp8_ds_mla ? Fp8DsMlaLayout::kEntryBytes
                                     : kFp8E4m3EntryBytes;
}
// Whether the cache stores e4m3 codes (the formats after bf16).
constexpr bool kv_format_is_fp8(KvFormat f) {
  return f != KvFormat::bf16;
}
const char* kv_format_name(KvFormat f) noexcept;

// A paged cache: data is [num_pages, page_size, 1, 576] bf16 for KvFormat::bf16,
// [num_pages, page_size, 1, 656] u8 for fp8_ds_mla, [num_pages, page_size, 1,
// 576] u8 or e4m3 for fp8_e4m3. Pages may be padded (stride(0) > page_size *
// entry); the token and head dims must be dense.
// scale: fp8_e4m3 only (required there, empty otherwise): the per-tensor scale
// as a [1] (or [], or [1, 1]: one element) f32 tensor on the cache's device,
// so an engine's device-side k_scale is passed as it is (its value is never
// read on the host for a CUDA cache). A finite scale > 0 is the caller's
// contract; the CPU paths check it (invalid_value).
struct KvCacheView {
  TensorView data;
  KvFormat format = KvFormat::bf16;
  TensorView scale;
  int64_t num_pages() const { return data.shape[0]; }
  int64_t page_size() const { return data.shape[1]; }
};

// Checks a cache view: rank, dtype matching the format, entry width, strides.
Status validate_kv_cache(const KvCacheView& cache, const char* name);

// Write T new tokens into the cache at global slots (page * page_size + offset).
//   c_kv   [T, 512]  f32 or bf16
//   k_rope [T, 64]   f32 or bf16
//   slots  [T]       i64; -1 means "skip this token" (padding in the batch)
// bf16 cache: values rounded to bf16. fp8 cache: quantised as docs/design.md section 2 says.
// Non-finite values: a bf16 cache stores NaN and +-inf as they are. The fp8
// cache's group scale comes from the group's finite values only, so one inf
// or NaN never changes its 127 neighbours; +-inf is stored saturated as
// +-448 * scale, NaN as the e4m3 NaN code (dequantised: NaN); k_rope is bf16,
// NaN and +-inf kept. Attention over such an entry: mla/decode.hpp.
// T = 0 is a no-op. The cache is written in place and may not overlap c_kv,
// k_rope or slots. CPU tensors: a slot outside [-1, num_pages * page_size) is
// out_of_range. CUDA tensors (the host cannot read them; the checked mode,
// ExecContext::check_device_values, checks them): such a token is skipped.
struct AppendKvArgs {
  TensorView c_kv;
  TensorView k_rope;
  TensorView slots;
  KvCacheView cache;
};
Status append_kv(const AppendKvArgs& args, const ExecContext& ctx = {});

// Read T tokens back (dequantised) as f32: c_kv [T, 512], k_rope [T, 64].
// The cache is only read (a read-only buffer is fine). No CUDA backend (CPU
// tensors only). c_kv and k_rope may not overlap the cache or each other.
struct ReadKvArgs {
  KvCacheView cache;
  TensorView slots;   // [T] i64, every slot must be valid
  TensorView c_kv;    // out [T, 512] f32
  TensorView k_rope;  // out [T, 64] f32
};
Status read_kv(const ReadKvArgs& args, const ExecContext& ctx = {});

}  // namespace mla
