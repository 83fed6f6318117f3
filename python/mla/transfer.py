"""KV transfer plans (mla/transfer.hpp; docs/multi-gpu.md): moving a request's paged
caches (the latent cache and DSA's indexer key cache) between two pools, e.g. from a
prefill engine's pages to a decode engine's. Host-side planning and the memcpy
executor over host buffers; the NCCL executor lives in the optional library
libmla_transfer_nccl and is not wrapped here.

    plan = mla.plan_transfer(src_latent=mla.TransferSide(src_row, 900, 64),
                             dst_latent=mla.TransferSide(dst_row, 4000, 16), num_tokens=300)
    for r in plan.runs:   # byte copies, adjacent pages coalesced
        ...
    mla.execute_copy_plan(plan, [src_cache], [dst_cache])   # host arrays
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Mapping
from typing import Any, Sequence

from . import errors
from ._call import ctypes_tensor
from ._lib import (DEVICE_CPU, MASTER_ADDR_MAX, DTYPE_NAMES, DTYPE_SIZES, GETENV_FN, KV_FORMATS, MlaCopyRun,
                   MlaLaunchInfo, MlaTransferBuffers, MlaTransferPlanInfo, MlaTransferRequest,
                   MlaTransferSide, c_struct, c_value, choice, expect_type, lib)

TRANSFER_CACHES = {"latent": 0, "indexer": 1}  # mla::TransferCache
TRANSFER_ORDERS = {"by_layer": 0, "whole": 1}  # mla::TransferOrder
_CACHE_NAMES = {v: k for k, v in TRANSFER_CACHES.items()}
_ORDER_NAMES = {v: k for k, v in TRANSFER_ORDERS.items()}


@dataclasses.dataclass
class TransferSide:
    """mla::TransferSide: one side (source or destination) of one cache kind.

    pages: the request's block_table row (page ids in token order); num_pages: pages in
    the pool of one layer; page_size: tokens per page (64 for the indexer cache);
    page_stride: bytes between pages, 0 = dense; layer_stride: bytes between layers'
    pools in one allocation, 0 = one allocation per layer."""

    pages: Any
    num_pages: int
    page_size: int
    page_stride: int = 0
    layer_stride: int = 0


@dataclasses.dataclass
class TransferRequest:
    """mla::TransferRequest: tokens [first_token, first_token + num_tokens) of every layer.
    Formats by name ("bf16" / "fp8_ds_mla"); order "by_layer" or "whole"."""

    src_latent: TransferSide
    dst_latent: TransferSide
    num_tokens: int
    first_token: int = 0
    num_layers: int = 1
    src_format: str = "bf16"
    dst_format: str | None = None  # None: src_format
    with_indexer: bool | None = None  # None: whether src_indexer is given
    src_indexer: TransferSide | None = None
    dst_indexer: TransferSide | None = None
    order: str = "by_layer"


@dataclasses.dataclass(frozen=True)
class CopyRun:
    """mla::CopyRun: `bytes` bytes from src_offset to dst_offset, counted from the base of
    `layer`'s pool of `cache` ("latent" / "indexer") on each side."""

    src_offset: int
    dst_offset: int
    bytes: int
    layer: int = 0
    cache: str = "latent"


@dataclasses.dataclass
class TransferPlan:
    """mla::TransferPlan. by_layer: the runs of layer l are
    runs[layer_begin[l]:layer_begin[l + 1]]; whole: layer_begin == [0, len(runs)]."""

    runs: list
    layer_begin: list
    total_bytes: int
    largest_run: int
    order: str


@dataclasses.dataclass
class TransferBuffers:
    """mla::TransferBuffers: every layer's pool of each cache kind on one side, as host
    arrays (one per layer; layer_bases() cuts one allocation into per-layer views)."""

    latent: Sequence = ()
    indexer: Sequence = ()


def transfer_cache_name(cache: int) -> str:
    """'latent' / 'indexer' for a TransferCache code ('?' for another)."""
    return lib().fn("mla_transfer_cache_name")(c_value(ctypes.c_int32, cache, "cache")).decode()


def _side(side: TransferSide | None, name: str, keep: list) -> MlaTransferSide:
    if side is None:
        return MlaTransferSide()
    expect_type(side, TransferSide, name)
    import numpy as np

    raw = np.asarray(side.pages)
    if raw.size and raw.dtype.kind not in "iu":
        raise errors.DTypeError(f"{name}.pages: dtype {raw.dtype} is not an integer type")
    wide = raw.astype(np.int64).reshape(-1)
    bad = np.flatnonzero((wide < -2**31) | (wide >= 2**31))
    if bad.size:
        j = int(bad[0])
        raise errors.OutOfRangeError(f"{name}.pages[{j}] = {int(wide[j])} does not fit int32")
    pages = np.ascontiguousarray(wide, np.int32)
    keep.append(pages)
    fields = dataclasses.asdict(side)
    fields.update(pages=pages.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                  num_page_ids=pages.size)
    return c_struct(MlaTransferSide, name, fields)


def _request(req: TransferRequest, keep: list) -> MlaTransferRequest:
    expect_type(req, TransferRequest, "request")
    with_indexer = req.src_indexer is not None if req.with_indexer is None else bool(
        req.with_indexer)
    if with_indexer:
        for name in ("src_indexer", "dst_indexer"):
            if getattr(req, name) is None:
                raise errors.InvalidValueError(f"with_indexer = True but {name} is None")
    src_fmt = choice(req.src_format, KV_FORMATS, "src_format")
    dst_fmt = choice(req.src_format if req.dst_format is None else req.dst_format, KV_FORMATS,
                    "dst_format")
    sides = {n: _side(getattr(req, n) if with_indexer or n.endswith("latent") else None, n,
                      keep)
             for n in ("src_latent", "dst_latent", "src_indexer", "dst_indexer")}
    return c_struct(MlaTransferRequest, "", dict(
        first_token=req.first_token, num_tokens=req.num_tokens, num_layers=req.num_layers,
        src_format=src_fmt, dst_format=dst_fmt, with_indexer=int(with_indexer),
        order=choice(req.order, TRANSFER_ORDERS, "order"), **sides))


def plan_transfer(request: TransferRequest | None = None, **fields) -> TransferPlan:
    """Builds the plan: the request's token range as byte copies with adjacent pages
    coalesced. Pass a TransferRequest, or its fields as keywords. A bad value raises the
    mla error naming it (e.g. OutOfRangeError "src_latent.pages[3] = 912 is past
    num_pages = 900")."""
    if request is None:
        request = TransferRequest(**fields)
    elif fields:
        request = dataclasses.replace(request, **fields)
    keep: list = []
    c = _request(request, keep)
    info = MlaTransferPlanInfo()
    L = lib()
    L.call("mla_plan_transfer", ctypes.byref(c), None, 0, None, 0, ctypes.byref(info))
    runs = (MlaCopyRun * info.num_runs)()
    begin = (ctypes.c_int64 * info.num_layer_begin)()
    L.call("mla_plan_transfer", ctypes.byref(c), runs, len(runs), begin, len(begin),
           ctypes.byref(info))
    return TransferPlan(
        runs=[CopyRun(r.src_offset, r.dst_offset, r.bytes, r.layer, _CACHE_NAMES[r.cache])
              for r in runs],
        layer_begin=list(begin), total_bytes=info.total_bytes, largest_run=info.largest_run,
        order=_ORDER_NAMES[info.order])


def _bytes_view(x, name: str):
    """A flat uint8 NumPy view of a dense host array (no copy)."""
    import numpy as np

    a = x if isinstance(x, np.ndarray) else np.from_dlpack(x)
    if not a.flags.c_contiguous:
        raise errors.StrideError(f"{name}: the array is not contiguous (strides {a.strides})")
    return a.reshape(-1).view(np.uint8)


def layer_bases(base, layer_stride: int, num_layers: int) -> list:
    """Per-layer views of pools that share one allocation: layer l's view starts
    l * layer_stride bytes into `base` (a dense host array) and runs to its end."""
    flat = _bytes_view(base, "base")
    layer_stride = c_value(ctypes.c_int64, layer_stride, "layer_stride")
    num_layers = c_value(ctypes.c_int32, num_layers, "num_layers")
    n = max(num_layers, 0)
    out = (ctypes.c_void_p * n)()
    lib().call("mla_layer_bases", ctypes.c_void_p(flat.ctypes.data), layer_stride, num_layers,
               out, n)
    views = []
    for l, p in enumerate(out):
        off = (p or 0) - flat.ctypes.data
        if off < 0 or off > flat.size:
            raise errors.OutOfRangeError(
                f"layer_bases: layer {l} starts {off} bytes into base, which holds {flat.size}")
        views.append(flat[off:])
    return views


def _buffers(b, side: str, runs: list, keep: list) -> MlaTransferBuffers:
    """mla_transfer_buffers over host arrays, each checked to hold every run that reads
    (src) or writes (dst) it: the C++ executor sees raw pointers and cannot check."""
    if not isinstance(b, TransferBuffers):
        b = TransferBuffers(latent=b)
    lists = {}
    for kind in ("latent", "indexer"):
        ptrs, sizes = [], []
        for l, x in enumerate(getattr(b, kind)):
            name = f"{side}.{kind}[{l}]"
            t = ctypes_tensor(x, name, side == "dst", None, keep)
            if t.device_type != DEVICE_CPU:
                raise errors.DeviceError(
                    f"{name}: a device array; execute_copy_plan copies host memory (device "
                    "pools move with the NCCL executor of libmla_transfer_nccl)")
            size = DTYPE_SIZES[DTYPE_NAMES[t.dtype]]
            expect = size
            for d in reversed(range(t.ndim)):
                if t.shape[d] != 1 and t.strides[d] * size != expect:
                    raise errors.StrideError(
                        f"{name}: not contiguous (dim {d} has stride {t.strides[d]})")
                expect *= t.shape[d]
            ptrs.append(t.data or 0)
            sizes.append(expect)
        lists[kind] = (ptrs, sizes)
    for i, r in enumerate(runs):
        ptrs, sizes = lists[r.cache]
        if r.layer < len(sizes):
            off = r.src_offset if side == "src" else r.dst_offset
            if off < 0 or off + r.bytes > sizes[r.layer]:
                raise errors.OutOfRangeError(
                    f"runs[{i}]: {side} bytes [{off}, {off + r.bytes}) are past "
                    f"{side}.{r.cache}[{r.layer}], which holds {sizes[r.layer]} bytes")
    arrays = {k: (ctypes.c_void_p * len(p))(*p) for k, (p, _) in lists.items()}
    keep.append(arrays)
    return MlaTransferBuffers(arrays["latent"], len(arrays["latent"]), arrays["indexer"],
                              len(arrays["indexer"]))


def execute_copy_plan(plan, src, dst) -> None:
    """Copies every run of `plan` (a TransferPlan or a list of CopyRun) with memcpy from
    the src pools to the dst pools: TransferBuffers, or a list of per-layer latent arrays.
    Host arrays only. Every base and bound is checked before the first copy."""
    if not isinstance(plan, (TransferPlan, list, tuple)):
        raise errors.InvalidValueError(
            f"plan = {plan!r} is a {type(plan).__name__}, not a TransferPlan or a list of CopyRun")
    runs = plan.runs if isinstance(plan, TransferPlan) else list(plan)
    for i, r in enumerate(runs):
        expect_type(r, CopyRun, f"plan[{i}]")
    c_runs = (MlaCopyRun * len(runs))(*[
        c_struct(MlaCopyRun, f"runs[{i}]", dict(
            src_offset=r.src_offset, dst_offset=r.dst_offset, bytes=r.bytes, layer=r.layer,
            cache=choice(r.cache, TRANSFER_CACHES, f"runs[{i}].cache")))
        for i, r in enumerate(runs)])
    keep: list = []
    s = _buffers(src, "src", runs, keep)
    d = _buffers(dst, "dst", runs, keep)
    lib().call("mla_execute_copy_plan", c_runs, len(c_runs), ctypes.byref(s), ctypes.byref(d))


# ---- launch conventions and the bootstrap exchange --------------------------------


@dataclasses.dataclass
class LaunchInfo:
    """mla::LaunchInfo: torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT."""

    rank: int = -1
    world_size: int = 0
    local_rank: int = -1  # the GPU this process uses; RANK when LOCAL_RANK is unset
    master_addr: str = ""
    master_port: int = 0

    def _c(self) -> MlaLaunchInfo:
        expect_type(self.master_addr, str, "who.master_addr")
        addr = self.master_addr.encode()
        if len(addr) >= MASTER_ADDR_MAX or b"\0" in addr:
            raise errors.InvalidValueError(
                f"who.master_addr = {self.master_addr!r}: at most {MASTER_ADDR_MAX - 1} bytes, "
                "no NUL")
        return c_struct(MlaLaunchInfo, "who", dict(dataclasses.asdict(self), master_addr=addr))


def launch_info_from_env(env=None) -> LaunchInfo:
    """Parses the launch variables strictly from `env` (a mapping; None: the process
    environment, read by the C++ library). Errors name the variable and its value."""
    c = MlaLaunchInfo()
    if env is None:
        lib().call("mla_launch_info_from_env", ctypes.byref(c), GETENV_FN(), None)
    else:
        expect_type(env, Mapping, "env")
        values = {k: ctypes.create_string_buffer(str(v).encode()) for k, v in env.items()}

        def get(name, _user):
            buf = values.get(name.decode())
            return ctypes.addressof(buf) if buf is not None else None

        lib().call("mla_launch_info_from_env", ctypes.byref(c), GETENV_FN(get), None)
    return LaunchInfo(c.rank, c.world_size, c.local_rank, c.master_addr.decode(), c.master_port)


def _exchange(fn: str, who: LaunchInfo, data, extra: tuple, timeout_ms: int) -> bytes:
    n = len(data) if data is not None else 0
    buf = ctypes.create_string_buffer(bytes(data) if data is not None else b"", n)
    expect_type(who, LaunchInfo, "who")
    w = who._c()
    lib().call(fn, ctypes.byref(w), *extra, buf, n,
               c_value(ctypes.c_int32, timeout_ms, "timeout_ms"))
    return buf.raw


def exchange_bytes_tcp(who: LaunchInfo, data: bytes, timeout_ms: int = 60000) -> bytes:
    """Rank 0 serves `data` over TCP at master_addr:master_port to the other ranks; every
    rank returns rank 0's bytes (the others pass a placeholder of the same length)."""
    return _exchange("mla_exchange_bytes_tcp", who, data, (), timeout_ms)


def exchange_bytes_file(who: LaunchInfo, path, data: bytes, timeout_ms: int = 60000) -> bytes:
    """The same through a file: rank 0 writes it atomically, the others wait for it."""
    return _exchange("mla_exchange_bytes_file", who, data, (str(path).encode(),), timeout_ms)
