"""Top-k, sparse attention and non-absorbed prefill against NumPy."""

import numpy as np
import pytest

import mla

from conftest import BF16, cache_keys, make_paged_problem
from test_flash_mla_compat import sparse_reference

SCALE = 0.1


def test_topk_order_ties_padding_and_slots(rng):
    R, N, k = 4, 300, 64
    logits = rng.standard_normal((R, N)).astype(np.float32)
    logits[0, 10] = logits[0, 5] = 50.0  # a tie: the lower position first
    logits[1, :] = -np.inf
    logits[1, [3, 7]] = [1.0, 2.0]  # fewer candidates than k
    logits[2, 0] = np.nan  # never selected
    lengths = np.array([N, N, N, 100], np.int32)
    got = mla.topk_indices(logits, k, lengths=lengths)
    for r in range(R):
        cand = [p for p in range(lengths[r]) if np.isfinite(logits[r, p])]
        order = sorted(cand, key=lambda p: (-logits[r, p], p))[:k]
        want = np.full(k, -1, np.int32)
        want[:len(order)] = order
        assert np.array_equal(got[r], want), r
    bt = np.array([[5, 2, 9, 1, 0]], np.int32)
    slots = mla.topk_indices(logits[3:4], k, lengths=lengths[3:], block_table=bt, page_size=64,
                             num_pages=10)
    pos = got[3]
    assert np.array_equal(slots[0], np.where(pos >= 0, bt[0, pos // 64] * 64 + pos % 64, -1))


@pytest.mark.parametrize("fmt", ["bf16", "fp8_ds_mla"])
def test_sparse_decode(rng, fmt):
    B, s_q, h, page, topk = 2, 2, 16, 16, 64
    q, cache, bt, sl = make_paged_problem(rng, B, s_q, h, page, [40, 40], fmt)
    total = cache.shape[0] * page
    idx = rng.integers(0, total, (B, s_q, topk)).astype(np.int32)
    idx[0, 1, 5:] = -1
    idx[1, 0, :] = -1
    out, lse = mla.sparse_decode(q, cache, idx, SCALE)
    keys = cache_keys(cache, fmt, np.arange(cache.shape[0]), total)
    w_out, w_lse, _ = sparse_reference(q.reshape(B * s_q, h, 576), keys,
                                       idx.reshape(B * s_q, topk), SCALE)
    np.testing.assert_allclose(out.reshape(B * s_q, h, 512), w_out, rtol=1e-5, atol=1e-6)
    w_lse[np.isposinf(w_lse)] = -np.inf  # native convention: -inf for no key
    # lse: f32 output and the float softmax_scale (0.1 -> 0.1 + 1.5e-9) give ~1e-8 absolute.
    np.testing.assert_allclose(lse.transpose(0, 2, 1).reshape(B * s_q, h), w_lse, rtol=1e-6,
                               atol=1e-6)
    with pytest.raises(mla.OutOfRangeError, match="indices"):
        bad = idx.copy()
        bad[0, 0, 0] = total
        mla.sparse_decode(q, cache, bad, SCALE)


def test_sparse_prefill(rng):
    s_q, h, s_kv, topk = 4, 16, 50, 64
    q = rng.standard_normal((s_q, h, 576)).astype(np.float32)
    kv = rng.standard_normal((s_kv, 576)).astype(np.float32)
    idx = rng.integers(0, s_kv, (s_q, topk)).astype(np.int32)
    idx[2] = -1
    out, lse = mla.sparse_prefill(q, kv, idx, SCALE)
    w_out, w_lse, _ = sparse_reference(q, kv.astype(np.float64), idx, SCALE)
    np.testing.assert_allclose(out, w_out, rtol=1e-5, atol=1e-6)
    assert np.all(np.isneginf(lse[2]))
    np.testing.assert_allclose(np.delete(lse, 2, 0), np.delete(w_lse, 2, 0), rtol=1e-6, atol=1e-6)


def test_sparse_prefill_topk_length(rng):
    # Token i reads entries [0, topk_length[i]); the entries past it hold rows
    # that would change the answer if read. topk_length 0: out 0, lse -inf.
    s_q, h, s_kv, topk = 3, 16, 40, 64
    q = rng.standard_normal((s_q, h, 576)).astype(np.float32)
    kv = rng.standard_normal((s_kv, 576)).astype(np.float32)
    idx = rng.integers(0, s_kv, (s_q, topk)).astype(np.int32)
    tl = np.array([17, 0, 64], np.int32)
    out, lse = mla.sparse_prefill(q, kv, idx, SCALE, topk_length=tl)
    cut = idx.copy()
    for i, n in enumerate(tl):
        cut[i, n:] = -1
    w_out, w_lse, _ = sparse_reference(q, kv.astype(np.float64), cut, SCALE)
    np.testing.assert_allclose(out, w_out, rtol=1e-5, atol=1e-6)
    assert np.all(out[1] == 0) and np.all(np.isneginf(lse[1]))
    np.testing.assert_allclose(lse[[0, 2]], w_lse[[0, 2]], rtol=1e-6, atol=1e-6)
    with pytest.raises(mla.MlaError, match="topk_length"):
        mla.sparse_prefill(q, kv, idx, SCALE, topk_length=np.array([1, 2], np.int32))


def test_sparse_prefill_fp8_rows(rng):
    # fp8_ds_mla rows [s_kv, 656] (a cached fp8 prefix) read dequantised: the
    # same answer as the f32 rows read_kv gives back, bit for bit.
    s_q, h, s_kv, topk = 3, 16, 30, 40
    cache = mla.empty_kv_cache(s_kv, 1, "fp8_ds_mla")
    mla.append_kv(rng.standard_normal((s_kv, 512)).astype(np.float32),
                  rng.standard_normal((s_kv, 64)).astype(np.float32),
                  np.arange(s_kv, dtype=np.int64), cache)
    c_kv, k_rope = mla.read_kv(cache, np.arange(s_kv, dtype=np.int64))
    rows = np.ascontiguousarray(cache).reshape(s_kv, 656)
    q = rng.standard_normal((s_q, h, 576)).astype(np.float32)
    idx = rng.integers(-1, s_kv, (s_q, topk)).astype(np.int32)
    out, lse = mla.sparse_prefill(q, rows, idx, SCALE)
    w_out, w_lse = mla.sparse_prefill(q, np.concatenate([c_kv, k_rope], axis=1), idx, SCALE)
    np.testing.assert_array_equal(out, w_out)
    np.testing.assert_array_equal(lse, w_lse)


def test_sparse_prefill_chunk_over_cached_prefix(rng):
    # An engine's chunked prefill: a chunk of 5 tokens at positions 30..34 of a
    # prompt whose first 30 keys are cached. kv = prefix rows then the chunk's
    # own rows; each token's list picks among the prefix and the chunk's keys up
    # to its own position (causal), -1 padding. Equals attention over exactly
    # the selected keys, done per token.
    prefix, chunk, h, topk = 30, 5, 16, 64
    q = rng.standard_normal((chunk, h, 576)).astype(np.float32)
    kv = rng.standard_normal((prefix + chunk, 576)).astype(np.float32)
    idx = np.full((chunk, topk), -1, np.int32)
    for i in range(chunk):
        visible = prefix + i + 1
        pick = rng.choice(visible, size=min(20, visible), replace=False)
        idx[i, :len(pick)] = pick
        idx[i, len(pick)] = prefix + i  # its own key (also a duplicate when picked)
    out, lse = mla.sparse_prefill(q, kv, idx, SCALE)
    for i in range(chunk):
        sel = idx[i][idx[i] >= 0]
        k = kv[sel].astype(np.float64)
        s = SCALE * (q[i].astype(np.float64) @ k.T)
        m = s.max(axis=1, keepdims=True)
        p = np.exp(s - m)
        w_out = (p / p.sum(axis=1, keepdims=True)) @ k[:, :512]
        np.testing.assert_allclose(out[i], w_out, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(lse[i], (m[:, 0] + np.log(p.sum(axis=1))), rtol=1e-6,
                                   atol=1e-6)
        assert np.all(sel < prefix + i + 1)


def test_decompress_and_mha_prefill(rng):
    N, h, dc, dn, dv = 9, 4, 32, 8, 6
    c_kv = rng.standard_normal((N, dc))
    w_uk = rng.standard_normal((h, dn, dc))
    w_uv = rng.standard_normal((h, dv, dc))
    k_nope, v = mla.decompress_kv(c_kv, w_uk, w_uv)
    np.testing.assert_allclose(k_nope, np.einsum("hdc,nc->nhd", w_uk, c_kv), rtol=1e-12)
    np.testing.assert_allclose(v, np.einsum("hdc,nc->nhd", w_uv, c_kv), rtol=1e-12)
    # Two sequences: 3 new queries over 5 keys (bottom-right causal), 2 over 4.
    cu_q, cu_k = np.array([0, 3, 5], np.int32), np.array([0, 5, 9], np.int32)
    q = rng.standard_normal((5, h, dn))
    out, lse = mla.mha_prefill(q, k_nope, v, cu_q, cu_k, 0.3)
    for b in range(2):
        lq, lk = cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b]
        for i in range(lq):
            t, n = cu_q[b] + i, lk - lq + i + 1
            kk, vv = k_nope[cu_k[b]:cu_k[b] + n], v[cu_k[b]:cu_k[b] + n]
            # softmax_scale crosses the API as a float: 0.3 -> 0.30000001192...
            lg = float(np.float32(0.3)) * np.einsum("hd,nhd->hn", q[t], kk)
            m = lg.max(1, keepdims=True)
            p = np.exp(lg - m)
            np.testing.assert_allclose(out[t], np.einsum("hn,nhd->hd", p / p.sum(1, keepdims=True), vv),
                                       rtol=1e-10)
            np.testing.assert_allclose(lse[:, t], (m + np.log(p.sum(1, keepdims=True)))[:, 0],
                                       rtol=1e-10)
    with pytest.raises(mla.MlaError, match="cu_seqlens_q"):
        mla.mha_prefill(q, k_nope, v, np.array([0, 4, 3], np.int32), cu_k, 0.3)


def test_sparse_workspace_sizes_and_passing_one(rng):
    # The CPU reference needs no scratch; a given workspace is accepted all the same.
    q, cache, bt, sl = make_paged_problem(rng, 1, 1, 16, 16, [20])
    idx = np.arange(64, dtype=np.int32).reshape(1, 1, 64) % 20
    assert mla.sparse_decode_workspace_size(q, cache, idx, SCALE) == 0
    ws = np.zeros(256, np.uint8)
    a, _ = mla.sparse_decode(q, cache, idx, SCALE, workspace=ws)
    b, _ = mla.sparse_decode(q, cache, idx, SCALE)
    assert np.array_equal(a, b)
    qp = rng.standard_normal((2, 16, 576)).astype(np.float32)
    kv = rng.standard_normal((10, 576)).astype(np.float32)
    assert mla.sparse_prefill_workspace_size(qp, kv, np.zeros((2, 64), np.int32), SCALE) == 0
    with pytest.raises(mla.ShapeError, match="q"):
        mla.sparse_decode_workspace_size(q[0], cache, idx, SCALE)
