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


def registered() -> list[str]:
    """The names of the ops this module registers (torch.ops.mla.<name>)."""
    return ["decode", "decode_out", "sparse_decode", "sparse_prefill", "append_kv",
            "topk_indices"]


_call.torch_module()  # mla's dtype maps, and mark torch as seen
