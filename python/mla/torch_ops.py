"""mla's operations as torch.library custom ops (namespace ``mla``), so that
torch.compile(fullgraph=True) and CUDA-graph capture see through them.

    import mla.torch_ops  # registers torch.ops.mla.*; done by mla itself once it
                          # sees torch (import mla after torch, or any torch call)
    out, lse = torch.ops.mla.decode(q, kv, block_table, cache_seqlens, scale, True, -1, False)

Each op has a fake (meta) implementation that gives the output shapes and dtypes
without running anything, and declares what it writes (mutates_args), so the
compiler may reorder and functionalise around it. Under torch.compile, mla's
Python functions (mla.mla_decode, mla.sparse_decode, mla.sparse_prefill,
mla.append_kv, the FlashMLA compat layer) route to these ops by themselves; in
eager mode they call the library directly, which costs less on the host.

kv_format: -1 = from the cache's dtype (u8 or e4m3 bytes: fp8_ds_mla, else bf16),
0 = bf16, 1 = fp8_ds_mla. Workspace is allocated inside the ops (by torch's
caching allocator, so graph capture gives it a static address).
"""

from __future__ import annotations

import torch

from . import _call
from ._call import D_V


_NS = "mla"
# FRAGMENT: the namespace may already hold ops (another import of this module).
_LIBRARY = torch.library.Library(_NS, "FRAGMENT")


def _op(schema: str, impl, fake):
    """Defines mla::<schema>, its CPU/CUDA implementation (one Python function over
    mla's call machinery: CompositeExplicitAutograd) and its fake implementation.
    The Library API costs less per eager call than torch.library.custom_op."""
    name = schema.split("(", 1)[0]
    _LIBRARY.define(schema)
    _LIBRARY.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{_NS}::{name}", fake, lib=_LIBRARY)
    return getattr(getattr(torch.ops, _NS), name)


def _fmt(kv_format: int):
    return None if kv_format == -1 else int(kv_format)


def _out_dtype(q) -> torch.dtype:
    return q.dtype if q.dtype in (torch.bfloat16, torch.float32, torch.float64) \
        else torch.float32


def _lse_dtype(out_dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if out_dtype == torch.float64 else torch.float32


def _decode_like(q):
    B, s_q, h_q, _ = q.shape
    od = _out_dtype(q)
    return q.new_empty((B, s_q, h_q, D_V), dtype=od), q.new_empty((B, h_q, s_q),
                                                                    dtype=_lse_dtype(od))


# ---- dense decode ------------------------------------------------------------------


def _stream(q):
    """The op implementations pass the stream explicitly: mla then allocates the
    workspace per call and keeps none. torch.compile's CUDA-graph trees run ops in the
    graph's pool outside capture too (warm-up), where a kept workspace would be a live
    allocation the graph does not own."""
    return _call.stream_handle(q, None)


def _decode(q, kv, block_table, cache_seqlens, softmax_scale, causal=True, kv_format=-1,
            batch_invariant=False):
    from .ops import mla_decode

    return mla_decode(q, kv, block_table, cache_seqlens, softmax_scale, causal,
                      kv_format=_fmt(kv_format), batch_invariant=batch_invariant,
                      stream=_stream(q))


decode = _op("decode(Tensor q, Tensor kv, Tensor block_table, Tensor cache_seqlens, "
             "float softmax_scale, bool causal=True, int kv_format=-1, "
             "bool batch_invariant=False) -> (Tensor, Tensor)",
             _decode, lambda q, *a, **k: _decode_like(q))


def _decode_out(q, kv, block_table, cache_seqlens, softmax_scale, causal, kv_format,
                batch_invariant, out, lse):
    from .ops import mla_decode

    mla_decode(q, kv, block_table, cache_seqlens, softmax_scale, causal,
               kv_format=_fmt(kv_format), batch_invariant=batch_invariant, out=out, lse=lse,
               stream=_stream(q))


decode_out = _op("decode_out(Tensor q, Tensor kv, Tensor block_table, Tensor cache_seqlens, "
                 "float softmax_scale, bool causal, int kv_format, bool batch_invariant, "
                 "Tensor(a!) out, Tensor(b!) lse) -> ()",
                 _decode_out, lambda *a, **k: None)

# ---- sparse attention --------------------------------------------------------------


def _sparse_decode(q, kv, indices, topk_length, softmax_scale, kv_format=-1):
    from .dsa import sparse_decode as run

    return run(q, kv, indices, softmax_scale, topk_length=topk_length,
               kv_format=_fmt(kv_format), stream=_stream(q))


sparse_decode = _op("sparse_decode(Tensor q, Tensor kv, Tensor indices, Tensor? topk_length, "
                    "float softmax_scale, int kv_format=-1) -> (Tensor, Tensor)",
                    _sparse_decode, lambda q, *a, **k: _decode_like(q))


def _sparse_prefill(q, kv, indices, softmax_scale):
    from .dsa import sparse_prefill as run

    return run(q, kv, indices, softmax_scale, stream=_stream(q))


def _sparse_prefill_fake(q, kv, indices, softmax_scale):
    s_q, h_q, _ = q.shape
    od = _out_dtype(q)
    return q.new_empty((s_q, h_q, D_V), dtype=od), q.new_empty((s_q, h_q), dtype=_lse_dtype(od))


sparse_prefill = _op("sparse_prefill(Tensor q, Tensor kv, Tensor indices, float softmax_scale) "
                     "-> (Tensor, Tensor)", _sparse_prefill, _sparse_prefill_fake)

# ---- the paged cache ---------------------------------------------------------------


def _append_kv(c_kv, k_rope, slots, cache, kv_format=-1):
    from .ops import append_kv as run

    run(c_kv, k_rope, slots, cache, _fmt(kv_format))


append_kv = _op("append_kv(Tensor c_kv, Tensor k_rope, Tensor slots, Tensor(a!) cache, "
                "int kv_format=-1) -> ()", _append_kv, lambda *a, **k: None)


def _read_kv(cache, slots, kv_format=-1):
    from .ops import read_kv as run

    return run(cache, slots, _fmt(kv_format))


def _read_kv_fake(cache, slots, kv_format=-1):
    T = slots.shape[0]
    return (cache.new_empty((T, 512), dtype=torch.float32),
            cache.new_empty((T, 64), dtype=torch.float32))


read_kv = _op("read_kv(Tensor cache, Tensor slots, int kv_format=-1) -> (Tensor, Tensor)",
              _read_kv, _read_kv_fake)


def _merge(partial_out, partial_lse):
    from .ops import merge_attn_partials as run

    return run(partial_out, partial_lse)


def _merge_fake(partial_out, partial_lse):
    return (partial_out.new_empty(partial_out.shape[1:], dtype=torch.float32),
            partial_out.new_empty(partial_lse.shape[1:], dtype=torch.float32))


merge_attn_partials = _op("merge_attn_partials(Tensor partial_out, Tensor partial_lse) -> "
                          "(Tensor, Tensor)", _merge, _merge_fake)

# ---- top-k ---------------------------------------------------------------------------


def _topk(logits, k, lengths=None, block_table=None, page_size=64, rows_per_request=1,
          num_pages=-1):
    from .dsa import topk_indices as run

    return run(logits, k, lengths=lengths, block_table=block_table, page_size=page_size,
               rows_per_request=rows_per_request, num_pages=num_pages)


topk_indices = _op("topk_indices(Tensor logits, int k, Tensor? lengths=None, "
                   "Tensor? block_table=None, int page_size=64, int rows_per_request=1, "
                   "int num_pages=-1) -> Tensor", _topk,
                   lambda logits, k, *a, **kw: logits.new_empty((logits.shape[0], k),
                                                                dtype=torch.int32))

# ---- lightning indexer -------------------------------------------------------------


def _append_indexer_keys(keys, slots, cache):
    from .ops import append_indexer_keys as run

    run(keys, slots, cache)


append_indexer_keys = _op("append_indexer_keys(Tensor keys, Tensor slots, Tensor(a!) cache) "
                          "-> ()", _append_indexer_keys, lambda *a, **k: None)


def _quantize_indexer_query(q, weights):
    from .ops import quantize_indexer_query as run

    return run(q, weights)


quantize_indexer_query = _op(
    "quantize_indexer_query(Tensor q, Tensor weights) -> (Tensor, Tensor)",
    _quantize_indexer_query,
    lambda q, w: (q.new_empty(q.shape, dtype=torch.float8_e4m3fn),
                  q.new_empty(q.shape[:-1], dtype=torch.float32)))


def _indexer_logits_decode(q8, w_folded, cache, block_table, cache_seqlens, max_len):
    from .ops import indexer_logits_decode as run

    return run(q8, w_folded, cache, block_table, cache_seqlens, max_len=max_len)


indexer_logits_decode = _op(
    "indexer_logits_decode(Tensor q8, Tensor w_folded, Tensor cache, Tensor block_table, "
    "Tensor cache_seqlens, int max_len) -> Tensor", _indexer_logits_decode,
    lambda q8, w, c, bt, sl, max_len: q8.new_empty((q8.shape[0], q8.shape[1], max_len),
                                                   dtype=torch.float32))


def _indexer_logits_prefill(q8, w_folded, k8, k_scale, k_start, k_end):
    from .ops import indexer_logits_prefill as run

    return run(q8, w_folded, k8, k_scale, k_start, k_end)


indexer_logits_prefill = _op(
    "indexer_logits_prefill(Tensor q8, Tensor w_folded, Tensor k8, Tensor k_scale, "
    "Tensor k_start, Tensor k_end) -> Tensor", _indexer_logits_prefill,
    lambda q8, w, k8, *a: q8.new_empty((q8.shape[0], k8.shape[0]), dtype=torch.float32))

# ---- non-absorbed prefill ----------------------------------------------------------


def _mha_prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal=True):
    from .dsa import mha_prefill as run

    return run(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal)


def _mha_prefill_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal=True):
    od = _out_dtype(q)
    return (q.new_empty((q.shape[0], q.shape[1], v.shape[2]), dtype=od),
            q.new_empty((q.shape[1], q.shape[0]), dtype=_lse_dtype(od)))


mha_prefill = _op("mha_prefill(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, "
                  "Tensor cu_seqlens_k, float softmax_scale, bool causal=True) -> "
                  "(Tensor, Tensor)", _mha_prefill, _mha_prefill_fake)


def _decompress_kv(c_kv, w_uk, w_uv):
    from .dsa import decompress_kv as run

    return run(c_kv, w_uk, w_uv)


def _decompress_kv_fake(c_kv, w_uk, w_uv):
    od = _out_dtype(c_kv)
    return (c_kv.new_empty((c_kv.shape[0], w_uk.shape[0], w_uk.shape[1]), dtype=od),
            c_kv.new_empty((c_kv.shape[0], w_uv.shape[0], w_uv.shape[1]), dtype=od))


decompress_kv = _op("decompress_kv(Tensor c_kv, Tensor w_uk, Tensor w_uv) -> (Tensor, Tensor)",
                    _decompress_kv, _decompress_kv_fake)


def registered() -> list[str]:
    """The names of the ops this module registers (torch.ops.mla.<name>)."""
    return ["decode", "decode_out", "sparse_decode", "sparse_prefill", "append_kv",
            "topk_indices", "read_kv", "merge_attn_partials", "append_indexer_keys",
            "quantize_indexer_query", "indexer_logits_decode", "indexer_logits_prefill",
            "mha_prefill", "decompress_kv"]


_call.torch_module()  # mla's dtype maps, and mark torch as seen
