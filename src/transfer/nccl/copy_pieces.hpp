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
cudaError_t launch_copy_pieces(const Piece* pieces, size_t count, cudaStream_t stream);

}  // namespace mla::transfer
