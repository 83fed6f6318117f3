// CUDA backend of mla_decode (implemented in src/cuda/decode/). Called by
// src/api/decode.cpp after the device-independent validation has passed.
#pragma once
#include "mla/decode.hpp"

namespace mla::cuda {
Status decode_workspace_size(const DecodeArgs& args, const DecodeOptions& opts, size_t* bytes);
Status mla_decode(const DecodeArgs& args, const DecodeOptions& opts, Workspace ws,
                  const ExecContext& ctx);
}  // namespace mla::cuda
