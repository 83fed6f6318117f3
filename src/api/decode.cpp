// Dense decode entry points: validate (device-independently), then run the CPU
// reference for CPU tensors or the CUDA backend for CUDA tensors.
#include "mla/decode.hpp"

#include "api/backend.hpp"
#include "api/decode_validate.hpp"
#include "api/device_values.hpp"
#include "reference/decode_ref.hpp"
#include "reference/merge_ref.hpp"

#if defined(MLA_HAS_CUDA) && defined(MLA_HAS_CUDA_DECODE)
#include "cuda/decode/decode_cuda.hpp"
#define MLA_DECODE_CUDA_BACKEND 1
#endif

namespace mla {

Status decode_workspace_size(const DecodeArgs& args, const DecodeOptions& opts, size_t* bytes) {
  if (bytes == nullptr) return detail::error(Errc::invalid_value, "bytes: output pointer is null");
  *bytes = 0;
  MLA_TRY(detail::validate_decode_shapes(args));
  if (!detail::on_cuda(args.q.device)) return Status::Ok();  // the reference needs no scratch
  if (args.out.numel() == 0) return Status::Ok();            // an empty step runs nothing
#ifdef MLA_DECODE_CUDA_BACKEND
  return cuda::decode_workspace_size(args, opts, bytes);
#else
  return detail::no_cuda_backend("decode_workspace_size");
#endif
}

Status mla_decode(const DecodeArgs& args, const DecodeOptions& opts, Workspace ws,
                  const ExecContext& ctx) {
  MLA_TRY(detail::validate_decode_args(args));
  // Empty outputs: a no-op on every device (nothing to write, no launch).
  if (args.out.numel() == 0) return Status::Ok();  // B = 0 or s_q = 0
  if (detail::on_cuda(args.q.device)) {
    // block_table and cache_seqlens live on the GPU: the kernel guards them
    // (see api/decode_validate.hpp); only the checked mode reads them here.
    if (ctx.check_device_values)
      MLA_TRY(detail::check_on_host(args,
                                    {{&DecodeArgs::block_table, "block_table"},
                                     {&DecodeArgs::cache_seqlens, "cache_seqlens"}},
                                    ctx, detail::validate_decode_host_values));
#ifdef MLA_DECODE_CUDA_BACKEND
    return cuda::mla_decode(args, opts, ws, ctx);
#else
    return detail::no_cuda_backend("mla_decode");
#endif
  }
  MLA_TRY(detail::validate_decode_host_values(args));
  // The reference is deterministic and per-request, so batch_invariant holds.
  return reference::mla_decode(args);
}

Status mla_decode_partial(const DecodePartialArgs& args, const ExecContext& ctx) {
  MLA_TRY(detail::validate_decode_partial_args(args));
  if (detail::on_cuda(args.base.q.device)) return detail::no_cuda_backend("mla_decode_partial");
  MLA_TRY(detail::validate_decode_partial_host_values(args));
  if (args.base.out.numel() == 0) return Status::Ok();  // empty step: nothing to write
  return reference::mla_decode_partial(args);
}

Status merge_attn_partials(const MergeArgs& args, const ExecContext& ctx) {
  MLA_TRY(detail::validate_merge_args(args));
  if (detail::on_cuda(args.partial_lse.device))
    return detail::no_cuda_backend("merge_attn_partials");
  if (args.out.numel() == 0 && args.lse.numel() == 0) return Status::Ok();  // no rows
  return reference::merge_attn_partials(args);
}

}  // namespace mla
