"""DSA's token selection and sparse attention, and the non-absorbed prefill
(mla/topk.hpp, mla/sparse.hpp, mla/prefill.hpp), in the conventions of mla.ops."""

from __future__ import annotations

from . import _call
from ._call import float_out, kv_format_code, out_dtype_arg
from ._lib import flag

TOPK_MAX = 8192  # mla::kTopkMax (mla/topk.hpp): no indices array is allocated for a larger k


def topk_indices(logits, k: int = 2048, *, lengths=None, block_table=None, page_size: int = 64,
                 rows_per_request: int = 1, num_pages: int = -1, indices=None, stream=None):
    """Top-k positions of each row of logits [R, N] f32 among [0, lengths[r]) (all N when
    lengths is None), best first, ties by lower position, -1 padded: indices [R, k] int32.
    With block_table [B, max_pages], positions become global cache slots
    (request b = r // rows_per_request). k: a multiple of 64, at most 8192."""
    if _call.torch_compiling() and indices is None:
        from . import torch_ops

        return torch_ops.topk_indices(logits, k, lengths, block_table, page_size,
                                      rows_per_request, num_pages)
    shape = _call.shape_of(logits, 2)
    k_sized = isinstance(k, int) and 0 < k <= TOPK_MAX
    if indices is None and shape is not None and k_sized:
        # (a k past the limit is left to the library's check, which names it: the
        # allocation would come first, and k = 2**31 would ask for gigabytes)
        indices = _call.empty(logits, (shape[0], k), "i32")
    st = _call.stream_handle(logits, stream)
    _call.run("mla_topk_indices", logits, st, logits, lengths, k, indices, block_table,
              page_size, rows_per_request, num_pages, st)
    return indices


_TOPK_ORDERS = {"best_first": 0, "by_position": 1}  # mla::TopkOrder
_SELECT_PATHS = {"automatic": 0, "unfused": 1, "fused": 2}  # mla::IndexerSelectPath


def _code(table: dict, value, name: str) -> int:
    """The C value of a name of `table` (an int passes as is: the library names a bad one)."""
    if isinstance(value, str):
        if value not in table:
            raise ValueError(f"{name} = {value!r} is not one of {', '.join(table)}")
        return table[value]
    return value


def _select_args(q8, w_folded, k8, k_scale, k_start, k_end, k, order, path, capacity, indices):
    """The C arguments of mla_indexer_select_prefill(_workspace_size), indices allocated
    beside q8 when not given."""
    qs = tuple(getattr(q8, "shape", ()))
    if indices is None and len(qs) == 3 and isinstance(k, int) and 0 < k <= TOPK_MAX:
        indices = _call.empty(q8, (qs[0], k), "i32")
    return (q8, w_folded, k8, k_scale, k_start, k_end, k, _code(_TOPK_ORDERS, order, "order"),
            _code(_SELECT_PATHS, path, "path"), capacity, indices)


def indexer_select_prefill_workspace_size(q8, w_folded, k8, k_scale, k_start, k_end,
                                          k: int = 2048, *, order="best_first",
                                          path="automatic", capacity: int = 0,
                                          indices=None) -> int:
    """Scratch bytes indexer_select_prefill needs for these arguments (0 on the CPU)."""
    args = _select_args(q8, w_folded, k8, k_scale, k_start, k_end, k, order, path, capacity,
                        indices)
    return _call.run("mla_indexer_select_prefill_workspace_size", q8, None, *args)


def indexer_select_prefill(q8, w_folded, k8, k_scale, k_start, k_end, k: int = 2048, *,
                           order="best_first", path="automatic", capacity: int = 0,
                           indices=None, workspace=None, stream=None):
    """The prefill select: indexer_logits_prefill's logits (q8 [T, 64, 128], w_folded
    [T, 64], k8 [N, 128] e4m3, k_scale [N], k_start/k_end [T] int32) and the top-k of
    each row in one call -> indices [T, k] int32 positions, -1 padded; the same as
    topk_indices(indexer_logits_prefill(...), k) without the [T, N] logits.
    order: "best_first" or "by_position". path: "automatic" (= "unfused", the faster),
    "unfused" or "fused" (never holds the logits; syncs the stream once); capacity:
    fused's candidate entries per row (0: 8 k). `workspace` as for sparse_decode."""
    args = _select_args(q8, w_folded, k8, k_scale, k_start, k_end, k, order, path, capacity,
                        indices)
    st = _call.stream_handle(q8, stream)
    _call.run_with_workspace("mla_indexer_select_prefill", q8, st, workspace, *args,
                             current_stream=stream is None)
    return args[-1]


def sparse_decode_workspace_size(q, kv, indices, softmax_scale, *, topk_length=None,
                                 kv_format=None, out=None, lse=None, out_dtype=None) -> int:
    """Scratch bytes sparse_decode needs for these arguments (0 on the CPU): allocate
    once and pass it as `workspace=` to keep allocations out of a hot loop."""
    out, lse = _call.decode_outputs(q, out, lse, out_dtype)
    return _call.run("mla_sparse_decode_workspace_size", q, None, q, kv,
                     kv_format_code(kv_format), indices, topk_length, softmax_scale, out, lse)


def sparse_prefill_workspace_size(q, kv, indices, softmax_scale, *, topk_length=None,
                                  kv_format=None, out=None, lse=None, out_dtype=None) -> int:
    """Scratch bytes sparse_prefill needs for these arguments (0 on the CPU)."""
    out, lse = _call.prefill_outputs(q, out, lse, out_dtype)
    return _call.run("mla_sparse_prefill_workspace_size", q, None, q, kv,
                     kv_format_code(kv_format), indices, topk_length, softmax_scale, out, lse)


def _run_sparse(call, q, kv, indices, topk_length, softmax_scale, kv_format, out, lse,
                workspace, stream):
    """mla_sparse_decode or mla_sparse_prefill (`call`) into out and lse, with the
    workspace given or one it allocates -> (out, lse)."""
    st = _call.stream_handle(q, stream)
    _call.run_with_workspace(call, q, st, workspace, q, kv, kv_format_code(kv_format), indices,
                             topk_length, softmax_scale, out, lse, current_stream=stream is None)
    return out, lse


def sparse_decode(q, kv, indices, softmax_scale, *, topk_length=None, kv_format=None, out=None,
                  lse=None, out_dtype=None, workspace=None, stream=None, plan=None):
    """Sparse absorbed decode: q [B, s_q, h_q, 576] attends to the cache slots of
    indices [B, s_q, topk] int32 (-1: none; no causal mask, the list is the mask).
    Returns (out [B, s_q, h_q, 512], lse [B, h_q, s_q]); no valid entry: out 0, lse -inf.
    `workspace` (bytes on q's device) is allocated with q's framework when not given.
    `plan`: a mla.DecodePlan from mla.sparse_decode_plan for these shapes and
    topk_length values; the call reads its schedule and uses its workspace."""
    if plan is not None and not _call.torch_compiling():
        from .plans import sparse_decode_planned

        if out is None and lse is None and out_dtype is None and workspace is None and \
                stream is None:
            fast = _call.torch_ext_for(q)  # torch CUDA: the C++ hot path, when built
            if fast is not None:
                res = fast.sparse_decode(q, kv, kv_format_code(kv_format), indices, topk_length,
                                         softmax_scale, False, 0, plan.workspace, plan._record)
                if res is not NotImplemented:
                    return res
        out, lse = _call.decode_outputs(q, out, lse, out_dtype)
        sparse_decode_planned(q, kv, indices, topk_length, softmax_scale, kv_format, out, lse,
                              plan, workspace, stream)
        return out, lse
    if _call.torch_compiling() and out is None and lse is None and out_dtype is None:
        from . import torch_ops

        return torch_ops.sparse_decode(q, kv, indices, topk_length, softmax_scale,
                                       kv_format_code(kv_format))
    if out is None and lse is None and out_dtype is None and workspace is None and \
            stream is None:
        fast = _call.torch_ext_for(q)  # torch CUDA: the C++ hot path, when built
        if fast is not None:
            res = fast.sparse_decode(q, kv, kv_format_code(kv_format), indices, topk_length,
                                     softmax_scale, False, 0)
            if res is not NotImplemented:  # (an argument of another framework)
                return res
    out, lse = _call.decode_outputs(q, out, lse, out_dtype)
    return _run_sparse("mla_sparse_decode", q, kv, indices, topk_length, softmax_scale, kv_format,
                       out, lse, workspace, stream)


def sparse_prefill(q, kv, indices, softmax_scale, *, topk_length=None, kv_format=None,
                   out=None, lse=None, out_dtype=None, workspace=None, stream=None):
    """Sparse prefill over a flat key array: q [s_q, h_q, 576], kv [s_kv, 576] (or
    [s_kv, 656] uint8 / float8_e4m3fn fp8_ds_mla entries, read dequantised; kv_format
    None takes the format from kv's dtype), indices [s_q, topk] int32 rows of kv (-1: none),
    topk_length optional [s_q] int32 (entries j >= topk_length[i] of token i ignored)
    -> (out [s_q, h_q, 512], lse [s_q, h_q]).
    A prompt chunk selecting among a cached prefix and its own keys passes kv = prefix rows
    followed by the chunk's, indices into that array. `workspace` as for sparse_decode."""
    if _call.torch_compiling() and out is None and lse is None and out_dtype is None and \
            topk_length is None and kv_format is None and int(kv.shape[-1]) == 576:
        from . import torch_ops

        return torch_ops.sparse_prefill(q, kv, indices, softmax_scale)
    out, lse = _call.prefill_outputs(q, out, lse, out_dtype)
    return _run_sparse("mla_sparse_prefill", q, kv, indices, topk_length, softmax_scale, kv_format,
                       out, lse, workspace, stream)


def decompress_kv(c_kv, w_uk, w_uv, *, k_nope=None, v=None, out_dtype=None, stream=None):
    """Per-head keys and values from latents: c_kv [N, d_c], w_uk [h, d_nope, d_c],
    w_uv [h, d_v, d_c] -> (k_nope [N, h, d_nope], v [N, h, d_v])."""
    if _call.torch_compiling() and k_nope is None and v is None and out_dtype is None:
        from . import torch_ops

        return torch_ops.decompress_kv(c_kv, w_uk, w_uv)
    cs, ks, vs = (tuple(getattr(x, "shape", ())) for x in (c_kv, w_uk, w_uv))
    od = out_dtype_arg(out_dtype) or float_out(c_kv)
    if k_nope is None and len(cs) == 2 and len(ks) == 3:
        k_nope = _call.empty(c_kv, (cs[0], ks[0], ks[1]), od)
    if v is None and len(cs) == 2 and len(vs) == 3:
        v = _call.empty(c_kv, (cs[0], vs[0], vs[1]), od)
    st = _call.stream_handle(c_kv, stream)
    _call.run("mla_decompress_kv", c_kv, st, c_kv, w_uk, w_uv, k_nope, v, st)
    return k_nope, v


def mha_prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal=True, *, out=None,
                lse=None, out_dtype=None, stream=None):
    """Causal (bottom-right aligned) multi-head attention over packed variable-length
    sequences: q [T, h, d_qk], k [Tk, h, d_qk], v [Tk, h, d_v], cu_seqlens [B+1] int32
    -> (out [T, h, d_v], lse [h, T])."""
    if _call.torch_compiling() and out is None and lse is None and out_dtype is None:
        from . import torch_ops

        return torch_ops.mha_prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale,
                                     flag(causal, "causal"))
    qs, vs = tuple(getattr(q, "shape", ())), tuple(getattr(v, "shape", ()))
    od = out_dtype_arg(out_dtype) or float_out(q)
    if out is None and len(qs) == 3 and len(vs) == 3:
        out = _call.empty(q, (qs[0], qs[1], vs[2]), od)
    if lse is None and len(qs) == 3:
        lse = _call.empty(q, (qs[1], qs[0]), "f64" if od == "f64" else "f32")
    st = _call.stream_handle(q, stream)
    _call.run("mla_mha_prefill", q, st, q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale,
              flag(causal, "causal"), out, lse, st)
    return out, lse
