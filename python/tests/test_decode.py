"""Dense decode, split-KV partials and their merge against a NumPy softmax (fp64)."""

import numpy as np
import pytest

import mla

from conftest import BF16, decode_reference, make_paged_problem

SCALE = 0.135234  # DeepSeek-V3.2's softmax scale (docs/design.md)


# Bounds: the CPU reference accumulates in fp64 like the NumPy one; the only
# difference is the final rounding of out (f32: ~1e-7 relative; bf16: 2^-8).
@pytest.mark.parametrize(
    "B,s_q,h,page,lengths,fmt",
    [
        (3, 1, 16, 64, [1, 130, 0], "bf16"),  # length 0, < page, not a multiple of the page
        (2, 2, 16, 16, [37, 2], "bf16"),  # causal among 2 new tokens
        (2, 4, 32, 1, [5, 3], "fp8_ds_mla"),  # page size 1; len < s_q: early rows see nothing
        (1, 3, 128, 128, [200], "fp8_ds_mla"),
    ],
)
def test_decode_matches_numpy_softmax(rng, B, s_q, h, page, lengths, fmt):
    q, cache, bt, sl = make_paged_problem(rng, B, s_q, h, page, lengths, fmt)
    want_o, want_l = decode_reference(q, cache, fmt, bt, sl, SCALE)
    out, lse = mla.mla_decode(q, cache, bt, sl, SCALE)
    assert out.shape == (B, s_q, h, 512) and out.dtype == np.float32
    assert lse.shape == (B, h, s_q) and lse.dtype == np.float32
    np.testing.assert_allclose(out, want_o, rtol=1e-5, atol=1e-6)
    empty = np.isneginf(want_l)
    assert np.array_equal(np.isneginf(lse), empty)  # no key: lse -inf ...
    assert np.all(out.transpose(0, 2, 1, 3)[empty] == 0)  # ... and out 0
    np.testing.assert_allclose(lse[~empty], want_l[~empty], rtol=1e-6, atol=1e-6)


def test_decode_bf16_in_bf16_out_and_preallocated(rng):
    q, cache, bt, sl = make_paged_problem(rng, 2, 1, 16, 64, [100, 64], q_dtype=BF16)
    out = np.full((2, 1, 16, 512), np.nan, BF16)  # poisoned
    lse = np.full((2, 16, 1), np.nan, np.float32)
    r_out, r_lse = mla.mla_decode(q, cache, bt, sl, SCALE, out=out, lse=lse)
    assert r_out is out and r_lse is lse
    want_o, want_l = decode_reference(q.astype(np.float64), cache, "bf16", bt, sl, SCALE)
    np.testing.assert_allclose(out.astype(np.float64), want_o, rtol=2**-8, atol=1e-6)
    np.testing.assert_allclose(lse, want_l, rtol=1e-6)


def test_non_causal(rng):
    q, cache, bt, sl = make_paged_problem(rng, 2, 2, 16, 16, [20, 33])
    want_o, _ = decode_reference(q, cache, "bf16", bt, sl, SCALE, causal=False)
    out, _ = mla.mla_decode(q, cache, bt, sl, SCALE, causal=False)
    np.testing.assert_allclose(out, want_o, rtol=1e-5, atol=1e-6)


def test_workspace_size_is_zero_on_cpu(rng):
    q, cache, bt, sl = make_paged_problem(rng, 1, 1, 16, 64, [10])
    assert mla.decode_workspace_size(q, cache, bt, sl, SCALE) == 0


def test_partials_merge_to_the_full_decode(rng):
    B, s_q, h = 3, 2, 16
    q, cache, bt, sl = make_paged_problem(rng, B, s_q, h, 16, [50, 17, 1])
    cut = np.array([20, 17, 0], np.int32)
    zero = np.zeros(B, np.int32)
    o1, l1 = mla.mla_decode_partial(q, cache, bt, sl, zero, cut, SCALE)
    o2, l2 = mla.mla_decode_partial(q, cache, bt, sl, cut, sl, SCALE)
    want1, wl1 = decode_reference(q, cache, "bf16", bt, sl, SCALE, kv_begin=zero, kv_end=cut)
    np.testing.assert_allclose(o1, want1, rtol=1e-5, atol=1e-6)
    assert np.array_equal(np.isneginf(l1), np.isneginf(wl1))
    # Merge over rows = (b, s_q, h): partial_out [2, B, s_q, h, 512], partial_lse [2, B, s_q, h].
    po = np.stack([o1, o2])
    pl = np.stack([l1.transpose(0, 2, 1), l2.transpose(0, 2, 1)]).copy()
    out, lse = mla.merge_attn_partials(po, pl)
    full_o, full_l = mla.mla_decode(q, cache, bt, sl, SCALE)
    np.testing.assert_allclose(out, full_o, rtol=1e-5, atol=1e-6)
    fin = np.isfinite(full_l.transpose(0, 2, 1))
    np.testing.assert_allclose(lse[fin], full_l.transpose(0, 2, 1)[fin], rtol=1e-6, atol=1e-6)


def test_merge_against_numpy(rng):
    S, R, D = 4, 6, 512
    po = rng.standard_normal((S, R, D)).astype(np.float32)
    pl = rng.standard_normal((S, R)).astype(np.float32) * 3
    pl[:, 2] = -np.inf  # a row with no keys anywhere
    pl[1, 4] = -np.inf  # one empty split
    out, lse = mla.merge_attn_partials(po, pl)
    m = np.max(pl, axis=0)
    with np.errstate(invalid="ignore"):
        w = np.exp(pl.astype(np.float64) - m)
    w[:, 2] = 0
    with np.errstate(divide="ignore"):
        want_l = m + np.log(w.sum(0))
    want_o = np.einsum("sr,srd->rd", w, po) / np.where(w.sum(0) > 0, w.sum(0), 1)[:, None]
    np.testing.assert_allclose(out, want_o, rtol=1e-5, atol=1e-6)
    assert np.isneginf(lse[2]) and np.all(out[2] == 0)
    np.testing.assert_allclose(np.delete(lse, 2), np.delete(want_l, 2), rtol=1e-6)


def test_wrong_shape_names_argument_and_value(rng):
    q, cache, bt, sl = make_paged_problem(rng, 2, 1, 16, 64, [10, 20])
    with pytest.raises(mla.ShapeError) as e:
        mla.mla_decode(q[..., :512], cache, bt, sl, SCALE)
    assert "q" in str(e.value) and "512" in str(e.value) and "576" in str(e.value), str(e.value)
    assert isinstance(e.value, ValueError)
    with pytest.raises(mla.ShapeError, match="block_table"):
        mla.mla_decode(q, cache, bt[:1], sl, SCALE)


def test_value_errors(rng):
    q, cache, bt, sl = make_paged_problem(rng, 2, 1, 16, 64, [10, 20])
    with pytest.raises(mla.InvalidValueError, match="softmax_scale"):
        mla.mla_decode(q, cache, bt, sl, -1.0)
    bad = bt.copy()
    bad[1, 0] = cache.shape[0] + 5
    with pytest.raises(mla.OutOfRangeError, match=rf"block_table\[1\]\[0\] = {cache.shape[0] + 5}"):
        mla.mla_decode(q, cache, bad, sl, SCALE)
    with pytest.raises(mla.OutOfRangeError, match=r"cache_seqlens\[0\] = -3"):
        mla.mla_decode(q, cache, bt, np.array([-3, 1], np.int32), SCALE)
    with pytest.raises(mla.DTypeError, match="block_table"):
        mla.mla_decode(q, cache, bt.astype(np.int64), sl, SCALE)
    with pytest.raises(mla.StrideError, match="q"):
        mla.mla_decode(q[..., ::-1], cache, bt, sl, SCALE)
