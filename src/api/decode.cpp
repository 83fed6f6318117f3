// Dense decode entry points: validate (device-independently), then run the CPU
// reference for CPU tensors or the CUDA backend for CUDA tensors.
#include "mla/decode.hpp"

#include <string>

#include "api/backend.hpp"
#include "api/decode_validate.hpp"
#include "api/device_values.hpp"
#include "common/validate.hpp"
#include "reference/decode_ref.hpp"
#include "reference/merge_ref.hpp"

#if defined(MLA_HAS_CUDA) && defined(MLA_HAS_CUDA_DECODE)
#include "cuda/decode/decode_cuda.hpp"
#define MLA_DECODE_CUDA_BACKEND 1
#endif

namespace mla {

namespace detail {

// The host-visible half of a plan's misuse checks (the CUDA backend adds the
// worker count and the schedule size).
Status check_plan_use(const DecodePlan& plan, const DecodeArgs& a, const DecodeOptions& opts) {
  const int device = on_cuda(a.q.device) ? a.q.device.id : -1;
  if (plan.sparse)
    return error(Errc::invalid_value,
                 "opts.plan: made by sparse_decode_plan, this is a dense decode call");
  if (plan.device != device)
    return error(Errc::invalid_value, "opts.plan: made for {}, but q is on {}",
                 plan.device < 0 ? std::string("the CPU") : fmt::format("cuda:{}", plan.device),
                 device < 0 ? std::string("the CPU") : fmt::format("cuda:{}", device));
  const int64_t B = a.q.shape[0], s_q = a.q.shape[1], h_q = a.q.shape[2];
  if (plan.batch != B || plan.s_q != s_q || plan.h_q != h_q)
    return error(Errc::invalid_value,
                 "opts.plan: made for B {} s_q {} h_q {}, but q has B {} s_q {} h_q {}", plan.batch,
                 plan.s_q, plan.h_q, B, s_q, h_q);
  const int64_t capacity = a.block_table.shape[1] * a.kv.page_size();
  if (capacity < plan.capacity)
    return error(Errc::invalid_value,
                 "opts.plan: made for a block table of {} keys (max_pages * page_size), this "
                 "call's holds {}",
                 plan.capacity, capacity);
  if (plan.batch_invariant != opts.batch_invariant)
    return error(Errc::invalid_value,
                 "opts.plan: made with batch_invariant = {}, this call has batch_invariant = {}",
                 plan.batch_invariant, opts.batch_invariant);
  if (device >= 0 && plan.data == nullptr)
    return error(Errc::invalid_value, "opts.plan: data is null (not filled by decode_plan)");
  return Status::Ok();
}

}  // namespace detail

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
  if (opts.plan != nullptr) MLA_TRY(detail::check_plan_use(*opts.plan, args, opts));
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

Status decode_plan(const DecodeArgs& args, const DecodeOptions& opts, Workspace ws,
                   DecodePlan* plan, const ExecContext& ctx) {
  if (plan == nullptr) return detail::error(Errc::invalid_value, "plan: output pointer is null");
  *plan = DecodePlan{};
  if (opts.plan != nullptr)
    return detail::error(Errc::invalid_value,
                         "opts.plan: must be null when making a plan (decode_plan)");
  MLA_TRY(detail::validate_decode_args(args));
  DecodePlan h;
  h.batch = args.q.shape[0];
  h.s_q = args.q.shape[1];
  h.h_q = args.q.shape[2];
  h.batch_invariant = opts.batch_invariant;
  h.capacity = args.block_table.shape[1] * args.kv.page_size();
  if (!detail::on_cuda(args.q.device) || args.out.numel() == 0) {
    // The reference and an empty step schedule nothing: the record only.
    h.device = detail::on_cuda(args.q.device) ? args.q.device.id : -1;
    *plan = h;
    return Status::Ok();
  }
#ifdef MLA_DECODE_CUDA_BACKEND
  MLA_TRY(cuda::decode_plan(args, opts, ws, &h, ctx));
  *plan = h;
  return Status::Ok();
#else
  (void)ws;
  (void)ctx;
  return detail::no_cuda_backend("decode_plan");
#endif
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
