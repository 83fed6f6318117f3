// Non-owning tensor views: the one way data crosses the API. Callers (engines,
// PyTorch via DLPack) own every buffer; we only describe them.
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
};

}  // namespace mla
