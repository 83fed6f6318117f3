#include "api/decode_validate.hpp"

#include <string>
#include <vector>

#include "api/attention_checks.hpp"
#include "api/backend.hpp"
#include "api/paged_checks.hpp"
#include "common/validate.hpp"
#include "mla/dims.hpp"
#include "reference/tensor_read.hpp"

namespace mla::detail {
namespace {

Status check_decode(const DecodeArgs& a) {
  MLA_TRY(expect_absorbed_query(a.q));
  const bool cuda = on_cuda(a.q.device);
  const int64_t B = a.q.shape[0], s_q = a.q.shape[1], h_q = a.q.shape[2];
  if (cuda) {
    bool known = false;
    for (int h : kCudaDecodeHeads) known |= h == h_q;
    if (!known)
      return error(Errc::unsupported,
                   "q: h_q = {} is not supported by the CUDA decode kernels (16, 32, 64 or 128 "
                   "heads; the CPU reference takes any)",
                   h_q);
    if (s_q > kCudaDecodeMaxSq)
      return error(Errc::unsupported,
                   "q: s_q = {} is not supported by the CUDA decode kernels (1 to {}; the CPU "
                   "reference takes any)",
                   s_q, kCudaDecodeMaxSq);
    MLA_TRY(expect_dtype(a.q, "q", {DType::bf16}));
  } else {
    MLA_TRY(expect_dtype(a.q, "q", {DType::bf16, DType::f32, DType::f64}));
  }
  MLA_TRY(expect_inner_contiguous(a.q, "q", 1));

  MLA_TRY(validate_kv_cache(a.kv, "kv"));

  MLA_TRY(expect_block_table(a.block_table, a.cache_seqlens, B));
  MLA_TRY(expect_inner_contiguous(a.block_table, "block_table", 1));
  MLA_TRY(expect_inner_contiguous(a.cache_seqlens, "cache_seqlens", 1));

  MLA_TRY(expect_shape(a.out, "out", {B, s_q, h_q, kDv}, "[B, s_q, h_q, 512]"));
  MLA_TRY(expect_float_dtype(a.out, "out", cuda, /*allow_bf16=*/true));
  MLA_TRY(expect_inner_contiguous(a.out, "out", 1));
  MLA_TRY(expect_shape(a.lse, "lse", {B, h_q, s_q}, "[B, h_q, s_q]"));
  MLA_TRY(expect_float_dtype(a.lse, "lse", cuda, /*allow_bf16=*/false));
  MLA_TRY(expect_inner_contiguous(a.lse, "lse", 1));

  MLA_TRY(expect_same_device(a.q, "q", a.kv.data, "kv"));
  MLA_TRY(expect_same_device(a.q, "q", a.block_table, "block_table"));
  MLA_TRY(expect_same_device(a.q, "q", a.cache_seqlens, "cache_seqlens"));
  MLA_TRY(expect_same_device(a.q, "q", a.out, "out"));
  MLA_TRY(expect_same_device(a.q, "q", a.lse, "lse"));

  MLA_TRY(detail::expect_softmax_scale(a.softmax_scale));
  MLA_TRY(
      expect_disjoint({{&a.out, "out"}, {&a.lse, "lse"}}, {{&a.q, "q"},
                                                           {&a.kv.data, "kv"},
                                                           {&a.block_table, "block_table"},
                                                           {&a.cache_seqlens, "cache_seqlens"}}));

  if (cuda) {
    // The kernels move q, out and cache rows with 16-byte vector loads/stores.
    MLA_TRY(expect_aligned(a.q, "q", 16));
    MLA_TRY(expect_aligned(a.out, "out", 16));
    MLA_TRY(expect_aligned(a.kv.data, "kv", 16));
  }
  return Status::Ok();
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// Shape check of any rank (the merge's row dims vary).
Status expect_dims(const TensorView& t, const char* name, const std::vector<int64_t>& want,
                   const char* symbolic) {
  MLA_TRY(expect_defined(t, name));
  bool same = t.ndim == static_cast<int>(want.size());
  for (int d = 0; same && d < t.ndim; ++d) same = t.shape[d] == want[d];
  if (!same)
    return error(Errc::invalid_shape, "{}: shape {} does not match {} = {}", name, shape_str(t),
                 symbolic, dims_str(want));
  return Status::Ok();
}

}  // namespace

Status validate_decode_args(const DecodeArgs& a) {
  return check_decode(a);
}

Status validate_decode_shapes(const DecodeArgs& a) {
  DecodeArgs s = a;
  for (TensorView* t : {&s.q, &s.kv.data, &s.block_table, &s.cache_seqlens, &s.out, &s.lse})
    *t = shape_only(*t);
  return check_decode(s);
}

Status validate_decode_host_values(const DecodeArgs& a) {
  // cache_seqlens is [B] here (check_decode ran first); no output-width limit.
  return check_block_table_values(a.block_table, a.cache_seqlens, a.kv.page_size(),
                                  a.kv.num_pages(), /*max_len=*/-1);
}

Status validate_decode_partial_args(const DecodePartialArgs& a) {
  MLA_TRY(check_decode(a.base));
  const int64_t B = a.base.q.shape[0];
  MLA_TRY(expect_float_dtype(a.base.out, "out", on_cuda(a.base.q.device), /*allow_bf16=*/false));
  for (auto [t, name] : {std::pair{&a.kv_begin, "kv_begin"}, std::pair{&a.kv_end, "kv_end"}}) {
    MLA_TRY(expect_shape(*t, name, {B}, "[B]"));
    MLA_TRY(expect_dtype(*t, name, {DType::i32}));
    MLA_TRY(expect_inner_contiguous(*t, name, 1));
    MLA_TRY(expect_same_device(a.base.q, "q", *t, name));
  }
  return expect_disjoint({{&a.base.out, "out"}, {&a.base.lse, "lse"}},
                         {{&a.kv_begin, "kv_begin"}, {&a.kv_end, "kv_end"}});
}

Status validate_decode_partial_host_values(const DecodePartialArgs& a) {
  MLA_TRY(validate_decode_host_values(a.base));
  using reference::read_int;
  for (int64_t b = 0; b < a.base.q.shape[0]; ++b) {
    const int64_t lo = read_int(a.kv_begin, {b}), hi = read_int(a.kv_end, {b});
    const int64_t len = read_int(a.base.cache_seqlens, {b});
    if (lo < 0) return error(Errc::out_of_range, "kv_begin[{}] = {} is negative", b, lo);
    if (hi < lo)
      return error(Errc::out_of_range, "kv_end[{}] = {} is before kv_begin[{}] = {}", b, hi, b, lo);
    if (hi > len)
      return error(Errc::out_of_range, "kv_end[{}] = {} is past cache_seqlens[{}] = {}", b, hi, b,
                   len);
  }
  return Status::Ok();
}

Status validate_merge_args(const MergeArgs& a) {
  MLA_TRY(expect_defined(a.partial_lse, "partial_lse"));
  MLA_TRY(expect_known_device(a.partial_lse, "partial_lse"));
  const int rows = a.partial_lse.ndim - 1;
  if (rows < 1 || rows > kMaxDims - 2)
    return error(Errc::invalid_shape,
                 "partial_lse: shape {} must be [S, R...] with 1 to {} row dims",
                 shape_str(a.partial_lse), kMaxDims - 2);
  for (int d = 0; d < a.partial_lse.ndim; ++d)
    if (a.partial_lse.shape[d] < 0)
      return error(Errc::invalid_shape, "partial_lse: shape {} has negative dim {}",
                   shape_str(a.partial_lse), d);
  const int64_t S = a.partial_lse.shape[0];
  if (S < 1) return error(Errc::invalid_shape, "partial_lse: S = {} partials, need at least 1", S);
  std::vector<int64_t> r(a.partial_lse.shape + 1, a.partial_lse.shape + 1 + rows);
  MLA_TRY(expect_defined(a.partial_out, "partial_out"));
  if (a.partial_out.ndim != rows + 2)
    return error(Errc::invalid_shape, "partial_out: shape {} must have {} dims [S, R..., D]",
                 shape_str(a.partial_out), rows + 2);
  const int64_t D = a.partial_out.shape[rows + 1];
  std::vector<int64_t> po{S}, out, lse;
  po.insert(po.end(), r.begin(), r.end());
  po.push_back(D);
  out = r;
  out.push_back(D);
  lse = r;
  MLA_TRY(expect_dims(a.partial_out, "partial_out", po, "[S, R..., D]"));
  MLA_TRY(expect_dims(a.out, "out", out, "[R..., D]"));
  MLA_TRY(expect_dims(a.lse, "lse", lse, "[R...]"));
  const bool cuda = on_cuda(a.partial_lse.device);
  MLA_TRY(expect_float_dtype(a.partial_out, "partial_out", cuda, /*allow_bf16=*/false));
  MLA_TRY(expect_float_dtype(a.partial_lse, "partial_lse", cuda, /*allow_bf16=*/false));
  MLA_TRY(expect_float_dtype(a.out, "out", cuda, /*allow_bf16=*/true));
  MLA_TRY(expect_float_dtype(a.lse, "lse", cuda, /*allow_bf16=*/false));
  for (auto [t, name] : {std::pair{&a.partial_out, "partial_out"}, std::pair{&a.out, "out"},
                         std::pair{&a.lse, "lse"}}) {
    MLA_TRY(expect_inner_contiguous(*t, name, 0));  // non-negative strides
    MLA_TRY(expect_same_device(a.partial_lse, "partial_lse", *t, name));
  }
  MLA_TRY(expect_inner_contiguous(a.partial_lse, "partial_lse", 0));
  return expect_disjoint({{&a.out, "out"}, {&a.lse, "lse"}},
                         {{&a.partial_out, "partial_out"}, {&a.partial_lse, "partial_lse"}});
}

}  // namespace mla::detail
