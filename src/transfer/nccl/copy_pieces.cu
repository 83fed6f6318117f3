#include <algorithm>

#include "transfer/nccl/copy_pieces.hpp"

namespace mla::transfer {
namespace {

// Pieces travel as a kernel parameter (copied at launch: no device-side
// descriptor buffer to allocate or keep alive).
struct PieceBatch {
  static constexpr int kMax = 128;
  Piece p[kMax];
};
static_assert(sizeof(PieceBatch) <= 4096, "kernel parameters are limited to 4 KiB");

// Blocks per piece: staged pieces are below direct_min_bytes (1 MiB by
// default); 8 blocks of 256 threads move one at a good fraction of HBM speed.
constexpr int kBlocksPerPiece = 8;
constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) copy_pieces_kernel(PieceBatch batch) {
  const Piece pc = batch.p[blockIdx.x];
  const int64_t worker = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  const int64_t workers = int64_t(gridDim.y) * blockDim.x;
  const bool vec =
      ((reinterpret_cast<uintptr_t>(pc.from) | reinterpret_cast<uintptr_t>(pc.to)) & 15) == 0;
  int64_t done = 0;
  if (vec) {  // 16-byte loads and stores; a tail (scales: 4n bytes) bytewise
    const int64_t n16 = pc.bytes / 16;
    const uint4* f = reinterpret_cast<const uint4*>(pc.from);
    uint4* t = reinterpret_cast<uint4*>(pc.to);
    for (int64_t i = worker; i < n16; i += workers) t[i] = f[i];
    done = n16 * 16;
  }
  for (int64_t i = done + worker; i < pc.bytes; i += workers) pc.to[i] = pc.from[i];
}

}  // namespace

cudaError_t launch_copy_pieces(const Piece* pieces, size_t count, cudaStream_t stream) {
  for (size_t i = 0; i < count; i += PieceBatch::kMax) {
    PieceBatch b{};
    const int n = static_cast<int>(std::min<size_t>(PieceBatch::kMax, count - i));
    std::copy_n(pieces + i, n, b.p);
    copy_pieces_kernel<<<dim3(n, kBlocksPerPiece), kThreads, 0, stream>>>(b);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace mla::transfer
