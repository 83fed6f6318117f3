// The pack/unpack kernel of the NCCL executor: copies of (from, to, bytes)
// pieces between the cache pages and the staging buffer, on a stream.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace mla::transfer {

struct Piece {
  const char* from;
  char* to;
  int64_t bytes;
};

// Enqueues the copies of pieces[0, count) (host array; read before returning).
// max_blocks > 0 bounds each launch's grid: a pack that runs beside NCCL's
// kernels (pipelined staging) must leave SMs to them, NCCL moves the bytes of
// a peer-to-peer message with SM copies too. 0: as many blocks as pieces need.
cudaError_t launch_copy_pieces(const Piece* pieces, size_t count, cudaStream_t stream,
                               int max_blocks = 0);

}  // namespace mla::transfer
