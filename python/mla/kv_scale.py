"""The per-tensor scale of an fp8_e4m3 cache (vLLM's dense fp8 layout: 576 e4m3
codes per token, value = code * scale; docs/python.md), for the calling thread
(c_api.h mla_set_kv_scale).

Every op that takes a cache takes it as (array, kv_format); the fp8_e4m3 format's
one scale ([1] f32 on the cache's device, e.g. vLLM's layer._k_scale) is set around
the calls instead, so the same call sites serve every format:

    with mla.kv_scale(k_scale):
        mla.append_kv(c_kv, k_rope, slots, cache, kv_format="fp8_e4m3")
        out, lse = mla.mla_decode(q, cache, block_table, cache_seqlens, softmax_scale,
                                  kv_format="fp8_e4m3")

Only the view is kept (no copy, no host read): the array must hold the scale while
the calls run, and a CUDA graph captured inside the block reads it at replay. A call
on an fp8_e4m3 cache with no scale set raises InvalidValueError naming it.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

from ._call import ctypes_tensor
from ._lib import lib

_current = threading.local()


def set_kv_scale(scale) -> None:
    """Sets this thread's fp8_e4m3 cache scale (None clears it)."""
    if scale is None:
        lib().call("mla_set_kv_scale", None)
    else:
        keep: list = []
        t = ctypes_tensor(scale, "scale", False, None, keep)
        lib().call("mla_set_kv_scale", ctypes.byref(t))
    _current.scale = scale


@contextlib.contextmanager
def kv_scale(scale):
    """`scale` as this thread's fp8_e4m3 cache scale inside the block; the one
    before is restored after."""
    before = getattr(_current, "scale", None)
    set_kv_scale(scale)
    try:
        yield
    finally:
        set_kv_scale(before)
