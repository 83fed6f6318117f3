"""Arrays in: any framework's array -> an ``mla_tensor`` for the C ABI.

Three ways in, fastest first:
  * NumPy arrays (including ml_dtypes' bfloat16 / float8_e4m3fn, which NumPy
    cannot export through DLPack): read directly (pointer, strides, dtype).
  * torch tensors: read directly (data_ptr, stride, device); no capsule.
  * anything with ``__dlpack__`` (CuPy, JAX, ...): the DLPack capsule is read
    through ctypes, both the legacy ``DLManagedTensor`` ("dltensor") and the
    versioned ``DLManagedTensorVersioned`` ("dltensor_versioned") layouts.
    The capsule is not consumed: it is kept alive for the duration of the call
    and its own destructor releases the tensor afterwards, as the protocol says
    an unconsumed capsule does.

No framework is imported here.
"""

from __future__ import annotations

import ctypes

from . import errors
from ._lib import DEVICE_CPU, DEVICE_CUDA, DTYPE_CODES, DTYPE_SIZES, MAX_DIMS, MlaTensor

# Framework dtype names (numpy / ml_dtypes / torch / cupy spell them alike) -> ours.
_DTYPE_BY_NAME = {
    "float32": "f32",
    "float64": "f64",
    "bfloat16": "bf16",
    "float16": "f16",
    "float8_e4m3fn": "e4m3",
    "uint8": "u8",
    "int32": "i32",
    "int64": "i64",
}


# ---- DLPack structs (dlpack.h, v0.x and v1.x) ---------------------------------
class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", DLTensor)]


DLPACK_FLAG_READ_ONLY = 1 << 0
DLPACK_FLAG_IS_COPIED = 1 << 1

# DLPack device types: CPU, CUDA, CUDA pinned host memory (CPU-addressable), managed.
_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST, _KDL_CUDA_MANAGED = 1, 2, 3, 13
# DLPack (code, bits) -> our dtype name.
_DL_DTYPES = {
    (2, 32): "f32", (2, 64): "f64", (4, 16): "bf16", (2, 16): "f16",
    (10, 8): "e4m3", (1, 8): "u8", (0, 32): "i32", (0, 64): "i64",
}

_capsule_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get_pointer.restype = ctypes.c_void_p
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def framework_of(x) -> str:
    """'numpy', 'torch', 'cupy', 'jax' or 'other' (by the array type's module)."""
    mod = type(x).__module__.split(".", 1)[0]
    if mod in ("numpy", "torch", "cupy"):
        return mod
    if mod in ("jax", "jaxlib"):
        return "jax"
    return "other"


def dtype_name(x) -> str:
    """Our dtype name ('bf16', 'f32', ...) of a framework array, or raise DTypeError."""
    name = str(getattr(x, "dtype", "?")).rsplit(".", 1)[-1]
    ours = _DTYPE_BY_NAME.get(name)
    if ours is None:
        raise errors.DTypeError(f"dtype {name} has no mla equivalent")
    return ours


def _fill(t: MlaTensor, name: str, data: int, dtype: str, dev_type: int, dev_id: int,
          shape, strides) -> MlaTensor:
    if len(shape) > MAX_DIMS:
        raise errors.ShapeError(f"{name}: ndim = {len(shape)} is more than mla's {MAX_DIMS}")
    t.data = data or None
    t.dtype = DTYPE_CODES[dtype]
    t.device_type = dev_type
    t.device_id = dev_id
    t.ndim = len(shape)
    for d, (n, s) in enumerate(zip(shape, strides)):
        t.shape[d] = n
        t.strides[d] = s
    return t


def _contiguous_strides(shape) -> list[int]:
    out, s = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        out[d] = s
        s *= shape[d]
    return out


def _from_numpy(x, name: str, writable: bool) -> MlaTensor:
    try:
        dt = dtype_name(x)
    except errors.DTypeError:
        raise errors.DTypeError(f"{name}: dtype {x.dtype} has no mla equivalent") from None
    if writable and not x.flags.writeable:
        raise errors.InvalidValueError(f"{name}: the array is read-only, but it is an output")
    item = x.itemsize
    strides = []
    for d, s in enumerate(x.strides):
        if s % item:
            raise errors.StrideError(
                f"{name}: stride {s} B of dim {d} is not a multiple of the element size {item}")
        strides.append(s // item)
    return _fill(MlaTensor(), name, x.ctypes.data, dt, DEVICE_CPU, 0, x.shape, strides)


def _from_torch(x, name: str) -> MlaTensor:
    try:
        dt = dtype_name(x)
    except errors.DTypeError:
        raise errors.DTypeError(f"{name}: dtype {x.dtype} has no mla equivalent") from None
    dev = x.device
    if dev.type == "cpu":
        dev_type, dev_id = DEVICE_CPU, 0
    elif dev.type == "cuda":
        dev_type, dev_id = DEVICE_CUDA, dev.index or 0
    else:
        raise errors.DeviceError(f"{name}: device {dev} is neither CPU nor CUDA")
    return _fill(MlaTensor(), name, x.data_ptr(), dt, dev_type, dev_id, tuple(x.shape),
                 x.stride())


def _from_capsule(capsule, name: str, writable: bool) -> MlaTensor:
    if _capsule_is_valid(capsule, b"dltensor_versioned"):
        m = DLManagedTensorVersioned.from_address(
            _capsule_get_pointer(capsule, b"dltensor_versioned"))
        if m.version.major > 1:
            raise errors.UnsupportedError(
                f"{name}: DLPack version {m.version.major}.{m.version.minor} is newer than 1.x")
        if writable and m.flags & DLPACK_FLAG_READ_ONLY:
            raise errors.InvalidValueError(f"{name}: the array is read-only, but it is an output")
        if writable and m.flags & DLPACK_FLAG_IS_COPIED:
            raise errors.InvalidValueError(
                f"{name}: DLPack gave a copy, so results written to it would be lost")
        dl = m.dl_tensor
    elif _capsule_is_valid(capsule, b"dltensor"):
        dl = DLManagedTensor.from_address(_capsule_get_pointer(capsule, b"dltensor")).dl_tensor
    else:
        raise errors.InvalidValueError(f"{name}: __dlpack__ did not return a DLPack capsule")
    code, bits, lanes = dl.dtype.code, dl.dtype.bits, dl.dtype.lanes
    dt = _DL_DTYPES.get((code, bits))
    if dt is None or lanes != 1:
        raise errors.DTypeError(
            f"{name}: DLPack dtype (code {code}, bits {bits}, lanes {lanes}) has no mla equivalent")
    dtype_bytes = DTYPE_SIZES[dt]
    ndim = dl.ndim
    shape = [dl.shape[d] for d in range(ndim)]
    strides = [dl.strides[d] for d in range(ndim)] if dl.strides else _contiguous_strides(shape)
    dev = dl.device.device_type
    if dev in (_KDL_CPU, _KDL_CUDA_HOST):
        dev_type, dev_id = DEVICE_CPU, 0
    elif dev in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        dev_type, dev_id = DEVICE_CUDA, dl.device.device_id
    else:
        raise errors.DeviceError(f"{name}: DLPack device type {dev} is neither CPU nor CUDA")
    if dl.byte_offset % dtype_bytes:
        raise errors.AlignmentError(f"{name}: DLPack byte_offset {dl.byte_offset} is not a "
                                    f"multiple of the element size {dtype_bytes}")
    data = (dl.data or 0) + dl.byte_offset
    return _fill(MlaTensor(), name, data, dt, dev_type, dev_id, shape, strides)


def _dlpack_capsule(x, stream):
    """Calls x.__dlpack__, asking for the versioned layout when the producer knows it."""
    kwargs = {}
    if stream is not None:
        kwargs["stream"] = stream
    try:
        return x.__dlpack__(max_version=(1, 0), **kwargs)
    except TypeError:  # a producer older than DLPack 1.0 (no max_version keyword)
        return x.__dlpack__(**kwargs)


def as_tensor(x, name: str, keepalive: list, *, writable: bool = False,
              dlpack_stream: int | None = None):
    """``ctypes.byref(mla_tensor)`` for x, or None (a NULL pointer) when x is None.

    keepalive collects objects (DLPack capsules) that must outlive the C call.
    dlpack_stream is the consumer stream handed to a CUDA producer's __dlpack__
    (the stream the kernel will run on), so the producer orders its work first.
    """
    if x is None:
        return None
    fw = framework_of(x)
    if fw == "numpy":
        t = _from_numpy(x, name, writable)
    elif fw == "torch":
        t = _from_torch(x, name)
    elif hasattr(x, "__dlpack__"):
        stream = None
        if dlpack_stream is not None and _dlpack_device_is_cuda(x):
            # DLPack: 1 is CUDA's legacy default stream; 0 is not allowed.
            stream = dlpack_stream if dlpack_stream not in (0, None) else 1
        capsule = _dlpack_capsule(x, stream)
        keepalive.append(capsule)
        t = _from_capsule(capsule, name, writable)
    elif hasattr(x, "__array_interface__"):
        import numpy as np  # an array-like that NumPy can view without a copy

        t = _from_numpy(np.asarray(x), name, writable)
        keepalive.append(x)
    else:
        raise errors.DTypeError(
            f"{name}: {type(x).__name__} is not an array (no __dlpack__ or __array_interface__)")
    keepalive.append(t)
    return ctypes.byref(t)


def _dlpack_device_is_cuda(x) -> bool:
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None:
        return False
    return int(dev()[0]) in (_KDL_CUDA, _KDL_CUDA_MANAGED)


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
        if int(kind) in (_KDL_CUDA, _KDL_CUDA_MANAGED):
            return ("cuda", int(idx))
        return ("cpu", 0)
    return ("cpu", 0)
