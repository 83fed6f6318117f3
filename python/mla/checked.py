"""The checked mode (mla::ExecContext::check_device_values; c_api.h
mla_set_check_device_values), for the calling thread.

A guarded CUDA kernel cannot report a bad page id, length, slot or index synchronously:
by the documented contract of each op it gives NaN rows (dense decode) or treats the
entry as "none" (sparse decode and prefill, top-k, the cache writers). In the checked
mode, calls on CUDA tensors copy those small index tensors to the host, synchronise the
stream and check them as the CPU path does, so the bad value is an OutOfRangeError
naming it. It costs a copy and a sync per call: for debugging and tests, not serving.

    with mla.checked_device_values():
        out, lse = mla.mla_decode(q, kv_cache, block_table, cache_seqlens, scale)
"""

from __future__ import annotations

import contextlib

from ._lib import lib


def check_device_values() -> bool:
    """Whether the checked mode is on for this thread."""
    return bool(lib().fn("mla_check_device_values")())


def set_check_device_values(on: bool) -> None:
    """Turns the checked mode on or off for this thread."""
    lib().fn("mla_set_check_device_values")(1 if on else 0)


@contextlib.contextmanager
def checked_device_values(on: bool = True):
    """The checked mode on (or off) for this thread inside the block; restored after."""
    before = check_device_values()
    set_check_device_values(on)
    try:
        yield
    finally:
        set_check_device_values(before)
