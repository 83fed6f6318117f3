"""Exceptions raised by mla: one class per C++ ``mla::Errc``.

Each class also derives from the built-in exception a Python caller would
expect for that kind of mistake (a wrong shape is a ``ValueError``, a wrong
dtype a ``TypeError``, an index past the end an ``IndexError``), so generic
``except ValueError`` code keeps working. The message is the C++ library's,
verbatim: it names the argument and the bad value.
"""

from __future__ import annotations


class MlaError(Exception):
    """Base of every mla error. ``code`` is the C status (the ``mla::Errc`` value)."""

    code: int = -1
    code_name: str = "unknown"


class ShapeError(MlaError, ValueError):
    code, code_name = 1, "invalid_shape"


class DTypeError(MlaError, TypeError):
    code, code_name = 2, "invalid_dtype"


class StrideError(MlaError, ValueError):
    code, code_name = 3, "invalid_stride"


class DeviceError(MlaError, ValueError):
    code, code_name = 4, "invalid_device"


class OutOfRangeError(MlaError, IndexError):
    code, code_name = 5, "out_of_range"


class AlignmentError(MlaError, ValueError):
    code, code_name = 6, "misaligned"


class InvalidValueError(MlaError, ValueError):
    code, code_name = 7, "invalid_value"


class UnsupportedError(MlaError, NotImplementedError):
    code, code_name = 8, "unsupported"


class WorkspaceError(MlaError, ValueError):
    code, code_name = 9, "insufficient_workspace"


class CudaError(MlaError, RuntimeError):
    code, code_name = 10, "cuda_error"


class InternalError(MlaError, RuntimeError):
    """A C++ exception was caught at the C ABI boundary (e.g. out of host memory)."""

    code, code_name = 100, "internal"


class LibraryNotFoundError(MlaError, ImportError):
    """libmla.so could not be found or loaded (see mla._lib for the search order)."""


BY_CODE: dict[int, type[MlaError]] = {
    cls.code: cls
    for cls in (
        ShapeError,
        DTypeError,
        StrideError,
        DeviceError,
        OutOfRangeError,
        AlignmentError,
        InvalidValueError,
        UnsupportedError,
        WorkspaceError,
        CudaError,
        InternalError,
    )
}


def error_for(code: int, message: str) -> MlaError:
    """The exception for a C status code (an unknown code gives a plain MlaError)."""
    cls = BY_CODE.get(code)
    if cls is None:
        err = MlaError(f"status {code}: {message}")
        err.code = code
        return err
    return cls(message)
