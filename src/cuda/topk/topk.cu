// Instantiations and launch of the top-k kernels (topk_kernel.cuh,
// topk_resident.cuh), one per tile.
#include <algorithm>
#include <atomic>

#include "cuda/common/cuda_status.hpp"
#include "cuda/topk/topk_kernel.cuh"
#include "cuda/topk/topk_resident.cuh"

namespace mla::cuda::topk {
namespace {

constexpr int kMaxDevices = 64;

// `grid` CTAs in clusters of `cluster`, with `smem` bytes of dynamic shared memory.
// The 1-D launch of `grid` CTAs in clusters of `cluster`; `la` (the cluster
// attribute) must outlive the config.
cudaLaunchConfig_t cluster_config(int64_t grid, unsigned threads, int smem, int cluster,
                                  cudaStream_t stream, cudaLaunchAttribute& la) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(grid), 1u, 1u);
  cfg.blockDim = dim3(threads, 1u, 1u);
  cfg.dynamicSmemBytes = size_t(smem);
  cfg.stream = stream;
  la.id = cudaLaunchAttributeClusterDimension;
  la.val.clusterDim.x = unsigned(cluster);
  la.val.clusterDim.y = 1;
  la.val.clusterDim.z = 1;
  cfg.attrs = &la;
  cfg.numAttrs = 1;
  return cfg;
}

template <class Kern, class... Args>
Status launch_clusters(Kern kernel, unsigned threads, int smem, int64_t grid, int cluster,
                       cudaStream_t stream, const char* what, const Args&... args) {
  cudaLaunchAttribute la;
  const cudaLaunchConfig_t cfg = cluster_config(grid, threads, smem, cluster, stream, la);
  MLA_CUDA_TRY(cudaLaunchKernelEx(&cfg, kernel, args...), what);
  return check_launch(what);
}

template <class T>
Status launch_tile(const TopkParams& p, int cluster, cudaStream_t stream) {
  const auto kernel = topk_kernel<T, NoProbe>;
  const int smem = int(sizeof(Smem<T>));
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  MLA_CUDA_TRY(attr, "cudaFuncSetAttribute(topk_kernel)");
  return launch_clusters(kernel, unsigned(T::kThreads), smem, p.num_rows * cluster, cluster, stream,
                         "topk_kernel", p, NoProbe{});
}

// Clusters of `cluster` CTAs of `kernel` resident at once on device `dev`.
template <class Kern>
Status active_clusters(Kern kernel, unsigned threads, int smem, int cluster, int dev, int* active) {
  if (cluster == 1) {
    int per_sm = 0;
    MLA_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, int(threads), smem),
                 "cudaOccupancyMaxActiveBlocksPerMultiprocessor(resident_kernel)");
    DeviceFacts f;
    MLA_TRY(device_facts(dev, &f));
    *active = per_sm * f.sm_count;
    return Status::Ok();
  }
  cudaLaunchAttribute la;
  const cudaLaunchConfig_t cfg = cluster_config(cluster, threads, smem, cluster, nullptr, la);
  MLA_CUDA_TRY(cudaOccupancyMaxActiveClusters(active, kernel, &cfg),
               "cudaOccupancyMaxActiveClusters(resident_kernel)");
  return Status::Ok();
}

// Persistent: as many clusters as fit the GPU at once (each takes rows c,
// c + clusters, ...), never more than the rows.
template <class T>
Status launch_resident(const TopkParams& p, int cluster, cudaStream_t stream) {
  const auto kernel = resident_kernel<T>;
  const int smem = int(resident_smem_bytes<T>());
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  MLA_CUDA_TRY(attr, "cudaFuncSetAttribute(resident_kernel)");
  // Found once per device and cluster size: the launch must stay cheap (and
  // legal inside graph capture).
  static std::atomic<int> cached[kMaxDevices][4] = {};
  int dev = 0;
  MLA_CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice");
  const int slot = cluster == 1 ? 0 : cluster == 2 ? 1 : cluster == 4 ? 2 : 3;
  int active = dev < kMaxDevices ? cached[dev][slot].load(std::memory_order_relaxed) : 0;
  if (active == 0) {
    MLA_TRY(active_clusters(kernel, unsigned(T::kThreads), smem, cluster, dev, &active));
    if (active <= 0)
      return value_error(Errc::unsupported, "resident top-k: shared memory bytes", smem,
                         "per CTA do not fit one multiprocessor of this device");
    if (dev < kMaxDevices) cached[dev][slot].store(active, std::memory_order_relaxed);
  }
  const int64_t clusters = std::min<int64_t>(p.num_rows, active);
  return launch_clusters(kernel, unsigned(T::kThreads), smem, clusters * cluster, cluster, stream,
                         "resident_kernel", p);
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
    case Kernel::resident_512:
      return launch_resident<TileOf<Kernel::resident_512>::type>(p, cluster, stream);
  }
  return Status::Ok();
}

}  // namespace mla::cuda::topk
