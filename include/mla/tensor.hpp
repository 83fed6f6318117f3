// Non-owning tensor views: the one way data crosses the API. Callers (engines,
// PyTorch via DLPack) own every buffer; we only describe them.
//
// What every entry point checks of every view, before it allocates, launches
// or reads anything (errors name the argument and echo the value as given):
//  - Sizes: the element count, the element offsets (shape - 1) * stride and
//    the byte extent are computed in 64 bits with overflow checks; a view
//    whose numbers leave int64 (or whose addresses wrap) is invalid_shape.
//    Sizes an op derives from scalars (max_seqlen, config dims, page counts)
//    are checked the same way (invalid_value).
//  - Empty views: a dim of 0 (B = 0, s_q = 0, T = 0, R = 0, N = 0) is valid;
//    its strides are not looked at (NumPy gives empty arrays zero strides) and
//    its data pointer may be null. An op whose outputs are empty is a no-op
//    (no launch, no scratch: workspace sizes are 0); an op with non-empty
//    outputs over empty inputs writes what its header says (e.g. -1 index
//    lists, out 0 and lse -inf for rows that see no key).
//  - Outputs: an output view may not address one element twice (a stride of 0
//    over a dim of size > 1, or interleaving strides: invalid_stride), and its
//    byte range [first byte, last byte] may not intersect that of an input or
//    another output (invalid_value), unless the op's header allows a named
//    alias (apply_rope: out == x). Caches an op updates in place count as
//    outputs. Views on different devices never overlap.
//  - Inputs are only read: nothing requires an input buffer to be writable
//    (read-only NumPy arrays, DLPack read-only tensors).
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace mla {

enum class DType : int32_t {
  f32 = 0,
  f64 = 1,
  bf16 = 2,
  f16 = 3,
  e4m3 = 4,  // float8_e4m3fn
  u8 = 5,    // raw bytes (the 656-byte fp8 cache entry, the indexer page)
  i32 = 6,
  i64 = 7,
};

constexpr int dtype_size(DType t) noexcept {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::e4m3: return 1;
    case DType::u8: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}
const char* dtype_name(DType t) noexcept;

// Values follow DLPack's device codes so the C ABI can pass them through.
enum class DeviceType : int32_t { cpu = 1, cuda = 2 };

struct Device {
  DeviceType type = DeviceType::cpu;
  int32_t id = 0;
  static constexpr Device cpu() { return {DeviceType::cpu, 0}; }
  static constexpr Device cuda(int32_t i = 0) { return {DeviceType::cuda, i}; }
  friend constexpr bool operator==(Device a, Device b) { return a.type == b.type && a.id == b.id; }
};

inline constexpr int kMaxDims = 6;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int32_t ndim = -1;  // -1: "not given" (an optional argument left out)
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements, not bytes (DLPack's convention)

  // A contiguous row-major view.
  static TensorView make(void* data, DType dtype, std::initializer_list<int64_t> shape,
                         Device device = Device::cpu());

  bool defined() const noexcept { return ndim >= 0; }
  // Element count: 0 when undefined or a dim is 0; saturates at INT64_MAX (the
  // checks reject such views before anything reads them).
  int64_t numel() const noexcept;
  int64_t size(int d) const noexcept { return shape[d < 0 ? d + ndim : d]; }
  int64_t stride(int d) const noexcept { return strides[d < 0 ? d + ndim : d]; }
  bool is_contiguous() const noexcept;
  template <class T>
  T* ptr() const noexcept {
    return static_cast<T*>(data);
  }
  // Element offset of a multi-index (64-bit: long contexts pass 2^31 elements).
  int64_t offset(std::initializer_list<int64_t> idx) const noexcept {
    int64_t o = 0;
    int d = 0;
    for (int64_t i : idx) o += i * strides[d++];
    return o;
  }
};

// Caller-owned scratch memory. Engines manage memory themselves: every call that
// needs scratch says how much (a *_workspace_size function) and takes it here.
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

// Where and how to run: the CUDA stream (cudaStream_t as void*) for CUDA tensors.
struct ExecContext {
  void* stream = nullptr;
  // Checked mode, for finding an engine's bug: the index tensors an op reads
  // on the device (block tables, lengths, slots, index lists; small) are
  // copied to the host on `stream`, the stream is synchronised, and the CPU
  // path's value checks run on them before the launch. A page id, length,
  // slot or index the kernel would guard (NaN rows, a skipped token, "no
  // token") is then an out_of_range error naming it. Costs a copy and a sync
  // per call; CPU tensors are always checked.
  bool check_device_values = false;
};

}  // namespace mla
