"""Arrays in (mla._ext): NumPy directly, and the DLPack capsule path (legacy and
versioned); Python ints into C ints without wrapping."""

import numpy as np
import pytest

import mla
from mla import _call
from mla._lib import DTYPE_CODES

from conftest import BF16, E4M3


def view_of(x, writable=False):
    keep = []
    t = _call.ctypes_tensor(x, "x", writable, None, keep)
    return t, keep


class CapsuleOnly:
    """Exposes an array through DLPack alone (forces the capsule path)."""

    def __init__(self, a, versioned=True):
        self.a, self.versioned = a, versioned

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __dlpack__(self, stream=None, **kw):
        if not self.versioned:
            if kw:
                raise TypeError("legacy producer: no keywords")
            return self.a.__dlpack__()
        return self.a.__dlpack__(**kw)


def check_view(t, a):
    assert t.data == a.ctypes.data
    assert t.ndim == a.ndim
    assert list(t.shape[:a.ndim]) == list(a.shape)
    assert list(t.strides[:a.ndim]) == [s // a.itemsize for s in a.strides]
    assert t.device_type == 1


@pytest.mark.parametrize("dtype,code", [(np.float32, "f32"), (np.float64, "f64"),
                                        (np.int32, "i32"), (np.int64, "i64"),
                                        (np.uint8, "u8"), (BF16, "bf16"), (E4M3, "e4m3")])
def test_numpy_view_carries_pointer_shape_strides_dtype(dtype, code):
    a = np.zeros((4, 6, 8), dtype)[1:, ::2, 3:]  # offset, strided
    t, _ = view_of(a)
    check_view(t, a)
    assert t.dtype == DTYPE_CODES[code]


@pytest.mark.parametrize("versioned", [True, False])
def test_dlpack_capsule_matches_the_direct_view(versioned):
    a = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)[:, 1:, ::2]
    t, keep = view_of(CapsuleOnly(a, versioned))
    check_view(t, a)
    assert t.dtype == DTYPE_CODES["f32"]
    assert any(type(k).__name__ == "PyCapsule" for k in keep)


def test_dlpack_round_trip_through_an_op():
    # The same append through the capsule path writes the same bytes.
    rng = np.random.default_rng(1)
    c_kv = rng.standard_normal((5, 512)).astype(np.float32)
    k_rope = rng.standard_normal((5, 64)).astype(np.float32)
    slots = np.array([4, 0, 9, -1, 2], np.int64)
    direct, via = mla.empty_kv_cache(3, 4, "fp8_ds_mla"), mla.empty_kv_cache(3, 4, "fp8_ds_mla")
    direct[:] = 7
    via[:] = 7
    mla.append_kv(c_kv, k_rope, slots, direct)
    mla.append_kv(CapsuleOnly(c_kv), CapsuleOnly(k_rope, False), CapsuleOnly(slots), via,
                  kv_format="fp8_ds_mla")
    assert np.array_equal(direct, via)


def test_readonly_output_is_refused():
    cache = mla.empty_kv_cache(1, 4, "bf16")
    cache.setflags(write=False)
    with pytest.raises(mla.InvalidValueError, match="cache: the array is read-only"):
        mla.append_kv(np.ones((1, 512), np.float32), np.ones((1, 64), np.float32),
                      np.zeros(1, np.int64), cache)


def test_unsupported_dtype_names_the_argument():
    with pytest.raises(mla.DTypeError, match="c_kv: dtype complex64"):
        mla.append_kv(np.ones((1, 512), np.complex64), np.ones((1, 64), np.float32),
                      np.zeros(1, np.int64), mla.empty_kv_cache(1, 4))


def test_byte_strides_that_split_elements_are_refused():
    raw = np.zeros(4 * 513, np.uint8)
    odd = np.lib.stride_tricks.as_strided(raw[1:].view(np.uint8), (4, 512), (513, 1))
    odd32 = np.ndarray((2, 3), np.float32, buffer=np.zeros(40, np.uint8), strides=(14, 4))
    with pytest.raises(mla.StrideError, match="x: stride 14 B of dim 0"):
        view_of(odd32)
    t, _ = view_of(odd)  # u8 with 513-byte rows is fine
    assert t.strides[0] == 513


def test_not_an_array():
    with pytest.raises(mla.DTypeError, match="slots: str is not an array"):
        mla.read_kv(mla.empty_kv_cache(1, 4), "abc")


def test_too_many_dims():
    with pytest.raises(mla.ShapeError, match="x: ndim = 7"):
        view_of(np.zeros((1,) * 7, np.float32))


def test_framework_dtype_and_device_are_read_once_per_array():
    # The tuple the C call sees: pointer, dtype, device, shape, strides in elements.
    a = np.zeros((3, 4), np.int32)[:, 1:]
    data, dtype, dev, dev_id, shape, strides, hold = _call.ext().tensor(a, "a", False)
    assert (data, dtype, dev, dev_id) == (a.ctypes.data, DTYPE_CODES["i32"], 1, 0)
    assert shape == (3, 3) and strides == (4, 1) and hold is None


def test_big_endian_arrays_are_refused():
    with pytest.raises(mla.DTypeError, match="x: dtype >f4 is big-endian"):
        view_of(np.zeros(3, ">f4"))


@pytest.mark.parametrize("bad", [2**31, -2**31 - 1, 2**64])
def test_python_ints_that_do_not_fit_are_errors_not_wrapped(bad):
    logits, indices = np.zeros((1, 64), np.float32), np.zeros((1, 64), np.int32)
    with pytest.raises(mla.OutOfRangeError, match="k = .* does not fit in"):
        mla.topk_indices(logits, bad, indices=indices)
    with pytest.raises(mla.OutOfRangeError, match="num_pages = .* does not fit in"):
        mla.topk_indices(logits, 64, num_pages=bad * 2**33)


def test_a_float_where_an_int_belongs_is_refused():
    with pytest.raises(mla.InvalidValueError, match="k = 64.0 is not an integer"):
        mla.topk_indices(np.zeros((1, 64), np.float32), 64.0)


def test_a_non_number_scale_is_refused():
    q = np.zeros((1, 1, 16, 576), np.float32)
    with pytest.raises(mla.InvalidValueError, match="softmax_scale = 'x' is not a number"):
        mla.mla_decode(q, mla.empty_kv_cache(1, 4), np.zeros((1, 1), np.int32),
                       np.ones(1, np.int32), "x")
