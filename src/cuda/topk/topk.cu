// Instantiations and launch of the top-k kernel (topk_kernel.cuh), one per tile.
#include "cuda/common/cuda_status.hpp"
#include "cuda/topk/topk_kernel.cuh"

namespace mla::cuda::topk {
namespace {

template <class T>
Status launch_tile(const TopkParams& p, int cluster, cudaStream_t stream) {
  const auto kernel = topk_kernel<T, NoProbe>;
  const int smem = int(sizeof(Smem<T>));
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  MLA_CUDA_TRY(attr, "cudaFuncSetAttribute(topk_kernel)");
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(p.num_rows * cluster), 1u, 1u);
  cfg.blockDim = dim3(unsigned(T::kThreads), 1u, 1u);
  cfg.dynamicSmemBytes = size_t(smem);
  cfg.stream = stream;
  cudaLaunchAttribute la[1];
  la[0].id = cudaLaunchAttributeClusterDimension;
  la[0].val.clusterDim.x = unsigned(cluster);
  la[0].val.clusterDim.y = 1;
  la[0].val.clusterDim.z = 1;
  cfg.attrs = la;
  cfg.numAttrs = 1;
  MLA_CUDA_TRY(cudaLaunchKernelEx(&cfg, kernel, p, NoProbe{}), "cudaLaunchKernelEx(topk_kernel)");
  return check_launch("topk_kernel");
}

}  // namespace

Status launch_topk(const TopkParams& p, Kernel kernel, int cluster, cudaStream_t stream) {
  if (p.num_rows == 0) return Status::Ok();
  switch (kernel) {
    case Kernel::select_1024:
      return launch_tile<TileOf<Kernel::select_1024>::type>(p, cluster, stream);
    case Kernel::select_512:
      return launch_tile<TileOf<Kernel::select_512>::type>(p, cluster, stream);
    case Kernel::select_256:
      return launch_tile<TileOf<Kernel::select_256>::type>(p, cluster, stream);
  }
  return Status::Ok();
}

}  // namespace mla::cuda::topk
