// The tensor maps of the warp-specialised prefill kernel (flash_fwd_ws_kernel.cuh):
// built on the host per call from FlashFwdParams, passed to the kernel as a
// __grid_constant__ parameter (TMA reads the descriptor from parameter space).
#pragma once
#include <cuda.h>

#include "cuda/prefill/flash_fwd_params.hpp"

namespace mla::cuda::prefill {

// Each map views its tensor as [rows][heads][dims] and is read in boxes of
// 64 dims x 1 head x 128 rows (one 16 KB SW128 block). k_rope shared by the
// heads (head stride 0) is mapped with one head, read at head 0.
struct FlashWsMaps {
  CUtensorMap q;       // [total_q][h][192]
  CUtensorMap k_nope;  // [total_k][h][128]
  CUtensorMap k_rope;  // [total_k][h or 1][64]
  CUtensorMap v;       // [total_k][h][128]
};

// False when a map cannot be built: total rows unknown (varlen without
// total_q/total_k), a base not 16-byte aligned, a stride not a multiple of 16
// bytes, or no driver encoder.
bool encode_flash_ws_maps(const FlashFwdParams& p, FlashWsMaps* maps);

}  // namespace mla::cuda::prefill
