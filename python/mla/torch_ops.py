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

from typing import Optional

import torch
from torch import Tensor

from . import _call
from ._call import D_V

_LIB = "mla"


def _fmt(kv_format: int):
    return None if kv_format == -1 else int(kv_format)


def _out_dtype(q: Tensor) -> torch.dtype:
    return q.dtype if q.dtype in (torch.bfloat16, torch.float32, torch.float64) \
        else torch.float32


def _lse_dtype(out_dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if out_dtype == torch.float64 else torch.float32


# ---- dense decode ------------------------------------------------------------------


@torch.library.custom_op(f"{_LIB}::decode", mutates_args=())
def decode(q: Tensor, kv: Tensor, block_table: Tensor, cache_seqlens: Tensor,
           softmax_scale: float, causal: bool = True, kv_format: int = -1,
           batch_invariant: bool = False) -> tuple[Tensor, Tensor]:
    """mla.mla_decode: (out [B, s_q, h_q, 512], lse [B, h_q, s_q])."""
    from .ops import mla_decode

    return mla_decode(q, kv, block_table, cache_seqlens, softmax_scale, causal,
                      kv_format=_fmt(kv_format), batch_invariant=batch_invariant)


@decode.register_fake
def _decode_fake(q, kv, block_table, cache_seqlens, softmax_scale, causal=True, kv_format=-1,
                 batch_invariant=False):
    B, s_q, h_q, _ = q.shape
    od = _out_dtype(q)
    return q.new_empty((B, s_q, h_q, D_V), dtype=od), q.new_empty((B, h_q, s_q),
                                                                    dtype=_lse_dtype(od))


@torch.library.custom_op(f"{_LIB}::decode_out", mutates_args=("out", "lse"))
def decode_out(q: Tensor, kv: Tensor, block_table: Tensor, cache_seqlens: Tensor,
               softmax_scale: float, causal: bool, kv_format: int, batch_invariant: bool,
               out: Tensor, lse: Tensor) -> None:
    """mla.mla_decode into caller-owned out / lse."""
    from .ops import mla_decode

    mla_decode(q, kv, block_table, cache_seqlens, softmax_scale, causal,
               kv_format=_fmt(kv_format), batch_invariant=batch_invariant, out=out, lse=lse)


@decode_out.register_fake
def _decode_out_fake(q, kv, block_table, cache_seqlens, softmax_scale, causal, kv_format,
                     batch_invariant, out, lse):
    return None


# ---- sparse attention --------------------------------------------------------------


@torch.library.custom_op(f"{_LIB}::sparse_decode", mutates_args=())
def sparse_decode(q: Tensor, kv: Tensor, indices: Tensor, topk_length: Optional[Tensor],
                  softmax_scale: float, kv_format: int = -1) -> tuple[Tensor, Tensor]:
    """mla.sparse_decode: (out [B, s_q, h_q, 512], lse [B, h_q, s_q])."""
    from .dsa import sparse_decode as run

    return run(q, kv, indices, softmax_scale, topk_length=topk_length,
               kv_format=_fmt(kv_format))


@sparse_decode.register_fake
def _sparse_decode_fake(q, kv, indices, topk_length, softmax_scale, kv_format=-1):
    return _decode_fake(q, kv, None, None, softmax_scale)


@torch.library.custom_op(f"{_LIB}::sparse_prefill", mutates_args=())
def sparse_prefill(q: Tensor, kv: Tensor, indices: Tensor,
                   softmax_scale: float) -> tuple[Tensor, Tensor]:
    """mla.sparse_prefill: (out [s_q, h_q, 512], lse [s_q, h_q])."""
    from .dsa import sparse_prefill as run

    return run(q, kv, indices, softmax_scale)


@sparse_prefill.register_fake
def _sparse_prefill_fake(q, kv, indices, softmax_scale):
    s_q, h_q, _ = q.shape
    od = _out_dtype(q)
    return q.new_empty((s_q, h_q, D_V), dtype=od), q.new_empty((s_q, h_q), dtype=_lse_dtype(od))


# ---- the paged cache ---------------------------------------------------------------


@torch.library.custom_op(f"{_LIB}::append_kv", mutates_args=("cache",))
def append_kv(c_kv: Tensor, k_rope: Tensor, slots: Tensor, cache: Tensor,
              kv_format: int = -1) -> None:
    """mla.append_kv: writes T tokens into `cache` in place."""
    from .ops import append_kv as run

    run(c_kv, k_rope, slots, cache, _fmt(kv_format))


@append_kv.register_fake
def _append_kv_fake(c_kv, k_rope, slots, cache, kv_format=-1):
    return None


# ---- top-k ---------------------------------------------------------------------------


@torch.library.custom_op(f"{_LIB}::topk_indices", mutates_args=())
def topk_indices(logits: Tensor, k: int, lengths: Optional[Tensor] = None,
                 block_table: Optional[Tensor] = None, page_size: int = 64,
                 rows_per_request: int = 1, num_pages: int = -1) -> Tensor:
    """mla.topk_indices: indices [R, k] int32."""
    from .dsa import topk_indices as run

    return run(logits, k, lengths=lengths, block_table=block_table, page_size=page_size,
               rows_per_request=rows_per_request, num_pages=num_pages)


@topk_indices.register_fake
def _topk_indices_fake(logits, k, lengths=None, block_table=None, page_size=64,
                       rows_per_request=1, num_pages=-1):
    return logits.new_empty((logits.shape[0], k), dtype=torch.int32)


@torch.library.custom_op(f"{_LIB}::read_kv", mutates_args=())
def read_kv(cache: Tensor, slots: Tensor, kv_format: int = -1) -> tuple[Tensor, Tensor]:
    """mla.read_kv: (c_kv [T, 512] f32, k_rope [T, 64] f32)."""
    from .ops import read_kv as run

    return run(cache, slots, _fmt(kv_format))


@read_kv.register_fake
def _read_kv_fake(cache, slots, kv_format=-1):
    T = slots.shape[0]
    return (cache.new_empty((T, 512), dtype=torch.float32),
            cache.new_empty((T, 64), dtype=torch.float32))


@torch.library.custom_op(f"{_LIB}::merge_attn_partials", mutates_args=())
def merge_attn_partials(partial_out: Tensor, partial_lse: Tensor) -> tuple[Tensor, Tensor]:
    """mla.merge_attn_partials (out f32): (out [R..., D], lse [R...])."""
    from .ops import merge_attn_partials as run

    return run(partial_out, partial_lse)


@merge_attn_partials.register_fake
def _merge_fake(partial_out, partial_lse):
    return (partial_out.new_empty(partial_out.shape[1:], dtype=torch.float32),
            partial_out.new_empty(partial_lse.shape[1:], dtype=torch.float32))


# ---- lightning indexer -------------------------------------------------------------


@torch.library.custom_op(f"{_LIB}::append_indexer_keys", mutates_args=("cache",))
def append_indexer_keys(keys: Tensor, slots: Tensor, cache: Tensor) -> None:
    """mla.append_indexer_keys: quantises keys into the indexer cache in place."""
    from .ops import append_indexer_keys as run

    run(keys, slots, cache)


@append_indexer_keys.register_fake
def _append_indexer_keys_fake(keys, slots, cache):
    return None


@torch.library.custom_op(f"{_LIB}::quantize_indexer_query", mutates_args=())
def quantize_indexer_query(q: Tensor, weights: Tensor) -> tuple[Tensor, Tensor]:
    """mla.quantize_indexer_query: (q8 e4m3 [.., 64, 128], w_folded f32 [.., 64])."""
    from .ops import quantize_indexer_query as run

    return run(q, weights)


@quantize_indexer_query.register_fake
def _quantize_indexer_query_fake(q, weights):
    return (q.new_empty(q.shape, dtype=torch.float8_e4m3fn),
            q.new_empty(q.shape[:-1], dtype=torch.float32))


@torch.library.custom_op(f"{_LIB}::indexer_logits_decode", mutates_args=())
def indexer_logits_decode(q8: Tensor, w_folded: Tensor, cache: Tensor, block_table: Tensor,
                          cache_seqlens: Tensor, max_len: int) -> Tensor:
    """mla.indexer_logits_decode: logits [B, s_q, max_len] f32."""
    from .ops import indexer_logits_decode as run

    return run(q8, w_folded, cache, block_table, cache_seqlens, max_len=max_len)


@indexer_logits_decode.register_fake
def _indexer_logits_decode_fake(q8, w_folded, cache, block_table, cache_seqlens, max_len):
    return q8.new_empty((q8.shape[0], q8.shape[1], max_len), dtype=torch.float32)


@torch.library.custom_op(f"{_LIB}::indexer_logits_prefill", mutates_args=())
def indexer_logits_prefill(q8: Tensor, w_folded: Tensor, k8: Tensor, k_scale: Tensor,
                           k_start: Tensor, k_end: Tensor) -> Tensor:
    """mla.indexer_logits_prefill: logits [T, N] f32."""
    from .ops import indexer_logits_prefill as run

    return run(q8, w_folded, k8, k_scale, k_start, k_end)


@indexer_logits_prefill.register_fake
def _indexer_logits_prefill_fake(q8, w_folded, k8, k_scale, k_start, k_end):
    return q8.new_empty((q8.shape[0], k8.shape[0]), dtype=torch.float32)


# ---- non-absorbed prefill ----------------------------------------------------------


@torch.library.custom_op(f"{_LIB}::mha_prefill", mutates_args=())
def mha_prefill(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                softmax_scale: float, causal: bool = True) -> tuple[Tensor, Tensor]:
    """mla.mha_prefill: (out [T, h, d_v], lse [h, T])."""
    from .dsa import mha_prefill as run

    return run(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal)


@mha_prefill.register_fake
def _mha_prefill_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal=True):
    od = _out_dtype(q)
    return (q.new_empty((q.shape[0], q.shape[1], v.shape[2]), dtype=od),
            q.new_empty((q.shape[1], q.shape[0]), dtype=_lse_dtype(od)))


@torch.library.custom_op(f"{_LIB}::decompress_kv", mutates_args=())
def decompress_kv(c_kv: Tensor, w_uk: Tensor, w_uv: Tensor) -> tuple[Tensor, Tensor]:
    """mla.decompress_kv: (k_nope [N, h, d_nope], v [N, h, d_v])."""
    from .dsa import decompress_kv as run

    return run(c_kv, w_uk, w_uv)


@decompress_kv.register_fake
def _decompress_kv_fake(c_kv, w_uk, w_uv):
    od = _out_dtype(c_kv)
    return (c_kv.new_empty((c_kv.shape[0], w_uk.shape[0], w_uk.shape[1]), dtype=od),
            c_kv.new_empty((c_kv.shape[0], w_uv.shape[0], w_uv.shape[1]), dtype=od))


def registered() -> list[str]:
    """The names of the ops this module registers (torch.ops.mla.<name>)."""
    return ["decode", "decode_out", "sparse_decode", "sparse_prefill", "append_kv",
            "topk_indices", "read_kv", "merge_attn_partials", "append_indexer_keys",
            "quantize_indexer_query", "indexer_logits_decode", "indexer_logits_prefill",
            "mha_prefill", "decompress_kv"]


_call.torch_module()  # mla's dtype maps, and mark torch as seen
