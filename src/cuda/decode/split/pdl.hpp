// Programmatic dependent launch between the decode launches (schedule -> main
// kernel -> combine): the dependent grid is launched with
// cudaLaunchAttributeProgrammaticStreamSerialization, so its CTAs may start
// (barrier set-up, launch latency) while the kernel before it in the stream
// still runs, and wait in grid_dependency_wait() until that kernel has
// completed and its memory is visible. The primary's
// grid_launch_dependents() only lets the dependent be scheduled earlier;
// correctness rests on the wait alone, which every dependent executes before
// its first global read or write. Without the attribute (or with a primary
// that never triggers) both are no-ops beyond ordinary stream order, and
// stream capture records the programmatic edge in the graph.
#pragma once
#include <cuda_runtime.h>

namespace mla::cuda::split {

#ifdef __CUDACC__
// griddepcontrol (PTX ISA 7.8, sm_90).
__device__ __forceinline__ void grid_dependency_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void grid_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
#endif

// kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent
// of the stream's previous kernel.
template <class... Params, class... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<Args&&>(args)...);
}

}  // namespace mla::cuda::split
