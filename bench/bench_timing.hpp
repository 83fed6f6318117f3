// The CUDA-event timing loop of every benchmark (bench/, tools/ `mla bench`):
// `warmup` calls, then `reps` calls each between two events on the default
// stream. With `flush_l2`, the L2 is evicted before every call (outside the
// events), so that each timed call reads its inputs from memory. In CUDA
// translation units the flush reads a 256 MB buffer: a memset would leave up
// to the L2's size in dirty lines, written back to memory during the timed
// call (it inflated read-bound timings by ~25%). Host-compiled ones (no
// kernels) keep the memset.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "bench_check.hpp"

struct BenchTime {
  double median_us = 0, min_us = 0;
  double p10_us = 0, p90_us = 0;  // 10th and 90th percentiles
};

struct BenchTiming {
  int reps = 15;
  int warmup = 3;
  bool flush_l2 = false;
};

// The L2-evicting buffer, allocated on first use and kept for the process.
inline void* bench_flush_buffer(size_t* bytes) {
  static constexpr size_t kBytes = size_t(256) << 20;
  static void* buf = [] {
    void* p = nullptr;
    BENCH_CUDA(cudaMalloc(&p, kBytes));
    return p;
  }();
  *bytes = kBytes;
  return buf;
}

#ifdef __CUDACC__
// Reads n 16-byte words; writes nothing unless the sum is the impossible value
// (the buffer is zero), so the compiler keeps the loads.
template <int = 0>
__global__ void bench_l2_read(const int4* p, size_t n, int* sink) {
  int acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const int4 v = p[i];
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 0x7fffffff) *sink = acc;
}
#endif

// Evicts the L2 (see the header comment).
inline void bench_flush_l2(void* buf, size_t bytes, int salt) {
#ifdef __CUDACC__
  (void)salt;
  static int* sink = [] {
    int* p = nullptr;
    BENCH_CUDA(cudaMalloc(&p, sizeof(int)));
    return p;
  }();
  static const bool zeroed = [&] {
    BENCH_CUDA(cudaMemset(buf, 0, bytes));  // its dirty lines go out on the first read
    return true;
  }();
  (void)zeroed;
  bench_l2_read<<<1056, 512>>>(static_cast<const int4*>(buf), bytes / 16, sink);
  BENCH_CUDA(cudaGetLastError());
#else
  BENCH_CUDA(cudaMemsetAsync(buf, salt & 0xff, bytes));
#endif
}

template <class Fn>
BenchTime time_events(const BenchTiming& t, Fn&& fn) {
  size_t flush_bytes = 0;
  void* flush = t.flush_l2 ? bench_flush_buffer(&flush_bytes) : nullptr;
  for (int i = 0; i < t.warmup; ++i) fn();
  BENCH_CUDA(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  std::vector<float> ms(std::max(t.reps, 1));
  for (float& m : ms) {
    if (flush) bench_flush_l2(flush, flush_bytes, int(&m - ms.data()));
    BENCH_CUDA(cudaEventRecord(e0));
    fn();
    BENCH_CUDA(cudaEventRecord(e1));
    BENCH_CUDA(cudaEventSynchronize(e1));
    BENCH_CUDA(cudaEventElapsedTime(&m, e0, e1));
  }
  BENCH_CUDA(cudaGetLastError());
  BENCH_CUDA(cudaEventDestroy(e0));
  BENCH_CUDA(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  return {ms[n / 2] * 1e3, ms.front() * 1e3, ms[n / 10] * 1e3, ms[n * 9 / 10] * 1e3};
}

// The same with no L2 flush, `reps` timed calls after `warmup`.
template <class Fn>
BenchTime time_events(int reps, int warmup, Fn&& fn) {
  return time_events(BenchTiming{reps, warmup, false}, fn);
}
