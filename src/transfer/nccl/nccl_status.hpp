// NCCL results as mla::Status (libmla_transfer_nccl only).
#pragma once
#include <nccl.h>

#include "common/validate.hpp"

namespace mla::transfer {

inline Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::Ok();
  return detail::error(Errc::cuda_error, "{} failed: NCCL error {} ({})", what, int(r),
                       ncclGetErrorString(r));
}

}  // namespace mla::transfer

#define MLA_NCCL_TRY(expr, what) MLA_TRY(::mla::transfer::nccl_status((expr), (what)))
