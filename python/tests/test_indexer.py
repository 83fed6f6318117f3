"""Lightning indexer: quantisers and logits against an independent NumPy version."""

import numpy as np
import pytest

import mla

from conftest import E4M3


def quant_vec(v):
    """docs/design.md section 2: a = max(max|v|, 1e-4), s = 2^ceil(log2(a/448)), v8 = e4m3(clamp(v/s))."""
    a = max(float(np.abs(v).max()), 1e-4)
    s = np.float32(2.0 ** np.ceil(np.log2(a / 448.0)))
    return np.clip(v / s, -448, 448).astype(E4M3), s


def test_append_keys_page_layout(rng):
    num_pages, T = 3, 100
    cache = mla.empty_indexer_cache(num_pages)
    cache[:] = 0x5A
    keys = (rng.standard_normal((T, 128)) * 5).astype(np.float32)
    slots = rng.permutation(num_pages * 64)[:T].astype(np.int64)
    mla.append_indexer_keys(keys, slots, cache)
    for t in range(T):
        page, off = divmod(int(slots[t]), 64)
        codes, s = quant_vec(keys[t])
        assert np.array_equal(cache[page, off * 128:(off + 1) * 128], codes.view(np.uint8))
        assert cache[page, 8192 + 4 * off:8192 + 4 * off + 4].view(np.float32)[0] == s
    mla.validate_indexer_cache(cache)


def test_quantize_query_folds_the_scale(rng):
    q = rng.standard_normal((3, 64, 128)).astype(np.float32)
    w = rng.standard_normal((3, 64)).astype(np.float32)
    q8, wf = mla.quantize_indexer_query(q, w)
    assert q8.dtype == E4M3 and wf.dtype == np.float32
    for t in range(3):
        for h in range(64):
            codes, s = quant_vec(q[t, h])
            assert np.array_equal(q8[t, h].view(np.uint8), codes.view(np.uint8))
            want = np.float64(w[t, h]) * 64**-0.5 * s * 128**-0.5
            assert wf[t, h] == pytest.approx(want, rel=1e-6)


def logits_numpy(q8, wf, k8, ks):
    """I[t, s] = k_scale[s] * sum_h w'[t, h] * relu(q8[t, h] . k8[s]) in fp64."""
    dots = np.einsum("thd,sd->ths", q8.astype(np.float64), k8.astype(np.float64))
    return np.einsum("th,ths->ts", wf.astype(np.float64), np.maximum(dots, 0)) * ks[None]


def test_logits_prefill(rng):
    T, N = 5, 70
    q8, wf = mla.quantize_indexer_query(rng.standard_normal((T, 64, 128)).astype(np.float32),
                                        rng.standard_normal((T, 64)).astype(np.float32))
    k8 = (rng.standard_normal((N, 128)) * 8).astype(E4M3)
    ks = 2.0 ** rng.integers(-6, 3, N).astype(np.float32)
    k_start = np.array([0, 10, 0, 69, 5], np.int32)
    k_end = np.array([70, 30, 0, 70, 6], np.int32)
    got = mla.indexer_logits_prefill(q8, wf, k8, ks, k_start, k_end)
    want = logits_numpy(q8, wf, k8, ks.astype(np.float64))
    for t in range(T):
        inside = np.zeros(N, bool)
        inside[k_start[t]:k_end[t]] = True
        assert np.all(np.isneginf(got[t, ~inside]))
        np.testing.assert_allclose(got[t, inside], want[t, inside], rtol=1e-5, atol=1e-5)


def test_logits_decode_paged(rng):
    B, s_q, num_pages = 2, 2, 5
    cache = mla.empty_indexer_cache(num_pages)
    keys = rng.standard_normal((num_pages * 64, 128)).astype(np.float32)
    mla.append_indexer_keys(keys, np.arange(num_pages * 64, dtype=np.int64), cache)
    bt = np.array([[3, 1], [4, 0]], np.int32)
    sl = np.array([100, 1], np.int32)
    q8, wf = mla.quantize_indexer_query(
        rng.standard_normal((B, s_q, 64, 128)).astype(np.float32),
        rng.standard_normal((B, s_q, 64)).astype(np.float32))
    got = mla.indexer_logits_decode(q8, wf, cache, bt, sl)
    assert got.shape == (B, s_q, 128)
    for b in range(B):
        slots = [bt[b, p // 64] * 64 + p % 64 for p in range(128)]
        k8 = np.stack([cache[s // 64, (s % 64) * 128:(s % 64 + 1) * 128] for s in slots]).view(E4M3)
        ks = np.array([cache[s // 64, 8192 + 4 * (s % 64):8196 + 4 * (s % 64)].view(np.float32)[0]
                       for s in slots], np.float64)
        want = logits_numpy(q8[b], wf[b], k8, ks)
        for i in range(s_q):
            n = int(sl[b]) - (s_q - 1 - i)
            assert np.all(np.isneginf(got[b, i, max(n, 0):]))
            np.testing.assert_allclose(got[b, i, :max(n, 0)], want[i, :max(n, 0)], rtol=1e-5,
                                       atol=1e-5)


def test_indexer_errors():
    cache = mla.empty_indexer_cache(2)
    with pytest.raises(mla.ShapeError, match="keys"):
        mla.append_indexer_keys(np.zeros((3, 64), np.float32), np.arange(3, dtype=np.int64), cache)
    with pytest.raises(mla.OutOfRangeError, match="slots"):
        mla.append_indexer_keys(np.ones((1, 128), np.float32), np.array([128], np.int64), cache)
    with pytest.raises(mla.MlaError, match="cache"):
        mla.validate_indexer_cache(np.zeros((2, 8000), np.uint8))


@pytest.mark.parametrize("order", ["best_first", "by_position"])
def test_select_prefill_equals_logits_then_topk(rng, order):
    """mla.indexer_select_prefill on CPU arrays is indexer_logits_prefill followed by
    topk_indices, bit for bit (rows shorter than k, an empty row, a range at the end)."""
    T, N, k = 5, 200, 64
    q8, wf = mla.quantize_indexer_query(rng.standard_normal((T, 64, 128)).astype(np.float32),
                                        rng.standard_normal((T, 64)).astype(np.float32))
    k8 = (rng.standard_normal((N, 128)) * 8).astype(E4M3)
    ks = 2.0 ** rng.integers(-6, 3, N).astype(np.float32)
    k_start = np.array([0, 10, 0, 199, 50], np.int32)
    k_end = np.array([200, 40, 0, 200, 180], np.int32)
    assert mla.indexer_select_prefill_workspace_size(q8, wf, k8, ks, k_start, k_end, k) == 0
    got = mla.indexer_select_prefill(q8, wf, k8, ks, k_start, k_end, k, order=order)
    logits = mla.indexer_logits_prefill(q8, wf, k8, ks, k_start, k_end)
    want = mla.topk_indices(logits, k)
    if order == "by_position":
        want = np.sort(np.where(want < 0, N, want), axis=1)
        want = np.where(want == N, -1, want).astype(np.int32)
    assert got.dtype == np.int32 and got.shape == (T, k)
    assert np.array_equal(got, want)
    assert (got[2] == -1).all() and got[3, 0] == 199 and (got[3, 1:] == -1).all()
    with pytest.raises(mla.InvalidValueError, match="opts.path = 7"):
        mla.indexer_select_prefill(q8, wf, k8, ks, k_start, k_end, k, path=7)
