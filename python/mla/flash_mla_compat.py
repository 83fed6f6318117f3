"""FlashMLA's call shapes over mla: switch an engine by changing an import.

    from mla import flash_mla_compat as flash_mla

Both FlashMLA generations' call sequences work unchanged (docs/python.md):
  * older (SGLang): ``tile_md, num_splits = get_mla_metadata(cache_seqlens,
    num_q_tokens_per_head_k, num_heads_k)`` returns two int32 tensors on
    cache_seqlens' device ([num_sm_parts, 8] and [B + 1], FlashMLA's shapes), which
    may be ``copy_``-ed into CUDA-graph buffers and passed back as
    ``tile_scheduler_metadata`` / ``num_splits``. Their contents are not read: each call
    schedules itself (a plan needs the block table, whose capacity bounds each
    length, and the query's s_q and h_q, which this call does not receive).
  * newer (vLLM, FlashMLA's current API): ``get_mla_metadata()``, or with any of
    its newer arguments (num_heads_q, is_fp8_kvcache, topk), returns a
    :class:`FlashMLASchedMeta` and None. As FlashMLA's, the first dense call with it
    schedules (here: mla.decode_plan) and every later call with it reuses that
    schedule, so one object serves the layers of one step with the same lengths
    (vLLM sets tile_scheduler_metadata / num_splits on it).
  * vLLM's fp8 dense entry points ``get_mla_metadata_dense_fp8`` and
    ``flash_mla_with_kvcache_fp8``: the cache is mla's fp8_e4m3 format (576 e4m3
    codes per token, value = code * descale_k, descale_k a [1] f32 tensor, set
    around the call with mla.kv_scale). q may be fp8 with descale_q: it becomes
    bf16 as q * descale_q (one rounding to bf16, what a bf16 q of that value
    is), since mla's decode takes bf16 q; the product folds into q rather than
    the softmax scale, which is a host float (reading descale_q would sync).
  * lse: ours is -inf for a query that sees no key; FlashMLA reports +inf. This
    layer converts (one in-place op), so callers see FlashMLA's convention.
  * Sparse decode (``indices``, ``topk_length``) and flash_mla_sparse_fwd call
    mla.sparse_decode / mla.sparse_prefill; indices >= the number of keys (FlashMLA's
    other spelling of "none") become -1 first. attn_sink, extra_k_cache,
    extra_indices_in_kvcache, extra_topk_length and indexer_topk are not supported
    (UnsupportedError).
  * A metadata object whose tile_scheduler_metadata has one row (vLLM's
    batch-invariant single partition) runs our batch-invariant schedule.
  * Also accepted: NumPy arrays (CPU reference), not only torch CUDA tensors.
"""

from __future__ import annotations

import math

from . import _call, errors
from ._call import float_out, framework_of
from .dsa import sparse_decode, sparse_prefill
from .plans import decode_plan, decode_planned, sparse_decode_plan

TILE_SCHEDULER_METADATA_SIZE = 8  # FlashMLA's int32 words per SM partition
_BLOCK_M = 64  # FlashMLA's query rows per block (sets its number of SM partitions)


class FlashMLASchedMeta:
    """Scheduling state of FlashMLA's newer API: here, the decode workspace kept
    between calls (grown when a larger batch needs more). Engines may set
    tile_scheduler_metadata / num_splits on it (vLLM does); one row of
    tile_scheduler_metadata selects the batch-invariant schedule."""

    def __init__(self):
        self.workspace = None
        self.tile_scheduler_metadata = None
        self.num_splits = None
        self.have_initialized = False
        self.plan = None  # mla.DecodePlan of the dense decode, made by the first call
        self.sparse_plan = None  # the same for sparse decode (indices=)


_SM_COUNT: dict = {}


def _num_sm_parts(cache_seqlens, num_q_tokens_per_head_k: int, num_heads_k: int) -> int:
    """FlashMLA's partition count: SMs / heads_k / ceil(q tokens per head_k / 64);
    1 on the CPU. Independent of the batch, so one graph buffer fits every batch."""
    dev, idx = _call.device_of(cache_seqlens)
    if dev != "cuda":
        return 1
    sms = _SM_COUNT.get(idx)
    if sms is None:
        import torch

        sms = _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    per_head = max(1, -(-int(num_q_tokens_per_head_k) // _BLOCK_M))
    return max(1, sms // max(1, int(num_heads_k)) // per_head)


def _zeros(like, shape):
    if framework_of(like) == "torch":
        return _call.torch_module().zeros(shape, dtype=_call.torch_dtype("i32"),
                                           device=like.device)
    out = _call.empty(like, shape, "i32")
    out[...] = 0
    return out


_NOT_GIVEN = object()


def get_mla_metadata(cache_seqlens=None, num_q_tokens_per_head_k=None, num_heads_k=None,
                     num_heads_q=None, is_fp8_kvcache=_NOT_GIVEN, topk=None):
    """The older API's three arguments (cache_seqlens, num_q_tokens_per_head_k,
    num_heads_k) give (tile_scheduler_metadata int32 [num_sm_parts, 8], num_splits
    int32 [B + 1]) on cache_seqlens' device, zero-filled (FlashMLA's shapes; not read
    by our kernels). No arguments, or any of the newer API's (num_heads_q,
    is_fp8_kvcache, topk), give (FlashMLASchedMeta(), None)."""
    if cache_seqlens is None or num_heads_q is not None or topk is not None or \
            is_fp8_kvcache is not _NOT_GIVEN:
        return FlashMLASchedMeta(), None
    B = int(cache_seqlens.shape[0])
    parts = _num_sm_parts(cache_seqlens, num_q_tokens_per_head_k or 1, num_heads_k or 1)
    return (_zeros(cache_seqlens, (parts, TILE_SCHEDULER_METADATA_SIZE)),
            _zeros(cache_seqlens, (B + 1,)))


def get_mla_metadata_dense_fp8(cache_seqlens, num_q_tokens_per_head_k, num_heads_k):
    """vLLM's fp8 dense metadata call: the same tensors as get_mla_metadata."""
    return get_mla_metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k)


def _neg_to_pos_inf(lse):
    """lse -inf (no key) -> +inf, FlashMLA's convention; in place, one op, no sync."""
    if framework_of(lse) == "torch":
        return lse.nan_to_num_(nan=math.nan, posinf=math.inf, neginf=math.inf)
    lse[lse == -math.inf] = math.inf
    return lse


def _xp(x):
    fw = framework_of(x)
    if fw == "torch":
        return _call.torch_module()
    if fw == "cupy":
        import cupy

        return cupy
    import numpy

    return numpy


def _invalid_to_minus_one(indices, limit: int, topk_length=None):
    """FlashMLA treats -1, anything >= the number of keys, and (with topk_length)
    entries at or past topk_length[row] as 'no token'; mla's native API wants -1
    only (it rejects the rest as out of range, other negatives included)."""
    xp = _xp(indices)
    torch_like = xp.__name__ == "torch"
    past = indices >= limit
    if topk_length is not None:
        k = indices.shape[-1]
        pos = xp.arange(k, device=indices.device) if torch_like else xp.arange(k)
        lim = topk_length.reshape(tuple(topk_length.shape) +
                                  (1,) * (len(indices.shape) - len(topk_length.shape)))
        past = past | (pos >= lim)
    if torch_like:
        return indices.masked_fill(past, -1).to(xp.int32).contiguous()
    return xp.ascontiguousarray(xp.where(past, -1, indices).astype(xp.int32))


def _unsupported(**given):
    for name, v in given.items():
        if v is not None:
            raise errors.UnsupportedError(f"{name}: not supported by mla's FlashMLA layer")


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v,
                           tile_scheduler_metadata, num_splits=None, softmax_scale=None,
                           causal=False, is_fp8_kvcache=False, indices=None, attn_sink=None,
                           extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None,
                           extra_topk_length=None):
    """FlashMLA's decode: q [B, s_q, h_q, 576], k_cache [num_blocks, page, 1, 576 bf16 |
    656 fp8 bytes] -> (out [B, s_q, h_q, 512] in q's dtype, lse [B, h_q, s_q] f32,
    natural log, +inf where a query sees no key). tile_scheduler_metadata: what
    get_mla_metadata returned (either generation), num_splits: its second tensor or
    None."""
    return _with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v,
                         tile_scheduler_metadata, softmax_scale, causal,
                         1 if is_fp8_kvcache else 0,  # MLA_KV_FP8_DS_MLA / MLA_KV_BF16
                         indices, attn_sink, extra_k_cache, extra_indices_in_kvcache,
                         topk_length, extra_topk_length)


def _with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata,
                  softmax_scale, causal, kv_format, indices=None, attn_sink=None,
                  extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None,
                  extra_topk_length=None):
    """flash_mla_with_kvcache on a cache of MLA_KV_* format `kv_format`."""
    if head_dim_v != 512:
        raise errors.InvalidValueError(f"head_dim_v = {head_dim_v}: MLA's value width is 512")
    if attn_sink is not None or extra_k_cache is not None or \
            extra_indices_in_kvcache is not None or extra_topk_length is not None:
        _unsupported(attn_sink=attn_sink, extra_k_cache=extra_k_cache,
                     extra_indices_in_kvcache=extra_indices_in_kvcache,
                     extra_topk_length=extra_topk_length)
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    if indices is not None:
        if causal:
            raise errors.InvalidValueError("causal must be False when indices are given")
        total = int(k_cache.shape[0]) * int(k_cache.shape[1])
        fast = None if _call.torch_compiling() else _call.torch_ext_for(q)
        if fast is not None:  # torch CUDA: the C++ hot path, when built
            extra = ()
            meta = tile_scheduler_metadata
            if isinstance(meta, FlashMLASchedMeta):  # plan once per object, as the dense path
                plan = meta.sparse_plan
                if plan is None or (plan.batch, plan.s_q, plan.h_q, plan.topk) != \
                        (int(q.shape[0]), int(q.shape[1]), int(q.shape[2]),
                         int(indices.shape[-1])):
                    plan = meta.sparse_plan = sparse_decode_plan(
                        q, k_cache, indices, softmax_scale, topk_length=topk_length,
                        kv_format=kv_format)
                    meta.have_initialized = True
                extra = (plan.workspace, plan._record)
            res = fast.sparse_decode(q, k_cache, kv_format, indices, topk_length, softmax_scale,
                                     True, total, *extra)
            if res is not NotImplemented:
                return res
        out, lse = sparse_decode(q, k_cache, _invalid_to_minus_one(indices, total), softmax_scale,
                                 topk_length=topk_length, kv_format=kv_format,
                                 out_dtype=float_out(q))
        return out, _neg_to_pos_inf(lse)
    if topk_length is not None:
        raise errors.InvalidValueError("topk_length is only meaningful with indices")

    meta = tile_scheduler_metadata
    keep = isinstance(meta, FlashMLASchedMeta)
    tile = meta.tile_scheduler_metadata if keep else meta
    invariant = tile is not None and len(tile.shape) == 2 and int(tile.shape[0]) == 1
    if keep and not _call.torch_compiling():
        # FlashMLA's newer API: the first call with this object schedules, every
        # later one (the other layers of the step) reuses it: here an mla.DecodePlan.
        # A call of other shapes (FlashMLA would refuse it) makes a new plan.
        plan = meta.plan
        if plan is None or (plan.batch, plan.s_q, plan.h_q, plan.batch_invariant) != \
                (int(q.shape[0]), int(q.shape[1]), int(q.shape[2]), invariant):
            plan = meta.plan = decode_plan(q, k_cache, block_table, cache_seqlens,
                                           softmax_scale, bool(causal), kv_format=kv_format,
                                           batch_invariant=invariant)
            meta.have_initialized = True
        fast = _call.torch_ext_for(q)
        if fast is not None:
            res = fast.decode(q, k_cache, kv_format, block_table, cache_seqlens, softmax_scale,
                              causal, invariant, True, plan.workspace, plan._record)
            if res is not NotImplemented:
                return res
        out, lse = _call.decode_outputs(q, None, None, None)
        decode_planned(q, k_cache, block_table, cache_seqlens, softmax_scale, bool(causal),
                       kv_format, invariant, out, lse, plan, None, None)
        return out, _neg_to_pos_inf(lse)
    if _call.torch_compiling():
        from . import torch_ops

        out, lse = torch_ops.decode(q, k_cache, block_table, cache_seqlens, softmax_scale,
                                    bool(causal), kv_format, invariant)
        return out, _neg_to_pos_inf(lse)
    fast = _call.torch_ext_for(q)  # torch CUDA: the C++ hot path, when built
    if fast is not None:
        res = fast.decode(q, k_cache, kv_format, block_table, cache_seqlens, softmax_scale,
                          causal, invariant, True)
        if res is not NotImplemented:  # (an argument of another framework)
            return res
    out, lse = _call.decode_outputs(q, None, None, None)
    st = _call.stream_handle(q, None)
    ws = _call.run_with_workspace("mla_decode", q, st, meta.workspace if keep else None, q,
                                  k_cache, kv_format, block_table, cache_seqlens, softmax_scale,
                                  bool(causal), out, lse, invariant, grow=True,
                                  current_stream=not keep)
    if keep:
        meta.workspace, meta.have_initialized = ws, True
    return out, _neg_to_pos_inf(lse)


def flash_mla_with_kvcache_fp8(q, k_cache, block_table, cache_seqlens, head_dim_v,
                               tile_scheduler_metadata, num_splits, softmax_scale=None,
                               causal=False, descale_q=None, descale_k=None):
    """vLLM's fp8 dense decode: k_cache [num_blocks, page, 1, 576] e4m3 (or u8) codes of
    mla's fp8_e4m3 format with descale_k [1] f32 (required); q [B, s_q, h_q, 576] bf16,
    or fp8 with descale_q [1] f32 (q * descale_q rounded to bf16 first: mla's decode
    takes bf16 q). Returns (out [B, s_q, h_q, 512] bf16, lse [B, h_q, s_q] f32)."""
    if descale_k is None:
        raise errors.InvalidValueError(
            "descale_k: required (the fp8_e4m3 cache's per-tensor scale, [1] f32)")
    if _call.torch_compiling():
        raise errors.UnsupportedError(
            "flash_mla_with_kvcache_fp8 under torch.compile: the fp8_e4m3 cache's scale is "
            "per-thread state (mla.kv_scale), which a traced graph does not carry; call it "
            "eagerly (CUDA graphs are fine)")
    if descale_q is not None:
        q = _scaled_to_bf16(q, descale_q)
    from .kv_scale import kv_scale

    with kv_scale(descale_k):
        return _with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v,
                             tile_scheduler_metadata, softmax_scale, causal,
                             2)  # MLA_KV_FP8_E4M3


def _scaled_to_bf16(q, descale_q):
    """q * descale_q in f32, rounded once to bf16 (torch: on q's device, no sync).
    NumPy (the CPU reference, which takes f32 q): the f32 product."""
    if framework_of(q) == "torch":
        torch = _call.torch_module()
        return (q.to(torch.float32) * descale_q.to(torch.float32)).to(torch.bfloat16)
    import numpy

    return numpy.asarray(q, numpy.float32) * numpy.asarray(descale_q, numpy.float32).reshape(())


def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None,
                         indexer_topk=0):
    """FlashMLA's sparse prefill: q [s_q, h_q, 576], kv [s_kv, 1, 576] bf16, indices
    [s_q, 1, topk] int32 (-1 or >= s_kv: none; with topk_length [s_q], entries at or
    past topk_length[i] too) -> (out [s_q, h_q, 512] bf16,
    max_logits [s_q, h_q] f32, lse [s_q, h_q] f32 natural log; a query with no
    valid index gets out 0, max_logits -inf and lse +inf, as FlashMLA)."""
    if d_v != 512:
        raise errors.InvalidValueError(f"d_v = {d_v}: MLA's value width is 512")
    _unsupported(attn_sink=attn_sink)
    if indexer_topk:
        raise errors.UnsupportedError("indexer_topk: not supported by mla's FlashMLA layer")
    if len(kv.shape) != 3 or len(indices.shape) != 3:
        raise errors.ShapeError(
            f"kv {list(kv.shape)} / indices {list(indices.shape)}: expected [s_kv, 1, d_qk] and "
            "[s_q, 1, topk]")
    s_q, topk = int(indices.shape[0]), int(indices.shape[-1])
    s_kv = int(kv.shape[0])
    idx = _invalid_to_minus_one(indices.reshape(s_q, topk), s_kv, topk_length)
    out, lse = sparse_prefill(q, kv.reshape(s_kv, kv.shape[-1]), idx, sm_scale)
    max_logits = _max_logits(q, kv, idx, sm_scale)
    return out, max_logits, _neg_to_pos_inf(lse)


def _max_logits(q, kv, idx, sm_scale, rows_per_chunk: int = 128):
    """max over valid indices of sm_scale * q . kv[idx] (f32 [s_q, h]; -inf if none),
    computed with the caller's framework in row chunks (bounded memory)."""
    xp = _xp(q)
    s_q, h = int(q.shape[0]), int(q.shape[1])
    s_kv = int(kv.shape[0])
    k2 = kv.reshape(s_kv, kv.shape[-1])
    torch_like = xp.__name__ == "torch"
    res = []
    for r0 in range(0, s_q, rows_per_chunk):
        ii = idx[r0:r0 + rows_per_chunk]
        valid = (ii >= 0) & (ii < s_kv)
        safe = xp.where(valid, ii, 0)
        if torch_like:
            keys = k2[safe.long()].float()  # [r, topk, d]
            lg = xp.einsum("rhd,rkd->rhk", q[r0:r0 + rows_per_chunk].float(), keys) * sm_scale
            lg = lg.masked_fill(~valid[:, None, :], float("-inf"))
            res.append(lg.amax(-1))
        else:
            keys = k2[safe].astype(xp.float32)
            lg = xp.einsum("rhd,rkd->rhk", q[r0:r0 + rows_per_chunk].astype(xp.float32),
                           keys) * sm_scale
            lg = xp.where(valid[:, None, :], lg, -xp.inf)
            res.append(lg.max(-1) if lg.shape[-1] else xp.full(lg.shape[:2], -xp.inf))
    return xp.cat(res) if torch_like else xp.concatenate(res).astype(xp.float32)
