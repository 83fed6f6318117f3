"""The native mla API in Python: one function per C++ operation, same names.

Every function takes arrays of any supported framework (NumPy, torch, CuPy,
JAX: see mla._dlpack), allocates the outputs it returns with the framework of
its first array argument and on its device, and runs:
  * CPU arrays: the exact CPU reference (fp64 accumulation);
  * CUDA arrays: the CUDA kernels, queued on the caller's current stream
    (torch: torch.cuda.current_stream(); CuPy: its current stream; others: the
    legacy default stream), or on `stream=` when given.
Errors raise the mla.errors class of the C++ Errc, with the C++ message.
"""

from __future__ import annotations

import ctypes

from . import _arrays, errors
from ._dlpack import as_tensor, dtype_name
from ._lib import DTYPE_CODES, KV_FORMATS, lib

D_C, D_R, D_QK, D_V = 512, 64, 576, 512
KV_ENTRY_BYTES = {"bf16": 1152, "fp8_ds_mla": 656}


class _Call:
    """Converts the arguments of one C call; keeps DLPack capsules alive through it."""

    def __init__(self, like, stream=None):
        self.keep: list = []
        self.like = like
        self.stream = _arrays.stream_handle(like, stream)

    def t(self, x, name: str, writable: bool = False):
        return as_tensor(x, name, self.keep, writable=writable, dlpack_stream=self.stream)

    def cache(self, x, name: str, fmt: int):
        """A cache view; an fp8 cache given as float8_e4m3fn bytes is passed as u8."""
        ref = self.t(x, name, writable=True)
        if ref is not None and fmt == KV_FORMATS["fp8_ds_mla"] and \
                ref._obj.dtype == DTYPE_CODES["e4m3"]:
            ref._obj.dtype = DTYPE_CODES["u8"]
        return ref

    @property
    def stream_arg(self):
        return ctypes.c_void_p(self.stream) if self.stream else None

    def run(self, fn: str, *args) -> None:
        with _arrays.device_guard(self.like):
            lib().call(fn, *args)


def _kv_format(cache, kv_format) -> int:
    """MLA_KV_* code: given by name, or from the cache's dtype (bf16 / u8 or e4m3 bytes)."""
    if kv_format is None:
        try:
            dt = dtype_name(cache)
        except errors.DTypeError:
            dt = "?"
        kv_format = "fp8_ds_mla" if dt in ("u8", "e4m3") else "bf16"
    if isinstance(kv_format, str):
        if kv_format not in KV_FORMATS:
            raise errors.InvalidValueError(
                f"kv_format = {kv_format!r} is neither 'bf16' nor 'fp8_ds_mla'")
        return KV_FORMATS[kv_format]
    return int(kv_format)


def _shape(x, name: str, rank: int) -> tuple:
    """x's shape when it has `rank` dims; otherwise None (the C++ check then names it)."""
    shape = tuple(getattr(x, "shape", ()))
    return shape if len(shape) == rank else None


# ---- library ------------------------------------------------------------------


def version() -> str:
    return lib().version


def built_with_cuda() -> bool:
    return lib().built_with_cuda


# ---- paged latent cache (mla/kv_cache.hpp) --------------------------------------


def empty_kv_cache(num_pages: int, page_size: int, kv_format: str = "bf16", like=None):
    """An uninitialised paged cache [num_pages, page_size, 1, entry] beside `like`
    (NumPy on the CPU when `like` is None): bf16 [.., 576] or u8 [.., 656]."""
    if kv_format not in KV_FORMATS:
        raise errors.InvalidValueError(
            f"kv_format = {kv_format!r} is neither 'bf16' nor 'fp8_ds_mla'")
    if like is None:
        import numpy as np

        like = np.empty(0, np.float32)
    if kv_format == "bf16":
        return _arrays.empty(like, (num_pages, page_size, 1, D_QK), "bf16")
    return _arrays.empty(like, (num_pages, page_size, 1, KV_ENTRY_BYTES["fp8_ds_mla"]), "u8")


def validate_kv_cache(cache, kv_format=None) -> None:
    """Raises the mla error a cache view would get from any operation, or returns None."""
    fmt = _kv_format(cache, kv_format)
    c = _Call(cache)
    c.run("mla_validate_kv_cache", c.cache(cache, "cache", fmt), fmt)


def append_kv(c_kv, k_rope, slots, cache, kv_format=None, *, stream=None):
    """Writes T tokens into `cache` at global slots (page * page_size + offset).

    c_kv [T, 512], k_rope [T, 64] (f32 or bf16); slots [T] int64, -1 skips a token.
    A bf16 cache stores the values rounded to bf16; an fp8_ds_mla cache stores
    FlashMLA's 656-byte quantised entry. Returns `cache` (written in place).
    """
    fmt = _kv_format(cache, kv_format)
    c = _Call(cache, stream)
    c.run("mla_append_kv", c.t(c_kv, "c_kv"), c.t(k_rope, "k_rope"), c.t(slots, "slots"),
          c.cache(cache, "cache", fmt), fmt, c.stream_arg)
    return cache


def read_kv(cache, slots, kv_format=None, *, c_kv=None, k_rope=None, stream=None):
    """Reads T tokens back, dequantised: returns (c_kv [T, 512] f32, k_rope [T, 64] f32)."""
    fmt = _kv_format(cache, kv_format)
    shape = _shape(slots, "slots", 1)
    T = shape[0] if shape else 0
    if c_kv is None:
        c_kv = _arrays.empty(cache, (T, D_C), "f32")
    if k_rope is None:
        k_rope = _arrays.empty(cache, (T, D_R), "f32")
    c = _Call(cache, stream)
    c.run("mla_read_kv", c.cache(cache, "cache", fmt), fmt, c.t(slots, "slots"),
          c.t(c_kv, "c_kv", True), c.t(k_rope, "k_rope", True), c.stream_arg)
    return c_kv, k_rope


# ---- absorbed decode (mla/decode.hpp) ---------------------------------------------


def _decode_outputs(q, out, lse, out_dtype, partial: bool):
    shape = _shape(q, "q", 4)
    if shape is None:
        return out, lse  # q's rank is wrong: left to the C++ check, which names q
    B, s_q, h_q, _ = shape
    if out is None:
        if out_dtype is None:
            qd = dtype_name(q)
            out_dtype = "f32" if partial else (qd if qd in ("bf16", "f32", "f64") else "f32")
        out = _arrays.empty(q, (B, s_q, h_q, D_V), out_dtype)
    if lse is None:
        lse = _arrays.empty(q, (B, h_q, s_q), "f64" if out_dtype == "f64" else "f32")
    return out, lse


def _decode_common(c: _Call, q, kv, fmt, block_table, cache_seqlens, softmax_scale, causal):
    return (c.t(q, "q"), c.cache(kv, "kv", fmt), fmt, c.t(block_table, "block_table"),
            c.t(cache_seqlens, "cache_seqlens"), ctypes.c_float(softmax_scale), int(bool(causal)))


def decode_workspace_size(q, kv, block_table, cache_seqlens, softmax_scale, causal=True, *,
                          kv_format=None, out=None, lse=None, out_dtype=None,
                          batch_invariant=False) -> int:
    """Scratch bytes mla_decode needs for these shapes (0 on the CPU)."""
    fmt = _kv_format(kv, kv_format)
    out, lse = _decode_outputs(q, out, lse, out_dtype, partial=False)
    c = _Call(q)
    n = ctypes.c_size_t(0)
    c.run("mla_decode_workspace_size",
          *_decode_common(c, q, kv, fmt, block_table, cache_seqlens, softmax_scale, causal),
          c.t(out, "out", True), c.t(lse, "lse", True), int(bool(batch_invariant)),
          ctypes.byref(n))
    return n.value


def mla_decode(q, kv, block_table, cache_seqlens, softmax_scale, causal=True, *, kv_format=None,
               out=None, lse=None, out_dtype=None, batch_invariant=False, workspace=None,
               stream=None):
    """Absorbed MLA decode over a paged latent cache (DESIGN.md section 1).

    q [B, s_q, h_q, 576]; kv [num_pages, page_size, 1, 576] bf16 or [.., 656] u8
    (fp8_ds_mla); block_table [B, max_pages] int32; cache_seqlens [B] int32 (the
    s_q new tokens included). Returns (out [B, s_q, h_q, 512], lse [B, h_q, s_q]
    f32, natural log); a query that sees no key gets out 0 and lse -inf.
    out's dtype defaults to q's (bf16 on CUDA). `workspace` (any byte buffer on
    q's device) is allocated with q's framework when not given.
    """
    fmt = _kv_format(kv, kv_format)
    out, lse = _decode_outputs(q, out, lse, out_dtype, partial=False)
    c = _Call(q, stream)
    common = _decode_common(c, q, kv, fmt, block_table, cache_seqlens, softmax_scale, causal)
    out_t, lse_t = c.t(out, "out", True), c.t(lse, "lse", True)
    if workspace is None:
        n = ctypes.c_size_t(0)
        c.run("mla_decode_workspace_size", *common, out_t, lse_t, int(bool(batch_invariant)),
              ctypes.byref(n))
        if n.value:
            workspace = _arrays.empty(q, (n.value,), "u8")
    ws_t = c.t(workspace, "workspace", True) if workspace is not None else None
    ws_ptr = ctypes.c_void_p(ws_t._obj.data) if ws_t is not None else None
    ws_bytes = _arrays.nbytes(workspace) if workspace is not None else 0
    c.run("mla_decode", *common, out_t, lse_t, int(bool(batch_invariant)), ws_ptr, ws_bytes,
          c.stream_arg)
    return out, lse


def mla_decode_partial(q, kv, block_table, cache_seqlens, kv_begin, kv_end, softmax_scale,
                       causal=True, *, kv_format=None, out=None, lse=None, out_dtype=None,
                       stream=None):
    """Decode over keys [kv_begin[b], kv_end[b]) of each request only (the causal
    limit still applies). Returns (out f32 [B, s_q, h_q, 512], lse [B, h_q, s_q]);
    an empty range gives out 0 and lse -inf. Pieces for checking split-KV."""
    fmt = _kv_format(kv, kv_format)
    out, lse = _decode_outputs(q, out, lse, out_dtype, partial=True)
    c = _Call(q, stream)
    c.run("mla_decode_partial",
          *_decode_common(c, q, kv, fmt, block_table, cache_seqlens, softmax_scale, causal),
          c.t(kv_begin, "kv_begin"), c.t(kv_end, "kv_end"), c.t(out, "out", True),
          c.t(lse, "lse", True), c.stream_arg)
    return out, lse


def merge_attn_partials(partial_out, partial_lse, *, out=None, lse=None, out_dtype="f32",
                        stream=None):
    """Merges S partial results by log-sum-exp.

    partial_out [S, R..., D] f32, partial_lse [S, R...] f32 -> (out [R..., D]
    in out_dtype, lse [R...] f32). Rows whose partials are all -inf get out 0
    and lse -inf.
    """
    po_shape = tuple(getattr(partial_out, "shape", ()))
    pl_shape = tuple(getattr(partial_lse, "shape", ()))
    if out is None and len(po_shape) >= 2:
        out = _arrays.empty(partial_out, po_shape[1:], out_dtype)
    if lse is None and len(pl_shape) >= 2:
        lse = _arrays.empty(partial_out, pl_shape[1:], "f64" if out_dtype == "f64" else "f32")
    c = _Call(partial_out, stream)
    c.run("mla_merge_attn_partials", c.t(partial_out, "partial_out"),
          c.t(partial_lse, "partial_lse"), c.t(out, "out", True), c.t(lse, "lse", True),
          c.stream_arg)
    return out, lse


decode = mla_decode  # short alias


# ---- lightning indexer (mla/indexer.hpp) ------------------------------------------

INDEXER_HEADS, INDEXER_DIM, INDEXER_PAGE_TOKENS, INDEXER_PAGE_BYTES = 64, 128, 64, 8448


def empty_indexer_cache(num_pages: int, like=None):
    """An uninitialised indexer key cache [num_pages, 8448] u8 (64 tokens a page)."""
    if like is None:
        import numpy as np

        like = np.empty(0, np.float32)
    return _arrays.empty(like, (num_pages, INDEXER_PAGE_BYTES), "u8")


def validate_indexer_cache(cache) -> None:
    c = _Call(cache)
    c.run("mla_validate_indexer_cache", c.t(cache, "cache"))


def append_indexer_keys(keys, slots, cache, *, stream=None):
    """Quantises keys [T, 128] (f32/bf16) per token into the indexer cache at
    slots [T] int64 (page * 64 + offset; -1 skips). Returns `cache`."""
    c = _Call(cache, stream)
    c.run("mla_append_indexer_keys", c.t(keys, "keys"), c.t(slots, "slots"),
          c.t(cache, "cache", True), c.stream_arg)
    return cache


def quantize_indexer_query(q, weights, *, q8=None, w_folded=None, stream=None):
    """q [.., 64, 128] f32/bf16, weights [.., 64] f32 -> (q8 e4m3 [.., 64, 128],
    w_folded f32 [.., 64] = w * 64^-0.5 * s_q * 128^-0.5)."""
    shape = tuple(getattr(q, "shape", ()))
    if q8 is None and len(shape) >= 2:
        q8 = _arrays.empty(q, shape, "e4m3")
    if w_folded is None and len(shape) >= 2:
        w_folded = _arrays.empty(q, shape[:-1], "f32")
    c = _Call(q, stream)
    c.run("mla_quantize_indexer_query", c.t(q, "q"), c.t(weights, "weights"),
          c.t(q8, "q8", True), c.t(w_folded, "w_folded", True), c.stream_arg)
    return q8, w_folded


def indexer_logits_decode(q8, w_folded, cache, block_table, cache_seqlens, *, max_len=None,
                          logits=None, stream=None):
    """Indexer logits over the paged key cache: logits [B, s_q, max_len] f32, -inf
    past each new token's causal limit. max_len defaults to the block table's
    capacity (max_pages * 64), which needs no read of cache_seqlens."""
    shape = _shape(q8, "q8", 4)
    if logits is None and shape is not None:
        bt = tuple(getattr(block_table, "shape", ()))
        if max_len is None:
            max_len = bt[1] * INDEXER_PAGE_TOKENS if len(bt) == 2 else 0
        logits = _arrays.empty(q8, (shape[0], shape[1], max_len), "f32")
    c = _Call(q8, stream)
    c.run("mla_indexer_logits_decode", c.t(q8, "q8"), c.t(w_folded, "w_folded"),
          c.t(cache, "cache"), c.t(block_table, "block_table"),
          c.t(cache_seqlens, "cache_seqlens"), c.t(logits, "logits", True), c.stream_arg)
    return logits


def indexer_logits_prefill(q8, w_folded, k8, k_scale, k_start, k_end, *, logits=None,
                           stream=None):
    """Indexer logits over a flat key array (DeepGEMM's shapes): q8 [T, 64, 128],
    w_folded [T, 64], k8 [N, 128] e4m3, k_scale [N], k_start/k_end [T] int32 ->
    logits [T, N] f32, -inf outside [k_start[t], k_end[t])."""
    qs, ks = tuple(getattr(q8, "shape", ())), tuple(getattr(k8, "shape", ()))
    if logits is None and len(qs) == 3 and len(ks) == 2:
        logits = _arrays.empty(q8, (qs[0], ks[0]), "f32")
    c = _Call(q8, stream)
    c.run("mla_indexer_logits_prefill", c.t(q8, "q8"), c.t(w_folded, "w_folded"),
          c.t(k8, "k8"), c.t(k_scale, "k_scale"), c.t(k_start, "k_start"),
          c.t(k_end, "k_end"), c.t(logits, "logits", True), c.stream_arg)
    return logits
