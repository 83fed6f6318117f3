"""FlashMLA call shapes: same results as the native API, FlashMLA's conventions."""

import numpy as np
import pytest

import mla
from mla import flash_mla_compat as fm

from conftest import BF16, cache_keys, decode_reference, make_paged_problem

SCALE = 0.1


def test_dense_decode_matches_native_with_plus_inf_lse(rng):
    q, cache, bt, sl = make_paged_problem(rng, 3, 2, 16, 64, [70, 0, 1], q_dtype=BF16)
    sched, splits = fm.get_mla_metadata(sl, 2 * 16, 1)
    assert splits is None
    out, lse = fm.flash_mla_with_kvcache(q, cache, bt, sl, 512, sched, splits,
                                         softmax_scale=SCALE, causal=True)
    n_out, n_lse = mla.mla_decode(q, cache, bt, sl, SCALE, causal=True)
    assert out.dtype == BF16 and out.shape == (3, 2, 16, 512) and lse.shape == (3, 16, 2)
    assert np.array_equal(out.view(np.uint16), n_out.view(np.uint16))
    empty = np.isneginf(n_lse)
    assert empty[1].all() and empty[2, :, 0].all() and not empty[2, :, 1].any()
    assert np.all(np.isposinf(lse[empty]))  # FlashMLA: +inf for a query with no key
    assert np.array_equal(lse[~empty], n_lse[~empty])
    # Reuse with the same shapes is fine; a different shape is refused, as in FlashMLA.
    fm.flash_mla_with_kvcache(q, cache, bt, sl, 512, sched, None, SCALE, True)
    with pytest.raises(mla.InvalidValueError, match="tile_scheduler_metadata"):
        fm.flash_mla_with_kvcache(q[:, :1], cache, bt, sl, 512, sched, None, SCALE, True)


def test_default_scale_and_not_causal(rng):
    q, cache, bt, sl = make_paged_problem(rng, 1, 2, 16, 16, [30])
    sched, _ = fm.get_mla_metadata()
    out, _ = fm.flash_mla_with_kvcache(q, cache, bt, sl, 512, sched)
    want, _ = decode_reference(q, cache, "bf16", bt, sl, 576 ** -0.5, causal=False)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def sparse_reference(q, keys, idx, scale):
    """q [R, h, 576], keys [S, 576] f64, idx [R, topk] -> out, lse (+inf empty), max."""
    R, h, _ = q.shape
    out, lse, mx = np.zeros((R, h, 512)), np.full((R, h), np.inf), np.full((R, h), -np.inf)
    for r in range(R):
        v = [i for i in idx[r] if 0 <= i < len(keys)]
        if not v:
            continue
        k = keys[v]
        lg = scale * (q[r].astype(np.float64) @ k.T)
        m = lg.max(1, keepdims=True)
        p = np.exp(lg - m)
        out[r] = p / p.sum(1, keepdims=True) @ k[:, :512]
        lse[r], mx[r] = (m + np.log(p.sum(1, keepdims=True)))[:, 0], m[:, 0]
    return out, lse, mx


def test_sparse_prefill(rng):
    s_q, h, s_kv, topk = 5, 16, 40, 8
    q = rng.standard_normal((s_q, h, 576)).astype(BF16)
    kv = rng.standard_normal((s_kv, 1, 576)).astype(BF16)
    idx = rng.integers(0, s_kv, (s_q, 1, topk)).astype(np.int32)
    idx[0, 0, [1, 4]] = -1  # holes
    idx[1, 0, 2] = s_kv + 3  # >= s_kv: none
    idx[3, 0, :] = -1  # a query with nothing
    out, mx, lse = fm.flash_mla_sparse_fwd(q, kv, idx, SCALE)
    w_out, w_lse, w_mx = sparse_reference(q, kv[:, 0].astype(np.float64), idx[:, 0], SCALE)
    np.testing.assert_allclose(out.astype(np.float64), w_out, rtol=2**-8, atol=1e-5)
    assert np.all(np.isposinf(lse[3])) and np.all(out[3].astype(np.float32) == 0)
    np.testing.assert_allclose(lse, w_lse, rtol=1e-5)
    # max_logits comes from the framework's f32 einsum over 576 products of size ~1:
    # absolute rounding ~ sqrt(576) * 2^-24 * |terms| * scale, well under 1e-4.
    np.testing.assert_allclose(mx, w_mx, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("fmt", ["bf16", "fp8_ds_mla"])
def test_sparse_decode(rng, fmt):
    B, s_q, h, page, topk = 2, 2, 16, 16, 12
    q, cache, bt, sl = make_paged_problem(rng, B, s_q, h, page, [40, 40], fmt, q_dtype=BF16)
    total = cache.shape[0] * page
    idx = rng.integers(0, total, (B, s_q, topk)).astype(np.int32)
    idx[0, 1, 5:] = -1
    idx[1, 0, :] = -1
    sched, _ = fm.get_mla_metadata(sl, s_q * h, 1, h, fmt != "bf16", topk)
    out, lse = fm.flash_mla_with_kvcache(q, cache, None, None, 512, sched, None, SCALE,
                                         is_fp8_kvcache=fmt != "bf16", indices=idx)
    assert out.shape == (B, s_q, h, 512) and lse.shape == (B, h, s_q)
    all_keys = cache_keys(cache, fmt, np.arange(cache.shape[0]), total)
    w_out, w_lse, _ = sparse_reference(q.reshape(B * s_q, h, 576), all_keys,
                                       idx.reshape(B * s_q, topk), SCALE)
    np.testing.assert_allclose(out.astype(np.float64).reshape(B * s_q, h, 512), w_out,
                               rtol=2**-8, atol=1e-5)
    np.testing.assert_allclose(lse.transpose(0, 2, 1).reshape(B * s_q, h), w_lse, rtol=1e-5)


def test_unsupported_arguments_say_so(rng):
    q, cache, bt, sl = make_paged_problem(rng, 1, 1, 16, 16, [5])
    sched, _ = fm.get_mla_metadata()
    with pytest.raises(mla.UnsupportedError, match="attn_sink"):
        fm.flash_mla_with_kvcache(q, cache, bt, sl, 512, sched, attn_sink=np.zeros(16, np.float32))
    with pytest.raises(mla.InvalidValueError, match="head_dim_v"):
        fm.flash_mla_with_kvcache(q, cache, bt, sl, 128, sched)
