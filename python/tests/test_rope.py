"""RoPE: YaRN inverse frequencies from the documented formula, rotations in NumPy."""

import math

import numpy as np
import pytest

import mla


def yarn_inv_freq(c: mla.RopeConfig) -> np.ndarray:
    """mla/rope.hpp's formula, written independently."""
    j = np.arange(c.dim // 2, dtype=np.float64)
    base = c.theta ** (-2 * j / c.dim)
    if c.factor <= 1:
        return base

    def d(r):
        return c.dim * math.log(c.original_max_position / (2 * math.pi * r)) / (2 * math.log(c.theta))

    lo = max(math.floor(d(c.beta_fast)), 0)
    hi = min(math.ceil(d(c.beta_slow)), c.dim - 1)
    if hi == lo:
        hi = lo + 0.001
    s = 1 - np.clip((j - lo) / (hi - lo), 0, 1)
    return base / c.factor * (1 - s) + base * s


@pytest.mark.parametrize("factor", [1.0, 40.0])
def test_inv_freq(factor):
    c = mla.RopeConfig(factor=factor)
    np.testing.assert_allclose(mla.rope_inv_freq(c), yarn_inv_freq(c), rtol=1e-12)


def test_default_config_is_deepseek_v3():
    assert mla.RopeConfig.deepseek_v3() == mla.RopeConfig()
    assert mla.rope_attention_factor() == pytest.approx(1.0)


@pytest.mark.parametrize("layout", ["interleaved", "half_split"])
def test_apply_rope(rng, layout):
    T, H, D = 6, 3, 64
    x = rng.standard_normal((T, H, D))
    pos = rng.integers(0, 100000, T).astype(np.int64)
    got = mla.apply_rope(x, pos, layout=layout)
    f = yarn_inv_freq(mla.RopeConfig())
    ang = pos[:, None].astype(np.float64) * f[None]  # [T, D/2]
    if layout == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        a, b = x[..., :D // 2], x[..., D // 2:]
    cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]
    ra, rb = a * cos - b * sin, a * sin + b * cos
    want = np.empty_like(x)
    if layout == "interleaved":
        want[..., 0::2], want[..., 1::2] = ra, rb
    else:
        want[..., :D // 2], want[..., D // 2:] = ra, rb
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    mla.apply_rope(x, pos, layout=layout, out=x)  # in place
    np.testing.assert_allclose(x, want, rtol=1e-9, atol=1e-9)


def test_rope_errors():
    with pytest.raises(mla.InvalidValueError, match="layout"):
        mla.apply_rope(np.zeros((1, 1, 64)), np.zeros(1, np.int64), layout="spiral")
    with pytest.raises(mla.OutOfRangeError, match="positions"):
        mla.apply_rope(np.zeros((1, 1, 64)), np.array([-1], np.int64))
    with pytest.raises(mla.ShapeError, match="x"):
        mla.apply_rope(np.zeros((1, 64)), np.zeros(1, np.int64))
