"""FlashMLA's call shapes over mla: switch an engine by changing an import.

    from mla import flash_mla_compat as flash_mla
    sched, _ = flash_mla.get_mla_metadata(cache_seqlens, s_q * h_q // h_kv, h_kv)
    out, lse = flash_mla.flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, 512,
                                                sched, None, causal=True)

Same argument order and meaning as FlashMLA's ``flash_mla_interface``; the
differences (all documented in docs/python.md) are:
  * get_mla_metadata returns an :class:`FlashMLASchedMeta` that records the call
    shape and holds our decode workspace; it takes both FlashMLA generations'
    arguments (old: cache_seqlens, num_q_tokens_per_head_k, num_heads_k, ...;
    new: none), and flash_mla_with_kvcache accepts the old ``num_splits`` tensor
    or None in its place and ignores it (our split decisions are made inside the
    kernel call).
  * lse: ours is -inf for a query that sees no key; FlashMLA reports +inf. This
    layer converts, so callers see FlashMLA's convention.
  * Sparse decode (``indices``) and flash_mla_sparse_fwd call mla.sparse_decode /
    mla.sparse_prefill; indices >= the number of keys (FlashMLA's other spelling of
    "none") become -1 first. attn_sink, extra_k_cache, extra_indices_in_kvcache,
    extra_topk_length, and flash_mla_sparse_fwd's topk_length and indexer_topk are
    not supported (UnsupportedError).
  * Also accepted: NumPy arrays (CPU reference), not only torch CUDA tensors.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from . import _call, errors
from ._call import dtype_name, framework_of
from .dsa import sparse_decode, sparse_prefill
from .ops import decode_workspace_size, mla_decode


@dataclasses.dataclass
class FlashMLASchedMeta:
    """Scheduling state of one call shape: the shape itself (checked on reuse, as
    FlashMLA checks it) and the decode workspace, allocated on first use."""

    config: Optional[tuple] = None
    have_initialized: bool = False
    workspace: object = None


def get_mla_metadata(*args, **kwargs):
    """Returns (FlashMLASchedMeta(), None). The arguments of either FlashMLA
    generation are accepted and not needed: the schedule is made per call."""
    return FlashMLASchedMeta(), None


def _neg_to_pos_inf(lse):
    """lse -inf (no key) -> +inf, FlashMLA's convention; in place, no host sync."""
    if framework_of(lse) == "torch":
        return lse.masked_fill_(lse == float("-inf"), float("inf"))
    lse[lse == -math.inf] = math.inf
    return lse


def _xp(x):
    fw = framework_of(x)
    if fw == "torch":
        import torch

        return torch
    if fw == "cupy":
        import cupy

        return cupy
    import numpy

    return numpy


def _invalid_to_minus_one(indices, limit: int):
    """FlashMLA treats -1 and anything >= the number of keys as 'no token'; mla's
    native API wants -1 only (and rejects the rest as out of range)."""
    xp = _xp(indices)
    ok = (indices >= 0) & (indices < limit)
    if xp.__name__ == "torch":
        return xp.where(ok, indices, -1).to(xp.int32).contiguous()
    return xp.ascontiguousarray(xp.where(ok, indices, -1).astype(xp.int32))


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v,
                           tile_scheduler_metadata, num_splits=None, softmax_scale=None,
                           causal=False, is_fp8_kvcache=False, indices=None, attn_sink=None,
                           extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None,
                           extra_topk_length=None):
    """FlashMLA's decode: q [B, s_q, h_q, 576], k_cache [num_blocks, page, 1, 576 bf16 |
    656 fp8 bytes] -> (out [B, s_q, h_q, 512] in q's dtype, lse [B, h_q, s_q] f32,
    natural log, +inf where a query sees no key)."""
    if head_dim_v != 512:
        raise errors.InvalidValueError(f"head_dim_v = {head_dim_v}: MLA's value width is 512")
    for name, v in (("attn_sink", attn_sink), ("extra_k_cache", extra_k_cache),
                    ("extra_indices_in_kvcache", extra_indices_in_kvcache),
                    ("extra_topk_length", extra_topk_length)):
        if v is not None:
            raise errors.UnsupportedError(f"{name}: not supported by mla's FlashMLA layer")
    meta = tile_scheduler_metadata
    if not isinstance(meta, FlashMLASchedMeta):
        raise errors.InvalidValueError(
            "tile_scheduler_metadata: pass what mla.flash_mla_compat.get_mla_metadata returned, "
            f"not a {type(meta).__name__}")
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    topk = int(indices.shape[-1]) if indices is not None else None
    config = (tuple(q.shape[:3]), tuple(k_cache.shape[1:3]), bool(causal), bool(is_fp8_kvcache),
              topk)
    if meta.have_initialized and meta.config != config:
        raise errors.InvalidValueError(
            f"tile_scheduler_metadata was made for (q shape, page/heads, causal, fp8, topk) = "
            f"{meta.config}, this call is {config}: use one metadata object per call shape")
    meta.config, meta.have_initialized = config, True
    kv_format = "fp8_ds_mla" if is_fp8_kvcache else "bf16"
    out_dtype = dtype_name(q) if dtype_name(q) in ("bf16", "f32") else "f32"

    if topk_length is not None and indices is None:
        raise errors.InvalidValueError("topk_length is only meaningful with indices")
    if indices is not None:
        if causal:
            raise errors.InvalidValueError("causal must be False when indices are given")
        total = int(k_cache.shape[0]) * int(k_cache.shape[1])
        out, lse = sparse_decode(q, k_cache, _invalid_to_minus_one(indices, total), softmax_scale,
                                 topk_length=topk_length, kv_format=kv_format,
                                 out_dtype=out_dtype)
        return out, _neg_to_pos_inf(lse)

    if meta.workspace is None or _call.nbytes(meta.workspace) < 1:
        n = decode_workspace_size(q, k_cache, block_table, cache_seqlens, softmax_scale, causal,
                                  kv_format=kv_format, out_dtype=out_dtype)
        meta.workspace = _call.empty(q, (max(n, 1),), "u8")
    out, lse = mla_decode(q, k_cache, block_table, cache_seqlens, softmax_scale, causal,
                          kv_format=kv_format, out_dtype=out_dtype, workspace=meta.workspace)
    return out, _neg_to_pos_inf(lse)


def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None,
                         indexer_topk=0):
    """FlashMLA's sparse prefill: q [s_q, h_q, 576], kv [s_kv, 1, 576] bf16, indices
    [s_q, 1, topk] int32 (-1 or >= s_kv: none) -> (out [s_q, h_q, 512] bf16,
    max_logits [s_q, h_q] f32, lse [s_q, h_q] f32 natural log; a query with no
    valid index gets out 0, max_logits -inf and lse +inf, as FlashMLA)."""
    if d_v != 512:
        raise errors.InvalidValueError(f"d_v = {d_v}: MLA's value width is 512")
    for name, v in (("attn_sink", attn_sink), ("topk_length", topk_length)):
        if v is not None:
            raise errors.UnsupportedError(f"{name}: not supported by mla's FlashMLA layer")
    if indexer_topk:
        raise errors.UnsupportedError("indexer_topk: not supported by mla's FlashMLA layer")
    if len(kv.shape) != 3 or len(indices.shape) != 3:
        raise errors.ShapeError(
            f"kv {list(kv.shape)} / indices {list(indices.shape)}: expected [s_kv, 1, d_qk] and "
            "[s_q, 1, topk]")
    s_q, topk = int(indices.shape[0]), int(indices.shape[-1])
    s_kv = int(kv.shape[0])
    idx = _invalid_to_minus_one(indices.reshape(s_q, topk), s_kv)
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
