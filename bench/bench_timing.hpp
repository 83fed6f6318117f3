// The CUDA-event timing loop of every benchmark (bench/, tools/ `mla bench`):
// `warmup` calls, then `reps` calls each between two events on the default
// stream. With `flush_l2`, a 256 MB memset before every call (outside the
// events) evicts the L2, so that each timed call reads its inputs from memory.
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
    if (flush) BENCH_CUDA(cudaMemsetAsync(flush, int(&m - ms.data()) & 0xff, flush_bytes));
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
