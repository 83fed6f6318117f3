"""The whole DSA decode step as one call (mla/dsa.hpp): indexer logits -> top-k ->
sparse attention, or dense decode when the batch is short (docs/dsa.md)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from . import _call
from ._lib import MlaDsaPolicy, c_value, choice, expect_type, filled, flag, lib
from ._call import Call, decode_outputs, kv_format_of

_PATHS = {"automatic": 0, "dense": 1, "sparse": 2}
_PATH_NAMES = {v: k for k, v in _PATHS.items()}


@dataclass
class DsaPolicy:
    """Mirror of mla::DsaPolicy. Dense decode runs when
    max_seqlen <= max(topk, dense_below) (path "automatic"); "dense" / "sparse" force one.
    dense_below defaults to -1: the crossover measured on the H200 for the cache's format
    (mla/dsa.hpp kDsaDenseBelowH200*); dsa_dense_threshold() gives the planner's for others."""

    topk: int = 2048
    dense_below: int | None = None  # None: the library's default
    path: str = "automatic"
    batch_invariant: bool = False

    def _c(self, path: str = "policy") -> MlaDsaPolicy:
        p = filled(MlaDsaPolicy, "mla_dsa_default_policy")
        p.topk = c_value(ctypes.c_int32, self.topk, f"{path}.topk")
        if self.dense_below is not None:
            p.dense_below = c_value(ctypes.c_int64, self.dense_below, f"{path}.dense_below")
        p.path = choice(self.path, _PATHS, f"{path}.path")
        p.batch_invariant = int(flag(self.batch_invariant, f"{path}.batch_invariant"))
        return p


def _policy(policy) -> MlaDsaPolicy:
    """The C struct of a `policy` argument (None: the library's default)."""
    policy = DsaPolicy() if policy is None else policy
    expect_type(policy, DsaPolicy, "policy")
    return policy._c()


def dsa_default_policy() -> DsaPolicy:
    """The library's default policy (top-2048, the H200's measured crossover)."""
    p = filled(MlaDsaPolicy, "mla_dsa_default_policy")
    return DsaPolicy(topk=p.topk, dense_below=p.dense_below, path=_PATH_NAMES[p.path],
                     batch_invariant=bool(p.batch_invariant))


def dsa_decode_path(max_seqlen: int, policy: DsaPolicy | None = None, kv: str = "bf16") -> str:
    """'dense' or 'sparse': the path dsa_decode takes for this max_seqlen and cache format."""
    out = ctypes.c_int32(0)
    lib().call("mla_dsa_decode_path", c_value(ctypes.c_int64, max_seqlen, "max_seqlen"),
               kv_format_of(None, kv), ctypes.byref(_policy(policy)), ctypes.byref(out))
    return _PATH_NAMES[out.value]


def dsa_dense_threshold(gpu: str = "h200", calibration: str | None = None, *, model=None,
                        kv: str = "bf16", heads: int = 128, new_tokens: int = 1,
                        topk: int = 2048, batch: int = 64) -> int:
    """The planner's predicted dense/DSA crossover in tokens (0: DSA never cheaper).
    calibration: the TEXT of a calibration file (docs/planner.md) or None (roofline)."""
    out = ctypes.c_int64(0)
    text = {"gpu": gpu, "calibration": calibration, "model": model, "kv": kv}
    ints = {"heads": heads, "new_tokens": new_tokens, "topk": topk, "batch": batch}
    lib().call("mla_dsa_dense_threshold",
               *(None if v is None else c_value(ctypes.c_char_p, v, n) for n, v in text.items()),
               *(c_value(ctypes.c_int32, v, n) for n, v in ints.items()), ctypes.byref(out))
    return out.value


def _args(c, q, kv, fmt, block_table, cache_seqlens, max_seqlen, index_q8, index_w_folded,
          index_cache, index_block_table, softmax_scale, out, lse):
    return (c.t(q, "q"), c.cache(kv, "kv", fmt), fmt, c.t(block_table, "block_table"),
            c.t(cache_seqlens, "cache_seqlens"),
            c_value(ctypes.c_int64, max_seqlen, "max_seqlen"), c.t(index_q8, "index_q8"),
            c.t(index_w_folded, "index_w_folded"), c.t(index_cache, "index_cache"),
            c.t(index_block_table, "index_block_table"),
            c_value(ctypes.c_float, softmax_scale, "softmax_scale"),
            c.t(out, "out", True), c.t(lse, "lse", True))


def dsa_decode_workspace_size(q, kv, block_table, cache_seqlens, max_seqlen, index_q8,
                              index_w_folded, index_cache, softmax_scale, *,
                              index_block_table=None, policy: DsaPolicy | None = None,
                              kv_format=None, out=None, lse=None, out_dtype=None) -> int:
    """Scratch bytes dsa_decode needs (on q's device; nonzero on the CPU sparse path)."""
    fmt = kv_format_of(kv, kv_format)
    out, lse = decode_outputs(q, out, lse, out_dtype)
    c = Call(q)
    n = ctypes.c_size_t(0)
    pol = _policy(policy)
    c.run("mla_dsa_decode_workspace_size",
          *_args(c, q, kv, fmt, block_table, cache_seqlens, max_seqlen, index_q8, index_w_folded,
                 index_cache, index_block_table, softmax_scale, out, lse),
          ctypes.byref(pol), ctypes.byref(n))
    return n.value


def dsa_decode(q, kv, block_table, cache_seqlens, max_seqlen, index_q8, index_w_folded,
               index_cache, softmax_scale, *, index_block_table=None,
               policy: DsaPolicy | None = None, kv_format=None, out=None, lse=None,
               out_dtype=None, workspace=None, stream=None):
    """One DSA decode step: q [B, s_q, h_q, 576] over the paged latent cache kv, the
    indexer's quantised queries index_q8 [B, s_q, 64, 128] e4m3 and index_w_folded
    [B, s_q, 64] f32 (mla.quantize_indexer_query) over index_cache [pages, 8448].
    max_seqlen: an upper bound of cache_seqlens known on the host. index_block_table:
    pages of 64 tokens (None: block_table, whose pages must then be 64 tokens).
    Returns (out [B, s_q, h_q, 512], lse [B, h_q, s_q]). `workspace` (bytes on q's
    device) is allocated with q's framework when not given."""
    fmt = kv_format_of(kv, kv_format)
    out, lse = decode_outputs(q, out, lse, out_dtype)
    pol = _policy(policy)
    c = Call(q, stream)
    args = _args(c, q, kv, fmt, block_table, cache_seqlens, max_seqlen, index_q8, index_w_folded,
                 index_cache, index_block_table, softmax_scale, out, lse)
    if workspace is None:
        n = ctypes.c_size_t(0)
        c.run("mla_dsa_decode_workspace_size", *args, ctypes.byref(pol), ctypes.byref(n))
        if n.value:
            workspace = _call.empty(q, (n.value,), "u8")
    ws_ptr, ws_bytes = c.workspace(workspace)
    c.run("mla_dsa_decode", *args, ctypes.byref(pol), ws_ptr, ws_bytes, c.stream_arg)
    return out, lse
