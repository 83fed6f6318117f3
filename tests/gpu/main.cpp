// GPU test runner. With no CUDA device it prints a loud banner and exits 77,
// which ctest reports as "skipped" (never as passed).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr,
                 "\n**********************************************************\n"
                 "*  GPU TESTS SKIPPED: no CUDA device on this machine.     *\n"
                 "*  They run on the GPU machine (scripts/gpu_check.sh).    *\n"
                 "**********************************************************\n\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
