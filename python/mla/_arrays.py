"""Outputs and streams in the caller's framework.

Outputs are allocated with the framework of a reference input, on its device
(torch.empty for torch tensors, numpy.empty for NumPy and other CPU arrays,
cupy.empty for CuPy); workspace likewise. Frameworks are imported only when an
array of theirs is seen.
"""

from __future__ import annotations

import contextlib

from . import errors
from ._dlpack import device_of, framework_of

_NUMPY_NAMES = {"f32": "float32", "f64": "float64", "f16": "float16", "u8": "uint8",
                "i32": "int32", "i64": "int64"}


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
    import torch

    return {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16,
            "f16": torch.float16, "e4m3": torch.float8_e4m3fn, "u8": torch.uint8,
            "i32": torch.int32, "i64": torch.int64}[dtype]


def empty(like, shape, dtype: str):
    """An uninitialised array of `shape` and our dtype name, beside `like`."""
    fw = framework_of(like)
    dev, dev_id = device_of(like)
    shape = tuple(int(s) for s in shape)
    if fw == "torch":
        import torch

        return torch.empty(shape, dtype=torch_dtype(dtype), device=like.device)
    if dev == "cpu":
        import numpy as np

        return np.empty(shape, dtype=numpy_dtype(dtype))
    if fw == "cupy" or fw != "torch":
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
        import torch
    except ImportError:
        raise errors.DeviceError(
            f"cannot allocate a CUDA output beside a {type(like).__name__}: "
            "install torch or cupy, or pass the outputs") from None
    return torch.empty(shape, dtype=torch_dtype(dtype), device=f"cuda:{dev_id}")


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
        return int(stream)
    dev, dev_id = device_of(like)
    if dev != "cuda":
        return None
    fw = framework_of(like)
    if fw == "torch":
        import torch

        return torch.cuda.current_stream(like.device).cuda_stream
    if fw == "cupy":
        import cupy

        return cupy.cuda.get_current_stream().ptr
    return 0


def device_guard(like):
    """Makes `like`'s CUDA device current for the call (torch tensors)."""
    if framework_of(like) == "torch" and like.device.type == "cuda":
        import torch

        if torch.cuda.current_device() != like.device.index:
            return torch.cuda.device(like.device)
    return contextlib.nullcontext()


def nbytes(x) -> int:
    if framework_of(x) == "torch":
        return x.numel() * x.element_size()
    return int(x.nbytes)
