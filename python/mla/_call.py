"""The call machinery of the package: every array operation goes through here.

One call = one pass over its arguments. The framework of the reference array
(the first array argument) is found once; outputs and workspace are allocated
with that framework on its device; the stream is its current stream unless one
is given; then the compiled module ``mla._ext`` (src/python/mla_ext.cpp) turns
each array into an ``mla_tensor`` (torch and NumPy read directly, anything else
through DLPack), range-checks each Python int into its C type and calls the C
ABI. The C++ library validates the arguments (once) and names the bad one.

``mla._ext`` is built with the library (CMake target mla_python_ext) on
CPython's limited API: one file serves every Python from 3.10 on. It is looked
for in the package directory (``pip install``) and next to the libmla.so in use
(a build tree). Functions that take C structs (layer, rope, block-sparse, DSA
step, transfer) stay on ctypes (mla._lib) and get their tensor views here too.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.machinery
import importlib.util
import sys
import threading
from pathlib import Path

from . import errors
from ._lib import (DTYPE_CODES, DTYPE_SIZES, KV_FORMATS, MAX_DIMS, MlaTensor, c_value, choice,
                   lib)

D_C, D_R, D_QK, D_V = 512, 64, 576, 512

# ---- the compiled module ------------------------------------------------------

_ext_module = None
_ext_lock = threading.Lock()


def _load_ext():
    L = lib()
    try:
        from . import _ext as mod  # installed beside the package
    except ImportError:
        path = L.path.parent / "_ext.abi3.so"
        if not path.is_file():
            raise errors.LibraryNotFoundError(
                f"mla._ext (the compiled call machinery) is neither in the package nor at {path}: "
                "build the tree (cmake --build build; CMake needs the Python headers, "
                "Debian package python3-dev) or pip install the package") from None
        spec = importlib.util.spec_from_file_location(
            "mla._ext", path, loader=importlib.machinery.ExtensionFileLoader("mla._ext", str(path)))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    mod.bind(L._dll._handle, dict(errors.BY_CODE), errors.MlaError)
    return mod


_torch_ext_module = None  # mla._torch_ext once loaded; False: none for this torch


def _load_torch_ext():
    """mla._torch_ext built for the running torch (scripts/build_torch_ext.sh), from the
    package directory or beside libmla.so; None when there is none, or it was built
    for another torch major.minor (its C++ ABI would not match)."""
    try:
        L = lib()
    except errors.LibraryNotFoundError:
        return None  # (every array call will say so)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    here = Path(__file__).resolve().parent
    for path in (here / f"_torch_ext{suffix}", L.path.parent / f"_torch_ext{suffix}"):
        if not path.is_file():
            continue
        try:
            loader = importlib.machinery.ExtensionFileLoader("mla._torch_ext", str(path))
            spec = importlib.util.spec_from_file_location("mla._torch_ext", path,
                                                          loader=loader)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        except ImportError:
            return None
        built = mod.TORCH_VERSION.split(".")[:2]
        if built != _torch.__version__.split(".")[:2]:
            return None
        mod.bind(L._dll._handle, dict(errors.BY_CODE), errors.MlaError)
        return mod
    return None


def torch_ext_for(q):
    """mla._torch_ext when q is a torch CUDA tensor and the module exists for this
    torch, else None."""
    global _torch_ext_module
    if framework_of(q) != "torch" or not q.is_cuda:
        return None
    if _torch_ext_module is None:
        _torch_ext_module = _load_torch_ext() or False
    return _torch_ext_module or None


def ext():
    """The bound compiled module (loaded on first use)."""
    global _ext_module
    if _ext_module is None:
        with _ext_lock:
            if _ext_module is None:
                _ext_module = _load_ext()
    return _ext_module


# ---- frameworks ---------------------------------------------------------------

_FRAMEWORK_BY_TYPE: dict = {}


def framework_of(x) -> str:
    """'numpy', 'torch', 'cupy', 'jax' or 'other' (by the array type's module)."""
    t = type(x)
    fw = _FRAMEWORK_BY_TYPE.get(t)
    if fw is None:
        mod = t.__module__.split(".", 1)[0]
        fw = mod if mod in ("numpy", "torch", "cupy") else "jax" if mod in ("jax", "jaxlib") \
            else "other"
        if fw == "torch":
            torch_module()  # stream_handle and device_guard use it
        _FRAMEWORK_BY_TYPE[t] = fw
    return fw


_DTYPE_BY_NAME = {"float32": "f32", "float64": "f64", "bfloat16": "bf16", "float16": "f16",
                  "float8_e4m3fn": "e4m3", "uint8": "u8", "int32": "i32", "int64": "i64"}
_NUMPY_NAMES = {"f32": "float32", "f64": "float64", "f16": "float16", "u8": "uint8",
                "i32": "int32", "i64": "int64"}
_torch = None  # the torch module, once a torch tensor has been seen
_TORCH_DTYPES: dict = {}  # our name -> torch dtype
_TORCH_NAMES: dict = {}  # torch dtype -> our name
_TORCH_FLOAT_OUT: dict = {}  # q dtype whose out keeps it -> the lse dtype beside it


def torch_module():
    """The torch module (imported on first use; its dtypes are mapped then)."""
    global _torch
    if _torch is None:
        import torch

        names = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16,
                 "f16": torch.float16, "e4m3": torch.float8_e4m3fn, "u8": torch.uint8,
                 "i32": torch.int32, "i64": torch.int64}
        _TORCH_DTYPES.update(names)
        _TORCH_NAMES.update({v: k for k, v in names.items()})
        _TORCH_FLOAT_OUT.update({torch.bfloat16: torch.float32, torch.float32: torch.float32,
                                 torch.float64: torch.float64})
        _torch = torch
        try:  # torch.ops.mla.*, for torch.compile
            from . import torch_ops  # noqa: F401
        except (ImportError, AttributeError):
            pass
        global _torch_ext_module
        if _torch_ext_module is None:  # also registers torch.ops.mla.decode's CUDA kernel
            _torch_ext_module = _load_torch_ext() or False
    return _torch


def torch_compiling() -> bool:
    """True while torch.compile (Dynamo) traces the caller: the ops then go through
    the torch.library custom ops (mla.torch_ops), which a graph can hold. torch is
    looked up in sys.modules: it may have been imported after mla (mla never
    imports it here)."""
    # No module state is read here: Dynamo guards on what a trace reads, and the
    # first trace may import mla.torch_ops (which sets that state) mid-way.
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    compiler = getattr(torch, "compiler", None)
    return compiler is not None and compiler.is_compiling()


def dtype_name(x) -> str:
    """Our dtype name ('bf16', 'f32', ...) of a framework array, or raise DTypeError."""
    dt = getattr(x, "dtype", None)
    if framework_of(x) == "torch":
        torch_module()
        ours = _TORCH_NAMES.get(dt)
    else:
        ours = _DTYPE_BY_NAME.get(str(dt).rsplit(".", 1)[-1])
    if ours is None:
        raise errors.DTypeError(f"dtype {dt} has no mla equivalent")
    return ours


def out_dtype_arg(out_dtype):
    """An `out_dtype` argument: None or one of our dtype names ('bf16', 'f32', ...)."""
    if out_dtype is not None:
        choice(out_dtype, DTYPE_CODES, "out_dtype")
    return out_dtype


def float_out(x) -> str:
    """The output dtype an op gives by default: x's when floating (bf16/f32/f64), else f32."""
    d = dtype_name(x)
    return d if d in ("bf16", "f32", "f64") else "f32"


def device_of(x) -> tuple[str, int]:
    """('cpu', 0) or ('cuda', id) for any supported array."""
    fw = framework_of(x)
    if fw == "numpy":
        return ("cpu", 0)
    if fw == "torch":
        return (x.device.type, x.device.index or 0)
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None:
        kind, idx = dev()
        if int(kind) in (2, 13):  # kDLCUDA, kDLCUDAManaged
            return ("cuda", int(idx))
    return ("cpu", 0)


def numpy_dtype(dtype: str):
    import numpy as np

    if dtype in ("bf16", "e4m3"):
        try:
            import ml_dtypes
        except ImportError:
            raise errors.DTypeError(
                f"{dtype} NumPy arrays need the ml_dtypes package (pip install ml_dtypes)"
            ) from None
        return np.dtype(ml_dtypes.bfloat16 if dtype == "bf16" else ml_dtypes.float8_e4m3fn)
    return np.dtype(_NUMPY_NAMES[dtype])


def torch_dtype(dtype: str):
    torch_module()
    return _TORCH_DTYPES[dtype]


def empty(like, shape, dtype: str):
    """An uninitialised array of `shape` and our dtype name, beside `like` (same
    framework and device; NumPy for CPU arrays of other frameworks)."""
    fw = framework_of(like)
    if fw == "torch":
        torch = torch_module()
        return torch.empty(shape, dtype=_TORCH_DTYPES[dtype], device=like.device)
    dev, dev_id = device_of(like)
    shape = tuple(int(s) for s in shape)
    if dev == "cpu":
        import numpy as np

        return np.empty(shape, dtype=numpy_dtype(dtype))
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        if dtype in ("bf16", "e4m3"):
            raise errors.DTypeError(
                f"CuPy has no {dtype} arrays: pass out_dtype='f32' or torch tensors")
        with cupy.cuda.Device(dev_id):
            return cupy.empty(shape, dtype=_NUMPY_NAMES[dtype])
    try:
        torch = torch_module()
    except ImportError:
        raise errors.DeviceError(
            f"cannot allocate a CUDA output beside a {type(like).__name__}: "
            "install torch or cupy, or pass the outputs") from None
    return torch.empty(shape, dtype=_TORCH_DTYPES[dtype], device=f"cuda:{dev_id}")


def like_arg(like):
    """A `like=` argument: an array (of any framework) to allocate beside, or None for a
    NumPy (CPU) one."""
    if like is None:
        import numpy as np

        return np.empty(0, np.float32)
    if framework_of(like) == "other" and not hasattr(like, "__dlpack__"):
        raise errors.DTypeError(f"like: {type(like).__name__} is not an array")
    return like


def empty_sized(like, dims: dict, dtype: str):
    """`empty` of the shape dims.values(), whose entries are the caller's numbers where
    keyed by an argument's name (else ours, keyed "#0", "#1", ...): each must be a
    non-negative int64 and the array's byte count must fit int64, checked before anything
    is allocated; errors name the argument and its value."""
    shape, total = [], DTYPE_SIZES[dtype]
    for name, v in dims.items():
        if not name.startswith("#"):
            v = c_value(ctypes.c_int64, v, name)
            if v < 0:
                raise errors.InvalidValueError(f"{name} = {v} is negative")
        shape.append(v)
        total *= v
    if total > 2**63 - 1:
        given = ", ".join(f"{n} = {v}" for n, v in dims.items() if not n.startswith("#"))
        raise errors.OutOfRangeError(
            f"{given}: the array {shape} would hold {total} bytes, past 2^63 - 1")
    return empty(like, tuple(shape), dtype)


def alloc_bytes(nbytes: int, like):
    """A workspace of `nbytes` bytes beside `like` (called by mla._ext)."""
    return empty(like, (nbytes,), "u8")


def nbytes(x) -> int:
    if framework_of(x) == "torch":
        return x.numel() * x.element_size()
    return int(x.nbytes)


def shape_of(x, rank: int):
    """x's shape when it has `rank` dims; otherwise None (the C++ check then names it)."""
    shape = tuple(getattr(x, "shape", ()))
    return shape if len(shape) == rank else None


def kv_format_code(kv_format) -> int:
    """MLA_KV_* code for a name or code; None gives -1: mla._ext takes the format
    from the cache's dtype and entry width (u8 or e4m3 bytes: fp8_e4m3 when 576
    wide, else fp8_ds_mla; else bf16)."""
    if kv_format is None:
        return -1
    if kv_format in KV_FORMATS.values() and not isinstance(kv_format, (str, float)):
        return int(kv_format)  # a code (MLA_KV_BF16, MLA_KV_FP8_DS_MLA)
    return choice(kv_format, KV_FORMATS, "kv_format")


def kv_format_of(cache, kv_format) -> int:
    """MLA_KV_* code, with None resolved from the cache's dtype (for ctypes calls)."""
    code = kv_format_code(kv_format)
    if code != -1:
        return code
    try:
        dt = dtype_name(cache)
    except errors.DTypeError:
        dt = "?"
    if dt not in ("u8", "e4m3"):
        return KV_FORMATS["bf16"]
    shape = tuple(getattr(cache, "shape", ()))
    return KV_FORMATS["fp8_e4m3" if shape and int(shape[-1]) == 576 else "fp8_ds_mla"]


# ---- streams and devices --------------------------------------------------------


def stream_handle(like, stream=None) -> int | None:
    """The cudaStream_t (as int) to run on, or None for CPU arrays.

    Explicit `stream` wins: an int handle, a torch.cuda.Stream (.cuda_stream) or a
    cupy Stream (.ptr). Otherwise torch tensors run on torch's current stream,
    CuPy arrays on CuPy's current stream, others on the legacy default stream (0).
    """
    if stream is not None:
        for attr in ("cuda_stream", "ptr"):
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        if isinstance(stream, float) or not hasattr(stream, "__index__"):
            raise errors.InvalidValueError(
                f"stream = {stream!r} is not a CUDA stream (an int cudaStream_t, a "
                "torch.cuda.Stream or a CuPy stream)")
        return c_value(ctypes.c_uint64, stream, "stream")
    fw = framework_of(like)
    if fw == "torch":
        if not like.is_cuda:
            return None
        return _torch._C._cuda_getCurrentRawStream(like.get_device())
    dev, _ = device_of(like)
    if dev != "cuda":
        return None
    if fw == "cupy":
        import cupy

        return cupy.cuda.get_current_stream().ptr
    return 0


def device_guard(like):
    """Makes `like`'s CUDA device current for the call (torch tensors): the library
    launches on the current device and checks that it is the arrays'."""
    if framework_of(like) == "torch" and like.is_cuda:
        idx = like.get_device()
        if _torch._C._cuda_getDevice() != idx:
            return _torch.cuda.device(idx)
    return contextlib.nullcontext()


# ---- outputs ---------------------------------------------------------------------


def decode_outputs(q, out, lse, out_dtype, partial: bool = False):
    """out [B, s_q, h_q, 512] and lse [B, h_q, s_q] for a dense or sparse decode (q's
    dtype when floating, f32 for partials; lse f64 beside an f64 out, else f32)."""
    if out is None and lse is None and out_dtype is None and not partial and \
            framework_of(q) == "torch" and q.dim() == 4:
        # torch, the hot path: new_empty inherits q's device (and dtype) without a lookup.
        B, s_q, h_q, _ = q.shape
        dt = q.dtype
        if dt in _TORCH_FLOAT_OUT:
            return q.new_empty((B, s_q, h_q, D_V)), q.new_empty((B, h_q, s_q),
                                                                 dtype=_TORCH_FLOAT_OUT[dt])
    shape = shape_of(q, 4)
    if shape is None:
        return out, lse  # q's rank is wrong: left to the C++ check, which names q
    B, s_q, h_q, _ = shape
    od = out_dtype_arg(out_dtype) or ("f32" if partial else float_out(q))
    if out is None:
        out = empty(q, (B, s_q, h_q, D_V), od)
    if lse is None:
        lse = empty(q, (B, h_q, s_q), "f64" if od == "f64" else "f32")
    return out, lse


def prefill_outputs(q, out, lse, out_dtype):
    """out [s_q, h_q, 512] and lse [s_q, h_q] for sparse prefill."""
    shape = shape_of(q, 3)
    if shape is not None:
        s_q, h_q, _ = shape
        od = out_dtype_arg(out_dtype) or float_out(q)
        if out is None:
            out = empty(q, (s_q, h_q, D_V), od)
        if lse is None:
            lse = empty(q, (s_q, h_q), "f64" if od == "f64" else "f32")
    return out, lse


# ---- one call --------------------------------------------------------------------


def run(fn: str, like, stream, *args):
    """Calls the C ABI function `fn` through mla._ext with `args` in C order (arrays
    of any framework, ints, floats; `stream` last when the function takes one),
    with `like`'s device current."""
    f = getattr(ext(), fn)
    if framework_of(like) == "torch" and like.is_cuda:
        idx = like.get_device()
        if _torch._C._cuda_getDevice() != idx:
            with _torch.cuda.device(idx):
                return f(*args)
    return f(*args)


# Workspaces of eager torch calls on torch's current stream, one per (device, stream),
# grown as needed: calls on one stream run in order, so they may share one buffer,
# and a hot loop allocates nothing. Never used while the stream is being captured
# into a CUDA graph (the graph then gets its own, from its pool).
_STREAM_WORKSPACES: dict = {}


def release_workspaces() -> None:
    """Drops the workspaces mla keeps per CUDA stream (they are remade on demand)."""
    _STREAM_WORKSPACES.clear()
    if _torch_ext_module:
        _torch_ext_module.release_workspaces()


def kept_workspaces() -> dict:
    """{(device, stream): workspace} that mla keeps now (tests, memory accounting)."""
    kept = dict(_STREAM_WORKSPACES)
    if _torch_ext_module:
        kept.update(_torch_ext_module.kept_workspaces())
    return kept


def run_with_workspace(fn: str, like, stream, workspace, *args, grow: bool = False,
                       current_stream: bool = False):
    """Runs `fn` (mla_decode, mla_sparse_decode, mla_sparse_prefill) with `args` (the
    inputs of its workspace-size function) and `workspace` (any byte buffer on like's
    device) or, when None, one allocated beside `like` (the size is asked once per
    shape); with `grow`, a workspace too small is replaced too. `current_stream`:
    `stream` is torch's current stream, whose kept workspace may serve. Returns the
    workspace used, or None."""
    f = getattr(ext(), fn + "_auto")
    if framework_of(like) == "torch" and like.is_cuda:
        idx = like.get_device()
        here = _torch._C._cuda_getDevice() == idx
        key = None
        # (the capture test reads the current device's current stream: `stream` when here)
        if workspace is None and current_stream and here and \
                not _torch._C._cuda_isCurrentStreamCapturing():
            key = (idx, stream)
            workspace, grow = _STREAM_WORKSPACES.get(key), True
        alloc = alloc_bytes if (workspace is None or grow) else None
        if here:
            used = f(*args, workspace, stream, alloc)
        else:
            with _torch.cuda.device(idx):
                used = f(*args, workspace, stream, alloc)
        if key is not None and used is not None:
            _STREAM_WORKSPACES[key] = used
        return used
    return f(*args, workspace, stream, alloc_bytes if (workspace is None or grow) else None)


class Call:
    """Tensor views for the ctypes functions that take C structs; keeps what a DLPack
    producer handed over alive through the call."""

    def __init__(self, like, stream=None):
        self.keep: list = []
        self.like = like
        self.stream = stream_handle(like, stream)

    def t(self, x, name: str, writable: bool = False):
        """ctypes.byref(mla_tensor) for x, or None (NULL) when x is None."""
        if x is None:
            return None
        t = ctypes_tensor(x, name, writable, self.stream, self.keep)
        return ctypes.byref(t)

    def cache(self, x, name: str, fmt: int, writable: bool = False):
        """A cache view (written only where the op appends to it: `writable`); an fp8
        cache given as float8_e4m3fn bytes is passed as u8."""
        ref = self.t(x, name, writable)
        if ref is not None and fmt == KV_FORMATS["fp8_ds_mla"] and \
                ref._obj.dtype == DTYPE_CODES["e4m3"]:
            ref._obj.dtype = DTYPE_CODES["u8"]
        return ref

    def workspace(self, workspace):
        """(address, bytes) of a byte buffer on the call's device, or (None, 0)."""
        if workspace is None:
            return None, 0
        ref = self.t(workspace, "workspace", writable=True)
        return ctypes.c_void_p(ref._obj.data), nbytes(workspace)

    @property
    def stream_arg(self):
        return ctypes.c_void_p(self.stream) if self.stream else None

    def run(self, fn: str, *args) -> None:
        with device_guard(self.like):
            lib().call(fn, *args)


def ctypes_tensor(x, name: str, writable: bool, stream, keep: list) -> MlaTensor:
    """An MlaTensor (ctypes) for x, read by mla._ext; keep collects what must outlive
    the C call."""
    data, dtype, dev_type, dev_id, shape, strides, hold = ext().tensor(
        x, name, writable, -1 if stream is None else stream)
    t = MlaTensor()
    t.data, t.dtype, t.device_type, t.device_id, t.ndim = data or None, dtype, dev_type, \
        dev_id, len(shape)
    for d in range(min(len(shape), MAX_DIMS)):
        t.shape[d], t.strides[d] = shape[d], strides[d]
    keep.append(t)
    if hold is not None:
        keep.append(hold)
    return t

