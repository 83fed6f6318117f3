"""The native mla API in Python: one function per C++ operation, same names.

Every function takes arrays of any supported framework (NumPy, torch, CuPy,
JAX: see mla._call), allocates the outputs it returns with the framework of
its first array argument and on its device, and runs:
  * CPU arrays: the exact CPU reference (fp64 accumulation);
  * CUDA arrays: the CUDA kernels, queued on the caller's current stream
    (torch: torch.cuda.current_stream(); CuPy: its current stream; others: the
    legacy default stream), or on `stream=` when given.
Errors raise the mla.errors class of the C++ Errc, with the C++ message.
"""

from __future__ import annotations

from . import _call, errors
from ._call import D_C, D_QK, D_R, D_V, kv_format_code
from ._lib import KV_FORMATS, choice, flag, lib

KV_ENTRY_BYTES = {"bf16": 1152, "fp8_ds_mla": 656, "fp8_e4m3": 576}


# ---- library ------------------------------------------------------------------


def version() -> str:
    return lib().version


def built_with_cuda() -> bool:
    return lib().built_with_cuda


# ---- paged latent cache (mla/kv_cache.hpp) --------------------------------------


def empty_kv_cache(num_pages: int, page_size: int, kv_format: str = "bf16", like=None):
    """An uninitialised paged cache [num_pages, page_size, 1, entry] beside `like`
    (NumPy on the CPU when `like` is None): bf16 [.., 576], u8 [.., 656] (fp8_ds_mla)
    or u8 [.., 576] (fp8_e4m3: its scale goes with mla.kv_scale)."""
    choice(kv_format, KV_FORMATS, "kv_format")
    like = _call.like_arg(like)
    dims = {"num_pages": num_pages, "page_size": page_size, "#0": 1}
    if kv_format == "bf16":
        return _call.empty_sized(like, dict(dims, **{"#1": D_QK}), "bf16")
    return _call.empty_sized(like, dict(dims, **{"#1": KV_ENTRY_BYTES[kv_format]}), "u8")


def validate_kv_cache(cache, kv_format=None) -> None:
    """Raises the mla error a cache view would get from any operation, or returns None."""
    _call.run("mla_validate_kv_cache", cache, None, cache, kv_format_code(kv_format))


def append_kv(c_kv, k_rope, slots, cache, kv_format=None, *, stream=None):
    """Writes T tokens into `cache` at global slots (page * page_size + offset).

    c_kv [T, 512], k_rope [T, 64] (f32 or bf16); slots [T] int64, -1 skips a token.
    A bf16 cache stores the values rounded to bf16; an fp8_ds_mla cache stores
    FlashMLA's 656-byte quantised entry; an fp8_e4m3 cache stores e4m3(v / scale)
    (RNE, saturating to +-448) with the scale set by mla.kv_scale. Returns `cache`
    (written in place).
    """
    if _call.torch_compiling():
        from . import torch_ops

        torch_ops.append_kv(c_kv, k_rope, slots, cache, kv_format_code(kv_format))
        return cache
    st = _call.stream_handle(cache, stream)
    _call.run("mla_append_kv", cache, st, c_kv, k_rope, slots, cache, kv_format_code(kv_format),
              st)
    return cache


def read_kv(cache, slots, kv_format=None, *, c_kv=None, k_rope=None, stream=None):
    """Reads T tokens back, dequantised: returns (c_kv [T, 512] f32, k_rope [T, 64] f32)."""
    if _call.torch_compiling() and c_kv is None and k_rope is None:
        from . import torch_ops

        return torch_ops.read_kv(cache, slots, kv_format_code(kv_format))
    shape = _call.shape_of(slots, 1)
    T = shape[0] if shape else 0
    if c_kv is None:
        c_kv = _call.empty(cache, (T, D_C), "f32")
    if k_rope is None:
        k_rope = _call.empty(cache, (T, D_R), "f32")
    st = _call.stream_handle(cache, stream)
    _call.run("mla_read_kv", cache, st, cache, kv_format_code(kv_format), slots, c_kv, k_rope, st)
    return c_kv, k_rope


# ---- absorbed decode (mla/decode.hpp) ---------------------------------------------


def decode_workspace_size(q, kv, block_table, cache_seqlens, softmax_scale, causal=True, *,
                          kv_format=None, out=None, lse=None, out_dtype=None,
                          batch_invariant=False) -> int:
    """Scratch bytes mla_decode needs for these shapes (0 on the CPU)."""
    out, lse = _call.decode_outputs(q, out, lse, out_dtype)
    return _call.run("mla_decode_workspace_size", q, None, q, kv, kv_format_code(kv_format),
                     block_table, cache_seqlens, softmax_scale, flag(causal, "causal"), out, lse,
                     flag(batch_invariant, "batch_invariant"))


def mla_decode(q, kv, block_table, cache_seqlens, softmax_scale, causal=True, *, kv_format=None,
               out=None, lse=None, out_dtype=None, batch_invariant=False, workspace=None,
               stream=None, plan=None):
    """Absorbed MLA decode over a paged latent cache (docs/design.md).

    q [B, s_q, h_q, 576]; kv [num_pages, page_size, 1, 576] bf16 or [.., 656] u8
    (fp8_ds_mla); block_table [B, max_pages] int32; cache_seqlens [B] int32 (the
    s_q new tokens included). Returns (out [B, s_q, h_q, 512], lse [B, h_q, s_q]
    f32, natural log); a query that sees no key gets out 0 and lse -inf.
    out's dtype defaults to q's (bf16 on CUDA). `workspace` (any byte buffer on
    q's device) is allocated with q's framework when not given (torch CUDA on the
    current stream: one per stream is kept, see mla.release_workspaces).
    `plan`: a mla.DecodePlan made by mla.decode_plan for these shapes and lengths
    (one per step, reused by every layer): the call reads its schedule instead of
    computing one, and uses its workspace unless `workspace` is given.
    """
    if _call.torch_compiling():  # (a plan only saves the schedule: the bits are the same)
        from . import torch_ops

        if out is None and lse is None and out_dtype is None:
            return torch_ops.decode(q, kv, block_table, cache_seqlens, softmax_scale,
                                    flag(causal, "causal"), kv_format_code(kv_format),
                                    flag(batch_invariant, "batch_invariant"))
        out, lse = _call.decode_outputs(q, out, lse, out_dtype)
        torch_ops.decode_out(q, kv, block_table, cache_seqlens, softmax_scale,
                             flag(causal, "causal"), kv_format_code(kv_format),
                             flag(batch_invariant, "batch_invariant"), out, lse)
        return out, lse
    if out is None and lse is None and out_dtype is None and workspace is None and \
            stream is None:
        fast = _call.torch_ext_for(q)  # torch CUDA: the C++ hot path, when built
        if fast is not None:
            extra = () if plan is None else (plan.workspace, plan._record)
            res = fast.decode(q, kv, kv_format_code(kv_format), block_table, cache_seqlens,
                              softmax_scale, flag(causal, "causal"),
                              flag(batch_invariant, "batch_invariant"), False, *extra)
            if res is not NotImplemented:  # (an argument of another framework)
                return res
    out, lse = _call.decode_outputs(q, out, lse, out_dtype)
    if plan is not None:
        from .plans import decode_planned

        decode_planned(q, kv, block_table, cache_seqlens, softmax_scale, flag(causal, "causal"),
                       kv_format, flag(batch_invariant, "batch_invariant"), out, lse, plan,
                       workspace, stream)
        return out, lse
    st = _call.stream_handle(q, stream)
    _call.run_with_workspace("mla_decode", q, st, workspace, q, kv, kv_format_code(kv_format),
                             block_table, cache_seqlens, softmax_scale, flag(causal, "causal"),
                             out, lse, flag(batch_invariant, "batch_invariant"),
                             current_stream=stream is None)
    return out, lse


def mla_decode_partial(q, kv, block_table, cache_seqlens, kv_begin, kv_end, softmax_scale,
                       causal=True, *, kv_format=None, out=None, lse=None, out_dtype=None,
                       stream=None):
    """Decode over keys [kv_begin[b], kv_end[b]) of each request only (the causal
    limit still applies). Returns (out f32 [B, s_q, h_q, 512], lse [B, h_q, s_q]);
    an empty range gives out 0 and lse -inf. Pieces for checking split-KV."""
    out, lse = _call.decode_outputs(q, out, lse, out_dtype, partial=True)
    st = _call.stream_handle(q, stream)
    _call.run("mla_decode_partial", q, st, q, kv, kv_format_code(kv_format), block_table,
              cache_seqlens, softmax_scale, flag(causal, "causal"), kv_begin, kv_end, out, lse, st)
    return out, lse


def merge_attn_partials(partial_out, partial_lse, *, out=None, lse=None, out_dtype="f32",
                        stream=None):
    """Merges S partial results by log-sum-exp.

    partial_out [S, R..., D] f32, partial_lse [S, R...] f32 -> (out [R..., D]
    in out_dtype, lse [R...] f32). Rows whose partials are all -inf get out 0
    and lse -inf.
    """
    if _call.torch_compiling() and out is None and lse is None and out_dtype == "f32":
        from . import torch_ops

        return torch_ops.merge_attn_partials(partial_out, partial_lse)
    out_dtype = _call.out_dtype_arg(out_dtype) or "f32"
    po_shape = tuple(getattr(partial_out, "shape", ()))
    pl_shape = tuple(getattr(partial_lse, "shape", ()))
    if out is None and len(po_shape) >= 2:
        out = _call.empty(partial_out, po_shape[1:], out_dtype)
    if lse is None and len(pl_shape) >= 2:
        lse = _call.empty(partial_out, pl_shape[1:], "f64" if out_dtype == "f64" else "f32")
    st = _call.stream_handle(partial_out, stream)
    _call.run("mla_merge_attn_partials", partial_out, st, partial_out, partial_lse, out, lse, st)
    return out, lse


decode = mla_decode  # short alias


# ---- lightning indexer (mla/indexer.hpp) ------------------------------------------

INDEXER_HEADS, INDEXER_DIM, INDEXER_PAGE_TOKENS, INDEXER_PAGE_BYTES = 64, 128, 64, 8448


def empty_indexer_cache(num_pages: int, like=None):
    """An uninitialised indexer key cache [num_pages, 8448] u8 (64 tokens a page)."""
    like = _call.like_arg(like)
    return _call.empty_sized(like, {"num_pages": num_pages, "#0": INDEXER_PAGE_BYTES}, "u8")


def validate_indexer_cache(cache) -> None:
    _call.run("mla_validate_indexer_cache", cache, None, cache)


def append_indexer_keys(keys, slots, cache, *, stream=None):
    """Quantises keys [T, 128] (f32/bf16) per token into the indexer cache at
    slots [T] int64 (page * 64 + offset; -1 skips). Returns `cache`."""
    if _call.torch_compiling():
        from . import torch_ops

        torch_ops.append_indexer_keys(keys, slots, cache)
        return cache
    st = _call.stream_handle(cache, stream)
    _call.run("mla_append_indexer_keys", cache, st, keys, slots, cache, st)
    return cache


def quantize_indexer_query(q, weights, *, q8=None, w_folded=None, stream=None):
    """q [.., 64, 128] f32/bf16, weights [.., 64] f32 -> (q8 e4m3 [.., 64, 128],
    w_folded f32 [.., 64] = w * 64^-0.5 * s_q * 128^-0.5)."""
    if _call.torch_compiling() and q8 is None and w_folded is None:
        from . import torch_ops

        return torch_ops.quantize_indexer_query(q, weights)
    shape = tuple(getattr(q, "shape", ()))
    if q8 is None and len(shape) >= 2:
        q8 = _call.empty(q, shape, "e4m3")
    if w_folded is None and len(shape) >= 2:
        w_folded = _call.empty(q, shape[:-1], "f32")
    st = _call.stream_handle(q, stream)
    _call.run("mla_quantize_indexer_query", q, st, q, weights, q8, w_folded, st)
    return q8, w_folded


def indexer_logits_decode(q8, w_folded, cache, block_table, cache_seqlens, *, max_len=None,
                          logits=None, stream=None):
    """Indexer logits over the paged key cache: logits [B, s_q, max_len] f32, -inf
    past each new token's causal limit. max_len defaults to the block table's
    capacity (max_pages * 64), which needs no read of cache_seqlens."""
    if _call.torch_compiling() and logits is None:
        from . import torch_ops

        bt = tuple(block_table.shape)
        if max_len is None:
            max_len = bt[1] * INDEXER_PAGE_TOKENS if len(bt) == 2 else 0
        return torch_ops.indexer_logits_decode(q8, w_folded, cache, block_table,
                                               cache_seqlens, max_len)
    shape = _call.shape_of(q8, 4)
    if logits is None and shape is not None:
        bt = tuple(getattr(block_table, "shape", ()))
        if max_len is None:
            max_len = bt[1] * INDEXER_PAGE_TOKENS if len(bt) == 2 else 0
        logits = _call.empty_sized(q8, {"#0": shape[0], "#1": shape[1], "max_len": max_len},
                                   "f32")
    st = _call.stream_handle(q8, stream)
    _call.run("mla_indexer_logits_decode", q8, st, q8, w_folded, cache, block_table,
              cache_seqlens, logits, st)
    return logits


def indexer_logits_prefill(q8, w_folded, k8, k_scale, k_start, k_end, *, logits=None,
                           stream=None):
    """Indexer logits over a flat key array (DeepGEMM's shapes): q8 [T, 64, 128],
    w_folded [T, 64], k8 [N, 128] e4m3, k_scale [N], k_start/k_end [T] int32 ->
    logits [T, N] f32, -inf outside [k_start[t], k_end[t])."""
    if _call.torch_compiling() and logits is None:
        from . import torch_ops

        return torch_ops.indexer_logits_prefill(q8, w_folded, k8, k_scale, k_start, k_end)
    qs, ks = tuple(getattr(q8, "shape", ())), tuple(getattr(k8, "shape", ()))
    if logits is None and len(qs) == 3 and len(ks) == 2:
        logits = _call.empty(q8, (qs[0], ks[0]), "f32")
    st = _call.stream_handle(q8, stream)
    _call.run("mla_indexer_logits_prefill", q8, st, q8, w_folded, k8, k_scale, k_start, k_end,
              logits, st)
    return logits
