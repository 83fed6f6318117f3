"""append_kv / read_kv against independent NumPy encodings of both entry formats."""

import numpy as np
import pytest

import mla

from conftest import BF16, dequant_entry, fp8_ds_mla_entry

POISON = 0x5A


@pytest.mark.parametrize("page", [1, 16, 64])
def test_bf16_cache_bytes_and_read_back(rng, page):
    num_pages, T = 5, 3 * page + 1
    T = min(T, num_pages * page)
    cache = mla.empty_kv_cache(num_pages, page, "bf16")
    cache.view(np.uint8)[:] = POISON
    c_kv = rng.standard_normal((T, 512)).astype(np.float32) * 3
    k_rope = rng.standard_normal((T, 64)).astype(np.float32)
    slots = rng.permutation(num_pages * page)[:T].astype(np.int64)
    slots[T // 2] = -1  # skipped
    mla.append_kv(c_kv, k_rope, slots, cache)
    flat = cache.reshape(num_pages * page, 576)
    for t in range(T):
        if slots[t] < 0:
            continue
        want = np.concatenate([c_kv[t], k_rope[t]]).astype(BF16)
        assert np.array_equal(flat[slots[t]].view(np.uint16), want.view(np.uint16))
    untouched = np.setdiff1d(np.arange(num_pages * page), slots[slots >= 0])
    assert np.all(flat[untouched].view(np.uint8) == POISON)
    ok = slots[slots >= 0]
    got_c, got_r = mla.read_kv(cache, ok)
    assert got_c.dtype == np.float32 and got_c.shape == (len(ok), 512)
    keep = slots >= 0
    assert np.array_equal(got_c, c_kv[keep].astype(BF16).astype(np.float32))
    assert np.array_equal(got_r, k_rope[keep].astype(BF16).astype(np.float32))


@pytest.mark.parametrize("scale_mag", [1.0, 1e-3, 1e3])
def test_fp8_cache_bytes_match_an_independent_quantiser(rng, scale_mag):
    page, num_pages, T = 16, 3, 40
    cache = mla.empty_kv_cache(num_pages, page, "fp8_ds_mla")
    cache[:] = POISON
    c_kv = (rng.standard_normal((T, 512)) * scale_mag).astype(np.float32)
    c_kv[0, :128] = 0.0  # an all-zero group: the 1e-4 scale floor
    c_kv[1, 5] = -1e-30  # a negative value that rounds to zero: -0 (0x80)
    k_rope = rng.standard_normal((T, 64)).astype(np.float32)
    slots = np.arange(T, dtype=np.int64)[::-1].copy()
    mla.append_kv(c_kv, k_rope, slots, cache)
    flat = cache.reshape(-1, 656)
    for t in range(T):
        want = fp8_ds_mla_entry(c_kv[t], k_rope[t])
        assert np.array_equal(flat[slots[t]], want), f"token {t}"
    assert flat[slots[1]][5] == 0x80
    got_c, got_r = mla.read_kv(cache, slots)
    for t in range(T):
        d = dequant_entry(flat[slots[t]])
        assert np.array_equal(got_c[t], d[:512].astype(np.float32))
        assert np.array_equal(got_r[t], d[512:].astype(np.float32))


def test_bf16_inputs_accepted(rng):
    cache = mla.empty_kv_cache(1, 8, "bf16")
    c_kv = rng.standard_normal((8, 512)).astype(BF16)
    k_rope = rng.standard_normal((8, 64)).astype(BF16)
    mla.append_kv(c_kv, k_rope, np.arange(8, dtype=np.int64), cache)
    assert np.array_equal(cache[0, :, 0, :512], c_kv)


def test_padded_pages(rng):
    # Engines pad between pages: a view into a bigger buffer.
    base = np.zeros((4, 10, 1, 576), BF16)
    cache = base[:, :8]
    assert not cache.flags.c_contiguous
    c_kv = rng.standard_normal((32, 512)).astype(np.float32)
    k_rope = rng.standard_normal((32, 64)).astype(np.float32)
    mla.append_kv(c_kv, k_rope, np.arange(32, dtype=np.int64), cache)
    assert np.all(base[:, 8:].view(np.uint16) == 0)
    got, _ = mla.read_kv(cache, np.arange(32, dtype=np.int64))
    assert np.array_equal(got, c_kv.astype(BF16).astype(np.float32))


def test_errors_name_the_argument_and_value():
    cache = mla.empty_kv_cache(2, 4, "bf16")
    ok_c, ok_r = np.ones((2, 512), np.float32), np.ones((2, 64), np.float32)
    with pytest.raises(mla.OutOfRangeError, match=r"slots\[1\] = 8") as e:
        mla.append_kv(ok_c, ok_r, np.array([0, 8], np.int64), cache)
    assert isinstance(e.value, IndexError)
    with pytest.raises(mla.ShapeError, match="k_rope"):
        mla.append_kv(ok_c, np.ones((2, 63), np.float32), np.arange(2, dtype=np.int64), cache)
    with pytest.raises(mla.DTypeError, match="slots"):
        mla.append_kv(ok_c, ok_r, np.arange(2, dtype=np.int32), cache)
    with pytest.raises(mla.OutOfRangeError, match="slots"):
        mla.read_kv(cache, np.array([-1], np.int64))
    with pytest.raises(mla.InvalidValueError, match="kv_format"):
        mla.validate_kv_cache(cache, "fp4")
    with pytest.raises(mla.MlaError, match="cache"):
        mla.validate_kv_cache(np.zeros((2, 4, 1, 600), np.uint8))
    mla.validate_kv_cache(cache)
