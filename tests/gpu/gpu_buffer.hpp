// Device buffers and assertion macros for the GPU tests: RAII cudaMalloc,
// host<->device copies, device mirrors of HostTensors, poisoning with 0xff
// bytes (NaN in every float type) before a run.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/random.hpp"
#include "mla/status.hpp"

namespace mla::testing {

#define MLA_CUDA_CHECK(expr)                                               \
  do {                                                                     \
    cudaError_t e_ = (expr);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

#define ASSERT_MLA_OK(expr)                 \
  do {                                      \
    ::mla::Status s_ = (expr);              \
    ASSERT_TRUE(s_.ok()) << s_.to_string(); \
  } while (0)

class DeviceBuffer {
 public:
  // What a zero-byte buffer holds. kNull: nothing is allocated and get() is
  // null. kAllocate: a 16-byte allocation, so that an empty tensor still has a
  // device address (the launchers check data pointers before sizes; tests of
  // length-0 inputs need that). Mirrors of HostTensors always use kAllocate.
  enum class Empty { kNull, kAllocate };

  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, Empty empty = Empty::kNull) : bytes_(bytes) {
    const size_t alloc = empty == Empty::kAllocate ? std::max<size_t>(bytes_, 16) : bytes_;
    if (alloc && cudaMalloc(&ptr_, alloc) != cudaSuccess) ptr_ = nullptr;
  }
  DeviceBuffer(const void* host, size_t bytes, Empty empty = Empty::kNull)
      : DeviceBuffer(bytes, empty) {
    if (ptr_ && bytes_) cudaMemcpy(ptr_, host, bytes_, cudaMemcpyHostToDevice);
  }
  // Device mirror of a HostTensor: same shape, dense, the same bytes.
  explicit DeviceBuffer(const HostTensor& t)
      : DeviceBuffer(t.storage.data(), tensor_bytes(t), Empty::kAllocate) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void poison() const {
    if (ptr_) cudaMemset(ptr_, 0xff, bytes_);
  }
  template <class T>
  std::vector<T> download(size_t n) const {
    std::vector<T> v(n);
    cudaMemcpy(v.data(), ptr_, n * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }
  void upload(const void* host, size_t bytes) const {
    cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice);
  }
  // Copies the buffer back into `t` (t's bytes, at most the buffer's).
  void to_host(HostTensor& t) const {
    const size_t n = std::min(bytes_, tensor_bytes(t));
    if (ptr_ && n) cudaMemcpy(t.storage.data(), ptr_, n, cudaMemcpyDeviceToHost);
  }
  // `like`'s view (shape, dtype, dense strides) on this buffer's device memory.
  TensorView view(const HostTensor& like) const {
    TensorView v = like.view(Device::cuda(0));
    v.data = ptr_;
    return v;
  }

 private:
  static size_t tensor_bytes(const HostTensor& t) {
    return size_t(t.numel()) * dtype_size(t.dtype);
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// The same view, pointing at device memory.
inline TensorView on_device(TensorView t, const DeviceBuffer& buf) {
  t.data = buf.get();
  t.device = Device::cuda(0);
  return t;
}

}  // namespace mla::testing
