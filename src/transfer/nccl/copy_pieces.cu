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

// The blocks of grid row y share piece x, x + gridDim.x, ... (16-byte loads
// and stores when both ends are aligned; a tail, e.g. fp32 scales, bytewise).
__device__ void copy_piece(const Piece& pc) {
  const int64_t worker = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  const int64_t workers = int64_t(gridDim.y) * blockDim.x;
  const bool vec =
      ((reinterpret_cast<uintptr_t>(pc.from) | reinterpret_cast<uintptr_t>(pc.to)) & 15) == 0;
  int64_t done = 0;
  if (vec) {
    const int64_t n16 = pc.bytes / 16;
    const uint4* f = reinterpret_cast<const uint4*>(pc.from);
    uint4* t = reinterpret_cast<uint4*>(pc.to);
    for (int64_t i = worker; i < n16; i += workers) t[i] = f[i];
    done = n16 * 16;
  }
  for (int64_t i = done + worker; i < pc.bytes; i += workers) pc.to[i] = pc.from[i];
}

__global__ void __launch_bounds__(kThreads) copy_pieces_kernel(PieceBatch batch, int count) {
  for (int i = blockIdx.x; i < count; i += gridDim.x) copy_piece(batch.p[i]);
}

}  // namespace

cudaError_t launch_copy_pieces(const Piece* pieces, size_t count, cudaStream_t stream,
                               int max_blocks) {
  for (size_t i = 0; i < count; i += PieceBatch::kMax) {
    PieceBatch b{};
    const int n = static_cast<int>(std::min<size_t>(PieceBatch::kMax, count - i));
    std::copy_n(pieces + i, n, b.p);
    // Bounded: a column of kBlocksPerPiece blocks per max_blocks / kBlocksPerPiece
    // pieces, each column looping over its pieces.
    const int columns = max_blocks > 0 ? std::clamp(max_blocks / kBlocksPerPiece, 1, n) : n;
    copy_pieces_kernel<<<dim3(columns, kBlocksPerPiece), kThreads, 0, stream>>>(b, n);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace mla::transfer
