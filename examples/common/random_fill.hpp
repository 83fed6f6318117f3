// Random input data of the examples, made on the host and uploaded: counter
// based (splitmix64 of the seed and the index), so a buffer is reproducible,
// and never zeros (zeros run faster than real data on tensor cores). The
// threads of the machine generate slices of 16 MiB in turn. The fills end with
// a device synchronisation: a copy from pageable memory may still be in flight
// when cudaMemcpy returns, and the examples read the data on non-blocking streams.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "mla/kv_cache.hpp"

namespace mla::examples {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline float unit_float(uint64_t h) {
  return float(h >> 40) * (1.f / 16777216.f);
}
inline uint16_t bf16_bits(float f) {  // round to nearest even (inputs are finite)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// gen(i, out) writes item i (item_bytes bytes) at out, for i in [begin, end), on every thread.
template <class Gen>
void generate(int64_t begin, int64_t end, int64_t item_bytes, uint8_t* out, Gen&& gen) {
  const int64_t n = end - begin;
  const int threads = int(std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int64_t i = n * t / threads; i < n * (t + 1) / threads; ++i)
        gen(begin + i, out + i * item_bytes);
    });
  for (auto& th : pool) th.join();
}

// n bf16 values uniform in [lo, hi).
inline cudaError_t fill_uniform_bf16(void* dst, int64_t n, float lo, float hi, uint64_t seed) {
  constexpr int64_t kSlice = int64_t(8) << 20;
  std::vector<uint8_t> host(size_t(std::min(n, kSlice)) * 2);
  for (int64_t s = 0; s < n; s += kSlice) {
    const int64_t e = std::min(n, s + kSlice);
    generate(s, e, 2, host.data(), [&](int64_t i, uint8_t* out) {
      const float v = lo + (hi - lo) * unit_float(splitmix64(seed ^ (uint64_t(i) * 0x632be5ab)));
      const uint16_t b = bf16_bits(v);
      std::memcpy(out, &b, 2);
    });
    const cudaError_t err = cudaMemcpy(static_cast<uint8_t*>(dst) + s * 2, host.data(),
                                       size_t(e - s) * 2, cudaMemcpyHostToDevice);
    if (err != cudaSuccess) return err;
  }
  return cudaDeviceSynchronize();
}

// n fp8_ds_mla entries, `stride` bytes apart: finite e4m3 codes, power-of-two
// scales 2^-8..2^-2, bf16 rope in [-1, 1) (mla/kv_cache.hpp's layout).
inline cudaError_t fill_fp8_ds_mla(void* dst, int64_t n, int64_t stride, uint64_t seed) {
  using L = Fp8DsMlaLayout;
  constexpr int64_t kSlice = int64_t(16) << 10;  // 16K entries (~10 MiB)
  std::vector<uint8_t> host(size_t(std::min(n, kSlice)) * L::kEntryBytes);
  for (int64_t s = 0; s < n; s += kSlice) {
    const int64_t e = std::min(n, s + kSlice);
    generate(s, e, L::kEntryBytes, host.data(), [&](int64_t i, uint8_t* out) {
      for (int w = 0; w < L::kEntryBytes / 4; ++w) {
        const uint64_t h = splitmix64(seed ^ (uint64_t(i * (L::kEntryBytes / 4) + w) * 0x632be5ab));
        uint32_t v = uint32_t(h);
        if (4 * w < L::kScaleOffset) {  // e4m3 codes, NaN (0x7f / 0xff) replaced
          for (int b = 0; b < 4; ++b)
            if (((v >> (8 * b)) & 0x7f) == 0x7f) v ^= 1u << (8 * b);
        } else if (4 * w < L::kRopeOffset) {  // a scale
          const float sc = std::ldexp(1.f, -8 + int(h % 7));
          std::memcpy(&v, &sc, 4);
        } else {  // two bf16 rope values
          v = uint32_t(bf16_bits(2.f * unit_float(h) - 1.f)) |
              uint32_t(bf16_bits(2.f * unit_float(h << 20) - 1.f)) << 16;
        }
        std::memcpy(out + 4 * w, &v, 4);
      }
    });
    const cudaError_t err =
        cudaMemcpy2D(static_cast<uint8_t*>(dst) + s * stride, size_t(stride), host.data(),
                     L::kEntryBytes, L::kEntryBytes, size_t(e - s), cudaMemcpyHostToDevice);
    if (err != cudaSuccess) return err;
  }
  return cudaDeviceSynchronize();
}

}  // namespace mla::examples
