// Device buffers for the GPU tests: RAII cudaMalloc, host<->device copies,
// poisoning with 0xff bytes (NaN in every float type) before a run.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace mla::testing {

#define MLA_CUDA_CHECK(expr)                                                          \
  do {                                                                                \
    cudaError_t e_ = (expr);                                                          \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_);            \
  } while (0)

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ && cudaMalloc(&ptr_, bytes_) != cudaSuccess) ptr_ = nullptr;
  }
  DeviceBuffer(const void* host, size_t bytes) : DeviceBuffer(bytes) {
    if (ptr_) cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice);
  }
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

 private:
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
