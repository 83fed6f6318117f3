"""DSA's token selection and sparse attention, and the non-absorbed prefill
(mla/topk.hpp, mla/sparse.hpp, mla/prefill.hpp), in the conventions of mla.ops."""

from __future__ import annotations

import ctypes

from . import _arrays
from ._dlpack import dtype_name
from .ops import D_V, _Call, _kv_format, _shape


def _float_out(x) -> str:
    d = dtype_name(x)
    return d if d in ("bf16", "f32", "f64") else "f32"


def topk_indices(logits, k: int = 2048, *, lengths=None, block_table=None, page_size: int = 64,
                 rows_per_request: int = 1, num_pages: int = -1, indices=None, stream=None):
    """Top-k positions of each row of logits [R, N] f32 among [0, lengths[r]) (all N when
    lengths is None), best first, ties by lower position, -1 padded: indices [R, k] int32.
    With block_table [B, max_pages], positions become global cache slots
    (request b = r // rows_per_request). k: a multiple of 64, at most 8192."""
    shape = _shape(logits, "logits", 2)
    if indices is None and shape is not None:
        indices = _arrays.empty(logits, (shape[0], k), "i32")
    c = _Call(logits, stream)
    c.run("mla_topk_indices", c.t(logits, "logits"), c.t(lengths, "lengths"), int(k),
          c.t(indices, "indices", True), c.t(block_table, "block_table"), int(page_size),
          int(rows_per_request), int(num_pages), c.stream_arg)
    return indices


def _run_with_workspace(c, q, fn, args, workspace):
    """Runs `fn`_ws with `workspace` (any byte buffer on q's device), allocated
    with q's framework when not given and the call needs scratch."""
    if workspace is None:
        n = ctypes.c_size_t(0)
        c.run(fn + "_workspace_size", *args[:-1], ctypes.byref(n))
        if n.value:
            workspace = _arrays.empty(q, (n.value,), "u8")
    ws_t = c.t(workspace, "workspace", True) if workspace is not None else None
    ws_ptr = ctypes.c_void_p(ws_t._obj.data) if ws_t is not None else None
    ws_bytes = _arrays.nbytes(workspace) if workspace is not None else 0
    c.run(fn + "_ws", *args[:-1], ws_ptr, ws_bytes, args[-1])


def _sparse_decode_outputs(q, out, lse, out_dtype):
    shape = _shape(q, "q", 4)
    if shape is not None:
        B, s_q, h_q, _ = shape
        od = out_dtype or _float_out(q)
        if out is None:
            out = _arrays.empty(q, (B, s_q, h_q, D_V), od)
        if lse is None:
            lse = _arrays.empty(q, (B, h_q, s_q), "f64" if od == "f64" else "f32")
    return out, lse


def _sparse_prefill_outputs(q, out, lse, out_dtype):
    shape = _shape(q, "q", 3)
    if shape is not None:
        s_q, h_q, _ = shape
        od = out_dtype or _float_out(q)
        if out is None:
            out = _arrays.empty(q, (s_q, h_q, D_V), od)
        if lse is None:
            lse = _arrays.empty(q, (s_q, h_q), "f64" if od == "f64" else "f32")
    return out, lse


def sparse_decode_workspace_size(q, kv, indices, softmax_scale, *, topk_length=None,
                                 kv_format=None, out=None, lse=None, out_dtype=None) -> int:
    """Scratch bytes sparse_decode needs for these arguments (0 on the CPU): allocate
    once and pass it as `workspace=` to keep allocations out of a hot loop."""
    fmt = _kv_format(kv, kv_format)
    out, lse = _sparse_decode_outputs(q, out, lse, out_dtype)
    c = _Call(q)
    n = ctypes.c_size_t(0)
    c.run("mla_sparse_decode_workspace_size", c.t(q, "q"), c.cache(kv, "kv", fmt), fmt,
          c.t(indices, "indices"), c.t(topk_length, "topk_length"),
          ctypes.c_float(softmax_scale), c.t(out, "out", True), c.t(lse, "lse", True),
          ctypes.byref(n))
    return n.value


def sparse_prefill_workspace_size(q, kv, indices, softmax_scale, *, out=None, lse=None,
                                  out_dtype=None) -> int:
    """Scratch bytes sparse_prefill needs for these arguments (0 on the CPU)."""
    out, lse = _sparse_prefill_outputs(q, out, lse, out_dtype)
    c = _Call(q)
    n = ctypes.c_size_t(0)
    c.run("mla_sparse_prefill_workspace_size", c.t(q, "q"), c.t(kv, "kv"),
          c.t(indices, "indices"), ctypes.c_float(softmax_scale), c.t(out, "out", True),
          c.t(lse, "lse", True), ctypes.byref(n))
    return n.value


def sparse_decode(q, kv, indices, softmax_scale, *, topk_length=None, kv_format=None, out=None,
                  lse=None, out_dtype=None, workspace=None, stream=None):
    """Sparse absorbed decode: q [B, s_q, h_q, 576] attends to the cache slots of
    indices [B, s_q, topk] int32 (-1: none; no causal mask, the list is the mask).
    Returns (out [B, s_q, h_q, 512], lse [B, h_q, s_q]); no valid entry: out 0, lse -inf.
    `workspace` (bytes on q's device) is allocated with q's framework when not given."""
    fmt = _kv_format(kv, kv_format)
    out, lse = _sparse_decode_outputs(q, out, lse, out_dtype)
    c = _Call(q, stream)
    _run_with_workspace(c, q, "mla_sparse_decode",
                        (c.t(q, "q"), c.cache(kv, "kv", fmt), fmt, c.t(indices, "indices"),
                         c.t(topk_length, "topk_length"), ctypes.c_float(softmax_scale),
                         c.t(out, "out", True), c.t(lse, "lse", True), c.stream_arg), workspace)
    return out, lse


def sparse_prefill(q, kv, indices, softmax_scale, *, out=None, lse=None, out_dtype=None,
                   workspace=None, stream=None):
    """Sparse prefill over a flat key array: q [s_q, h_q, 576], kv [s_kv, 576],
    indices [s_q, topk] int32 rows of kv (-1: none) -> (out [s_q, h_q, 512], lse [s_q, h_q]).
    `workspace` as for sparse_decode."""
    out, lse = _sparse_prefill_outputs(q, out, lse, out_dtype)
    c = _Call(q, stream)
    _run_with_workspace(c, q, "mla_sparse_prefill",
                        (c.t(q, "q"), c.t(kv, "kv"), c.t(indices, "indices"),
                         ctypes.c_float(softmax_scale), c.t(out, "out", True),
                         c.t(lse, "lse", True), c.stream_arg), workspace)
    return out, lse


def decompress_kv(c_kv, w_uk, w_uv, *, k_nope=None, v=None, out_dtype=None, stream=None):
    """Per-head keys and values from latents: c_kv [N, d_c], w_uk [h, d_nope, d_c],
    w_uv [h, d_v, d_c] -> (k_nope [N, h, d_nope], v [N, h, d_v])."""
    cs, ks, vs = (tuple(getattr(x, "shape", ())) for x in (c_kv, w_uk, w_uv))
    od = out_dtype or _float_out(c_kv)
    if k_nope is None and len(cs) == 2 and len(ks) == 3:
        k_nope = _arrays.empty(c_kv, (cs[0], ks[0], ks[1]), od)
    if v is None and len(cs) == 2 and len(vs) == 3:
        v = _arrays.empty(c_kv, (cs[0], vs[0], vs[1]), od)
    c = _Call(c_kv, stream)
    c.run("mla_decompress_kv", c.t(c_kv, "c_kv"), c.t(w_uk, "w_uk"), c.t(w_uv, "w_uv"),
          c.t(k_nope, "k_nope", True), c.t(v, "v", True), c.stream_arg)
    return k_nope, v


def mha_prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal=True, *, out=None,
                lse=None, out_dtype=None, stream=None):
    """Causal (bottom-right aligned) multi-head attention over packed variable-length
    sequences: q [T, h, d_qk], k [Tk, h, d_qk], v [Tk, h, d_v], cu_seqlens [B+1] int32
    -> (out [T, h, d_v], lse [h, T])."""
    qs, vs = tuple(getattr(q, "shape", ())), tuple(getattr(v, "shape", ()))
    od = out_dtype or _float_out(q)
    if out is None and len(qs) == 3 and len(vs) == 3:
        out = _arrays.empty(q, (qs[0], qs[1], vs[2]), od)
    if lse is None and len(qs) == 3:
        lse = _arrays.empty(q, (qs[1], qs[0]), "f64" if od == "f64" else "f32")
    c = _Call(q, stream)
    c.run("mla_mha_prefill", c.t(q, "q"), c.t(k, "k"), c.t(v, "v"),
          c.t(cu_seqlens_q, "cu_seqlens_q"), c.t(cu_seqlens_k, "cu_seqlens_k"),
          ctypes.c_float(softmax_scale), int(bool(causal)), c.t(out, "out", True),
          c.t(lse, "lse", True), c.stream_arg)
    return out, lse
