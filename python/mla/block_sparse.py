"""Block-sparse token selection (NSA; mla/block_sparse.hpp): index lists for
sparse_decode chosen from mean-pooled block keys instead of DSA's indexer."""

from __future__ import annotations

import ctypes
import dataclasses

from . import _call, errors
from ._lib import MlaBlockSparseParams, c_struct, filled, lib
from ._call import Call, kv_format_of, shape_of

_FIELDS = [name for name, _ in MlaBlockSparseParams._fields_]


@dataclasses.dataclass
class BlockSparseParams:
    """mla::BlockSparseParams. The defaults are NSA's (read from the library by
    ``BlockSparseParams.default()``; the literals below are the same numbers)."""

    block_size: int = 32           # tokens mean-pooled into one compressed key
    stride: int = 16               # distance between compressed blocks
    selected_block_size: int = 64  # tokens per selection block
    num_selected_blocks: int = 16  # blocks chosen, initial and local included
    initial_blocks: int = 1        # always chosen: the start of the prompt
    local_blocks: int = 2          # always chosen: the newest blocks
    sliding_window: int = 512      # newest tokens always attended

    @classmethod
    def default(cls) -> "BlockSparseParams":
        return cls._from_c(filled(MlaBlockSparseParams, "mla_block_sparse_default_params"))

    @classmethod
    def _from_c(cls, c: MlaBlockSparseParams) -> "BlockSparseParams":
        return cls(**{f: int(getattr(c, f)) for f in _FIELDS})

    def _to_c(self) -> MlaBlockSparseParams:
        return c_struct(MlaBlockSparseParams, "params", dataclasses.asdict(self))


def _params(params) -> BlockSparseParams:
    """None (the defaults), a BlockSparseParams, a preset name, or a dict of fields."""
    if params is None:
        return BlockSparseParams.default()
    if isinstance(params, BlockSparseParams):
        return params
    if isinstance(params, str):
        return block_sparse_preset(params)
    if isinstance(params, dict):
        unknown = set(params) - set(_FIELDS)
        if unknown:
            raise errors.InvalidValueError(
                f"params: unknown field(s) {sorted(unknown)}; known: {_FIELDS}")
        return BlockSparseParams(**params)
    raise errors.InvalidValueError(
        f"params = {params!r}: expected None, BlockSparseParams, a preset name or a dict")


def validate_block_sparse_params(params=None) -> None:
    """Raises InvalidValueError naming the bad field and its value, or returns None."""
    c = _params(params)._to_c()
    lib().call("mla_validate_block_sparse_params", ctypes.byref(c))


def block_sparse_capacity(params=None) -> int:
    """Entries an index list needs: num_selected_blocks * selected_block_size +
    sliding_window rounded up to 64 (the parameters are validated first)."""
    c = _params(params)._to_c()
    n = ctypes.c_int64(0)
    lib().call("mla_block_sparse_capacity", ctypes.byref(c), ctypes.byref(n))
    return n.value


def block_sparse_presets() -> dict:
    """{name: (BlockSparseParams, source)} for every per-GPU preset, in the library's order."""
    L = lib()
    out = {}
    for i in range(L.fn("mla_block_sparse_num_presets")()):
        name, source, c = ctypes.c_char_p(), ctypes.c_char_p(), MlaBlockSparseParams()
        L.call("mla_block_sparse_preset_at", i, ctypes.byref(name), ctypes.byref(c),
               ctypes.byref(source))
        out[name.value.decode()] = (BlockSparseParams._from_c(c), source.value.decode())
    return out


def block_sparse_preset(name: str) -> BlockSparseParams:
    """A preset's parameters ("nsa", "h100", "h200", ...); an unknown name raises
    InvalidValueError listing the known ones."""
    c = MlaBlockSparseParams()
    lib().call("mla_block_sparse_preset", str(name).encode(), ctypes.byref(c))
    return BlockSparseParams._from_c(c)


def block_sparse_select(q, kv, block_table, cache_seqlens, params=None, *, kv_format=None,
                        indices=None, num_selected=None, stream=None):
    """Block-sparse index lists for sparse_decode.

    q [B, s_q, h_q, 576] (bf16/f32/f64), kv a paged cache, block_table [B, max_pages] int32,
    cache_seqlens [B] int32 (the s_q new tokens included); params: None (NSA's defaults),
    BlockSparseParams, a preset name or a dict. Returns (indices [B, s_q, C] int32 global
    slots ascending, -1 padded, C = block_sparse_capacity(params) unless given;
    num_selected [B, s_q] int32 valid entries of each list). CPU only for now.
    """
    p = _params(params)
    fmt = kv_format_of(kv, kv_format)
    shape = shape_of(q, 4)
    if shape is not None:
        B, s_q = shape[0], shape[1]
        if indices is None:
            indices = _call.empty(q, (B, s_q, block_sparse_capacity(p)), "i32")
        if num_selected is None:
            num_selected = _call.empty(q, (B, s_q), "i32")
    c = Call(q, stream)
    pc = p._to_c()
    c.run("mla_block_sparse_select", c.t(q, "q"), c.cache(kv, "kv", fmt), fmt,
          c.t(block_table, "block_table"), c.t(cache_seqlens, "cache_seqlens"),
          ctypes.byref(pc), c.t(indices, "indices", True),
          c.t(num_selected, "num_selected", True), c.stream_arg)
    return indices, num_selected
