#include "cuda/prefill/flash_fwd.hpp"

#include "common/validate.hpp"
#include "cuda/prefill/flash_fwd_launch.hpp"

namespace mla::cuda::prefill {

Status launch_flash_fwd(const FlashFwdParams& p, void* stream) {
  if (p.batch < 0 || p.heads < 0 || p.max_seqlen_q < 0)
    return detail::error(Errc::invalid_value,
                         "prefill attention: batch {}, heads {}, max_seqlen_q {} must be >= 0",
                         p.batch, p.heads, p.max_seqlen_q);
  if (p.batch == 0 || p.heads == 0 || p.max_seqlen_q == 0) return Status::Ok();
  if (p.heads > 65535 || p.batch > 65535)
    return detail::error(Errc::unsupported,
                         "prefill attention: heads {} or batch {} past the grid limit 65535",
                         p.heads, p.batch);
  const cudaError_t e = flash_fwd_launch_raw(p, static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess)
    return detail::error(Errc::cuda_error,
                         "prefill attention launch (B {}, h {}, max_seqlen_q {}): {}", p.batch,
                         p.heads, p.max_seqlen_q, cudaGetErrorString(e));
  return Status::Ok();
}

}  // namespace mla::cuda::prefill
