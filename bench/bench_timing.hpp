// CUDA-event timing shared by the benchmark executables: warm-up calls, then
// `reps` calls each between two events on the default stream; median and
// minimum in microseconds. (mla_bench_dsa keeps its own Timer: it flushes L2
// before every timed call.)
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "bench_check.hpp"

struct BenchTime {
  double median_us = 0, min_us = 0;
};

template <class Fn>
BenchTime time_events(int reps, int warmup, Fn&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  BENCH_CUDA(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  std::vector<float> ms(reps);
  for (int r = 0; r < reps; ++r) {
    BENCH_CUDA(cudaEventRecord(e0));
    fn();
    BENCH_CUDA(cudaEventRecord(e1));
    BENCH_CUDA(cudaEventSynchronize(e1));
    BENCH_CUDA(cudaEventElapsedTime(&ms[r], e0, e1));
  }
  BENCH_CUDA(cudaGetLastError());
  BENCH_CUDA(cudaEventDestroy(e0));
  BENCH_CUDA(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return {ms[reps / 2] * 1e3, ms.front() * 1e3};
}
