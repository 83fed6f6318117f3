// Public entry points of sparse absorbed attention: validate, then dispatch.
#include "mla/sparse.hpp"

#include "api/attention_checks.hpp"
#include "api/backend.hpp"
#include "api/device_values.hpp"
#include "common/validate.hpp"
#include "mla/dims.hpp"
#include "reference/sparse_ref.hpp"
#include "reference/tensor_read.hpp"
#ifdef MLA_HAS_CUDA
#include "cuda/sparse/sparse_cuda.hpp"
#endif

namespace mla {

using detail::error;
using detail::expect_dtype;
using detail::expect_inner_contiguous;
using detail::expect_same_device;
using detail::expect_shape;
using detail::kAny;

namespace {

// Float dtypes: the CPU list (f64 included) for every device; the CUDA backend
// narrows it to its kernels' dtypes itself (unsupported, naming the kernel).
Status expect_float(const TensorView& t, const char* name, bool allow_bf16) {
  return detail::expect_float_dtype(t, name, /*cuda=*/false, allow_bf16);
}

// Every tensor of the op on q's device, inner dim dense.
Status expect_layout(const TensorView& q,
                     std::initializer_list<std::pair<const TensorView*, const char*>> ts) {
  for (auto [t, name] : ts) {
    MLA_TRY(expect_inner_contiguous(*t, name, 1));
    MLA_TRY(expect_same_device(q, "q", *t, name));
  }
  return Status::Ok();
}

// The index lists past their shape (checked by the caller): indices i32 with topk >= 1
// entries per list (its last dim), and the optional topk_length [lists] i32 beside q.
template <class Args>
Status expect_lists(const Args& a, int64_t lists, const char* lists_shape) {
  MLA_TRY(expect_dtype(a.indices, "indices", {DType::i32}));
  const int64_t topk = a.indices.shape[a.indices.ndim - 1];
  if (topk < 1) return error(Errc::invalid_shape, "indices: topk = {} must be at least 1", topk);
  if (!a.topk_length.defined()) return Status::Ok();
  MLA_TRY(expect_shape(a.topk_length, "topk_length", {lists}, lists_shape));
  MLA_TRY(expect_dtype(a.topk_length, "topk_length", {DType::i32}));
  return expect_layout(a.q, {{&a.topk_length, "topk_length"}});
}

// indices entries j < n_list[...] are -1 or in [0, limit).
Status check_index(int64_t v, int64_t limit, const std::string& where, const char* what) {
  if (v == -1 || (v >= 0 && v < limit)) return Status::Ok();
  if (v < 0)
    return error(Errc::out_of_range, "{} = {} is negative (only -1, \"no token\", is allowed)",
                 where, v);
  return error(Errc::out_of_range, "{} = {} is past {} = {}", where, v, what, limit);
}

// Everything but the index values: shapes, dtypes, layout, scale.
Status validate_decode_shapes(const SparseDecodeArgs& a) {
  MLA_TRY(detail::expect_absorbed_query(a.q));
  const int64_t B = a.q.shape[0], s_q = a.q.shape[1], h_q = a.q.shape[2];
  MLA_TRY(expect_float(a.q, "q", true));
  MLA_TRY(validate_kv_cache(a.kv, "kv"));
  MLA_TRY(expect_shape(a.indices, "indices", {B, s_q, kAny}, "[B, s_q, topk]"));
  MLA_TRY(expect_lists(a, B, "[B]"));
  MLA_TRY(expect_shape(a.out, "out", {B, s_q, h_q, kDv}, "[B, s_q, h_q, 512]"));
  MLA_TRY(expect_float(a.out, "out", true));
  MLA_TRY(expect_shape(a.lse, "lse", {B, h_q, s_q}, "[B, h_q, s_q]"));
  MLA_TRY(expect_float(a.lse, "lse", false));
  MLA_TRY(expect_layout(a.q, {{&a.q, "q"},
                              {&a.kv.data, "kv"},
                              {&a.indices, "indices"},
                              {&a.out, "out"},
                              {&a.lse, "lse"}}));
  MLA_TRY(detail::expect_softmax_scale(a.softmax_scale));
  return detail::expect_disjoint(
      {{&a.out, "out"}, {&a.lse, "lse"}},
      {{&a.q, "q"}, {&a.kv.data, "kv"}, {&a.indices, "indices"}, {&a.topk_length, "topk_length"}});
}

// The index lists and topk_length, read on the host (CPU tensors only).
Status validate_decode_values(const SparseDecodeArgs& a) {
  const int64_t B = a.q.shape[0], s_q = a.q.shape[1], topk = a.indices.shape[2];
  using reference::read_int;
  const int64_t capacity = a.kv.num_pages() * a.kv.page_size();
  const std::string cap = fmt::format("the cache capacity num_pages * page_size = {} * {}",
                                      a.kv.num_pages(), a.kv.page_size());
  for (int64_t b = 0; b < B; ++b) {
    int64_t n = topk;
    if (a.topk_length.defined()) {
      n = read_int(a.topk_length, {b});
      if (n < 0) return error(Errc::out_of_range, "topk_length[{}] = {} is negative", b, n);
      if (n > topk)
        return error(Errc::out_of_range, "topk_length[{}] = {} is past topk = {}", b, n, topk);
    }
    for (int64_t i = 0; i < s_q; ++i)
      for (int64_t j = 0; j < n; ++j)
        MLA_TRY(check_index(read_int(a.indices, {b, i, j}), capacity,
                            fmt::format("indices[{}][{}][{}]", b, i, j), cap.c_str()));
  }
  return Status::Ok();
}

Status validate_prefill_shapes(const SparsePrefillArgs& a) {
  MLA_TRY(expect_shape(a.q, "q", {kAny, kAny, kDqk}, "[s_q, h_q, 576]"));
  MLA_TRY(detail::expect_known_device(a.q, "q"));
  const int64_t s_q = a.q.shape[0], h_q = a.q.shape[1];
  if (h_q < 1) return error(Errc::invalid_shape, "q: h_q = {} must be at least 1", h_q);
  MLA_TRY(expect_float(a.q, "q", true));
  if (a.kv_format == KvFormat::fp8_ds_mla) {
    MLA_TRY(expect_shape(a.kv, "kv", {kAny, Fp8DsMlaLayout::kEntryBytes},
                         "[s_kv, 656] (fp8_ds_mla entries)"));
    // Raw entry bytes: engines hand them over as uint8 or float8_e4m3fn.
    MLA_TRY(expect_dtype(a.kv, "kv", {DType::u8, DType::e4m3}));
    MLA_TRY(expect_inner_contiguous(a.kv, "kv", 1));
  } else if (a.kv_format == KvFormat::bf16) {
    MLA_TRY(expect_shape(a.kv, "kv", {kAny, kDqk}, "[s_kv, 576]"));
    MLA_TRY(expect_float(a.kv, "kv", true));
  } else {
    return error(Errc::invalid_value, "kv_format: {} is not a KvFormat", int(a.kv_format));
  }
  MLA_TRY(expect_shape(a.indices, "indices", {s_q, kAny}, "[s_q, topk]"));
  MLA_TRY(expect_lists(a, s_q, "[s_q]"));
  MLA_TRY(expect_shape(a.out, "out", {s_q, h_q, kDv}, "[s_q, h_q, 512]"));
  MLA_TRY(expect_float(a.out, "out", true));
  MLA_TRY(expect_shape(a.lse, "lse", {s_q, h_q}, "[s_q, h_q]"));
  MLA_TRY(expect_float(a.lse, "lse", false));
  MLA_TRY(expect_layout(
      a.q,
      {{&a.q, "q"}, {&a.kv, "kv"}, {&a.indices, "indices"}, {&a.out, "out"}, {&a.lse, "lse"}}));
  MLA_TRY(detail::expect_softmax_scale(a.softmax_scale));
  return detail::expect_disjoint({{&a.out, "out"}, {&a.lse, "lse"}},
                                 {{&a.q, "q"}, {&a.kv, "kv"}, {&a.indices, "indices"}});
}

Status validate_prefill_values(const SparsePrefillArgs& a) {
  const int64_t s_q = a.q.shape[0], s_kv = a.kv.shape[0], topk = a.indices.shape[1];
  for (int64_t i = 0; i < s_q; ++i) {
    int64_t n = topk;
    if (a.topk_length.defined()) {
      n = reference::read_int(a.topk_length, {i});
      if (n < 0) return error(Errc::out_of_range, "topk_length[{}] = {} is negative", i, n);
      if (n > topk)
        return error(Errc::out_of_range, "topk_length[{}] = {} is past topk = {}", i, n, topk);
    }
    for (int64_t j = 0; j < n; ++j)
      MLA_TRY(check_index(reference::read_int(a.indices, {i, j}), s_kv,
                          fmt::format("indices[{}][{}]", i, j), "s_kv"));
  }
  return Status::Ok();
}

}  // namespace

Status sparse_workspace_size(const SparseDecodeArgs& a, size_t* bytes) {
  if (bytes == nullptr) return error(Errc::invalid_value, "bytes: output pointer is null");
  *bytes = 0;
  // Sizing reads shapes only: the buffers may not exist yet.
  SparseDecodeArgs s = a;
  for (TensorView* t : {&s.q, &s.kv.data, &s.indices, &s.topk_length, &s.out, &s.lse})
    *t = detail::shape_only(*t);
  MLA_TRY(validate_decode_shapes(s));
  if (!detail::on_cuda(s.q.device)) return Status::Ok();  // the reference needs no scratch
  if (s.out.numel() == 0) return Status::Ok();            // an empty step runs nothing
  return MLA_CUDA_BACKEND(cuda::sparse_decode_workspace_size(s, bytes), "sparse_workspace_size");
}

Status sparse_workspace_size(const SparsePrefillArgs& a, size_t* bytes) {
  if (bytes == nullptr) return error(Errc::invalid_value, "bytes: output pointer is null");
  *bytes = 0;
  SparsePrefillArgs s = a;
  for (TensorView* t : {&s.q, &s.kv, &s.indices, &s.topk_length, &s.out, &s.lse})
    *t = detail::shape_only(*t);
  MLA_TRY(validate_prefill_shapes(s));
  if (!detail::on_cuda(s.q.device)) return Status::Ok();
  if (s.out.numel() == 0) return Status::Ok();
  return MLA_CUDA_BACKEND(cuda::sparse_prefill_workspace_size(s, bytes), "sparse_workspace_size");
}

namespace {

// The host-visible half of a plan's misuse checks (the CUDA backend adds the
// worker count and the schedule size).
Status check_plan_use(const DecodePlan& plan, const SparseDecodeArgs& a) {
  const int device = detail::on_cuda(a.q.device) ? a.q.device.id : -1;
  if (!plan.sparse)
    return error(Errc::invalid_value, "plan: made by decode_plan, this is a sparse_decode call");
  if (plan.device != device)
    return error(Errc::invalid_value, "plan: made for device {}, but q is on device {} (-1: CPU)",
                 plan.device, device);
  const int64_t B = a.q.shape[0], s_q = a.q.shape[1], h_q = a.q.shape[2], topk = a.indices.shape[2];
  if (plan.batch != B || plan.s_q != s_q || plan.h_q != h_q || plan.topk != topk)
    return error(Errc::invalid_value,
                 "plan: made for B {} s_q {} h_q {} topk {}, but this call has B {} s_q {} h_q {} "
                 "topk {}",
                 plan.batch, plan.s_q, plan.h_q, plan.topk, B, s_q, h_q, topk);
  if (device >= 0 && plan.data == nullptr)
    return error(Errc::invalid_value, "plan: data is null (not filled by sparse_decode_plan)");
  return Status::Ok();
}

}  // namespace

Status sparse_decode_plan(const SparseDecodeArgs& a, Workspace ws, DecodePlan* plan,
                          const ExecContext& ctx) {
  if (plan == nullptr) return error(Errc::invalid_value, "plan: output pointer is null");
  *plan = DecodePlan{};
  if (a.plan != nullptr)
    return error(Errc::invalid_value, "args.plan: must be null when making a plan");
  MLA_TRY(validate_decode_shapes(a));
  DecodePlan h;
  h.sparse = true;
  h.batch = a.q.shape[0];
  h.s_q = a.q.shape[1];
  h.h_q = a.q.shape[2];
  h.topk = a.indices.shape[2];
  h.device = detail::on_cuda(a.q.device) ? a.q.device.id : -1;
  if (h.device < 0 || a.out.numel() == 0) {  // nothing to schedule: the record only
    *plan = h;
    return Status::Ok();
  }
#ifdef MLA_HAS_CUDA
  MLA_TRY(cuda::sparse_decode_plan(a, ws, &h, ctx));
  *plan = h;
  return Status::Ok();
#else
  (void)ws;
  (void)ctx;
  return detail::no_cuda_backend("sparse_decode_plan");
#endif
}

Status sparse_decode(const SparseDecodeArgs& a, Workspace ws, const ExecContext& ctx) {
  MLA_TRY(validate_decode_shapes(a));
  if (a.plan != nullptr) MLA_TRY(check_plan_use(*a.plan, a));
  // Empty outputs: a no-op on every device (nothing to write, no launch).
  if (a.out.numel() == 0) return Status::Ok();  // B = 0 or s_q = 0
  const bool on_gpu = detail::on_cuda(a.q.device);
  // On the GPU the kernel treats a bad index as -1; the checked mode names it.
  MLA_TRY(detail::check_values(
      on_gpu, a,
      {{&SparseDecodeArgs::indices, "indices"}, {&SparseDecodeArgs::topk_length, "topk_length"}},
      ctx, validate_decode_values));
  if (on_gpu) return MLA_CUDA_BACKEND(cuda::sparse_decode(a, ws, ctx), "sparse_decode");
  return reference::sparse_decode(a);
}

Status sparse_prefill(const SparsePrefillArgs& a, Workspace ws, const ExecContext& ctx) {
  MLA_TRY(validate_prefill_shapes(a));
  // Empty outputs: a no-op on every device (nothing to write, no launch).
  if (a.out.numel() == 0) return Status::Ok();  // s_q = 0
  const bool on_gpu = detail::on_cuda(a.q.device);
  MLA_TRY(detail::check_values(on_gpu, a, {{&SparsePrefillArgs::indices, "indices"}}, ctx,
                               validate_prefill_values));
  if (on_gpu) return MLA_CUDA_BACKEND(cuda::sparse_prefill(a, ws, ctx), "sparse_prefill");
  return reference::sparse_prefill(a);
}

}  // namespace mla
