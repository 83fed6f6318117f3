"""Plan reuse for decode (mla/decode.hpp ``DecodePlan``): the split schedule of a
decode step, made once from the lengths and read by every layer's call.

    plan = mla.decode_plan(q, kv, block_table, cache_seqlens, scale)   # once per step
    for layer in layers:                                                # same lengths
        out, lse = mla.mla_decode(q[layer], kv[layer], block_table, cache_seqlens, scale,
                                  plan=plan)

The plan owns a workspace on q's device: the schedule in its first ``nbytes``, and
the scratch every call with the plan uses after it (the calls of one stream run in
order, so they share it). Making the plan launches one small kernel on the stream
and does not synchronise, so it can be captured in a CUDA graph with the layers'
calls and replayed with new lengths. A call whose shapes, batch_invariant or
device differ from the plan's raises InvalidValueError naming both; the lengths
(cache_seqlens, or the sparse topk_length) must hold the plan's values at every
call, which the host cannot check.
"""

from __future__ import annotations

import ctypes

from . import _call
from ._call import Call, decode_outputs, kv_format_of
from ._lib import MlaDecodePlanInfo


class DecodePlan:
    """A decode step's schedule: ``workspace`` (bytes on the device) and the record
    of what it was made for (``batch``, ``s_q``, ``h_q``, ``batch_invariant``,
    ``sparse``, ``topk``; ``nbytes`` of schedule at the start of the workspace)."""

    __slots__ = ("workspace", "_info", "_record")

    def __init__(self, workspace, info: MlaDecodePlanInfo):
        self.workspace = workspace
        self._info = info
        self._record = bytes(info)  # what mla._torch_ext reads

    batch = property(lambda self: self._info.batch)
    s_q = property(lambda self: self._info.s_q)
    h_q = property(lambda self: self._info.h_q)
    batch_invariant = property(lambda self: bool(self._info.batch_invariant))
    sparse = property(lambda self: bool(self._info.sparse))
    topk = property(lambda self: self._info.topk)
    nbytes = property(lambda self: self._info.bytes)

    def __repr__(self):
        kind = f"sparse topk {self.topk}" if self.sparse else "dense"
        return (f"DecodePlan({kind}, B {self.batch} s_q {self.s_q} h_q {self.h_q}, "
                f"batch_invariant {self.batch_invariant}, {self.nbytes} schedule bytes)")


def _workspace(c: Call, workspace):
    if workspace is None:
        return None, 0
    ws_t = c.t(workspace, "workspace", True)
    return ctypes.c_void_p(ws_t._obj.data), _call.nbytes(workspace)


def _make_plan(c: Call, q, call: str, args, workspace) -> DecodePlan:
    """Runs `{call}_plan` (call: "mla_decode" or "mla_sparse_decode") on `args`, into
    `workspace` or, when None, one of the size `{call}_workspace_size` asks for,
    allocated with q's framework."""
    if workspace is None:
        n = ctypes.c_size_t(0)
        c.run(f"{call}_workspace_size", *args, ctypes.byref(n))
        if n.value:
            workspace = _call.empty(q, (n.value,), "u8")
    ptr, nbytes = _workspace(c, workspace)
    info = MlaDecodePlanInfo()
    c.run(f"{call}_plan", *args, ptr, nbytes, c.stream_arg, ctypes.byref(info))
    return DecodePlan(workspace, info)


def decode_plan(q, kv, block_table, cache_seqlens, softmax_scale, causal=True, *,
                kv_format=None, batch_invariant=False, workspace=None,
                stream=None) -> DecodePlan:
    """The schedule of a dense decode step (arguments as mla.mla_decode; q's values
    are not read). `workspace`: bytes on q's device of at least
    mla.decode_workspace_size(...) (allocated with q's framework when None); it
    becomes the plan's."""
    fmt = kv_format_of(kv, kv_format)
    out, lse = decode_outputs(q, None, None, None)
    c = Call(q, stream)
    args = (c.t(q, "q"), c.cache(kv, "kv", fmt), fmt, c.t(block_table, "block_table"),
            c.t(cache_seqlens, "cache_seqlens"), softmax_scale, int(bool(causal)),
            c.t(out, "out", True), c.t(lse, "lse", True), int(bool(batch_invariant)))
    return _make_plan(c, q, "mla_decode", args, workspace)


def sparse_decode_plan(q, kv, indices, softmax_scale, *, topk_length=None, kv_format=None,
                       workspace=None, stream=None) -> DecodePlan:
    """The schedule of a sparse decode step (arguments as mla.sparse_decode; the key
    counts come from topk_length, or the width of indices). `workspace` as for
    decode_plan (mla.sparse_decode_workspace_size)."""
    fmt = kv_format_of(kv, kv_format)
    out, lse = decode_outputs(q, None, None, None)
    c = Call(q, stream)
    args = (c.t(q, "q"), c.cache(kv, "kv", fmt), fmt, c.t(indices, "indices"),
            c.t(topk_length, "topk_length"), softmax_scale, c.t(out, "out", True),
            c.t(lse, "lse", True))
    return _make_plan(c, q, "mla_sparse_decode", args, workspace)


def decode_planned(q, kv, block_table, cache_seqlens, softmax_scale, causal, kv_format,
                   batch_invariant, out, lse, plan: DecodePlan, workspace, stream):
    """mla_decode_planned through ctypes (the generic path of mla.mla_decode(plan=))."""
    fmt = kv_format_of(kv, kv_format)
    c = Call(q, stream)
    ptr, nbytes = _workspace(c, plan.workspace if workspace is None else workspace)
    c.run("mla_decode_planned", c.t(q, "q"), c.cache(kv, "kv", fmt), fmt,
          c.t(block_table, "block_table"), c.t(cache_seqlens, "cache_seqlens"), softmax_scale,
          int(bool(causal)), c.t(out, "out", True), c.t(lse, "lse", True),
          int(bool(batch_invariant)), ctypes.byref(plan._info), ptr, nbytes, c.stream_arg)


def sparse_decode_planned(q, kv, indices, topk_length, softmax_scale, kv_format, out, lse,
                          plan: DecodePlan, workspace, stream):
    """mla_sparse_decode_planned through ctypes (mla.sparse_decode(plan=))."""
    fmt = kv_format_of(kv, kv_format)
    c = Call(q, stream)
    ptr, nbytes = _workspace(c, plan.workspace if workspace is None else workspace)
    c.run("mla_sparse_decode_planned", c.t(q, "q"), c.cache(kv, "kv", fmt), fmt,
          c.t(indices, "indices"), c.t(topk_length, "topk_length"), softmax_scale,
          c.t(out, "out", True), c.t(lse, "lse", True), ctypes.byref(plan._info), ptr, nbytes,
          c.stream_arg)
