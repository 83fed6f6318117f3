"""Block-sparse selection (mla/block_sparse.hpp) against an independent NumPy version."""

import numpy as np
import pytest

import mla

from conftest import cache_keys, make_paged_problem


def numpy_block_sparse(q, keys, n, p):
    """Positions one query attends (block_sparse.hpp steps 1-5), written with NumPy:
    q [h, 576] f64, keys [>= n, 576] f64 of the request, n visible keys."""
    if n <= 0:
        return np.zeros(0, np.int64)
    # 1. compressed keys: means of the complete blocks [j*stride, j*stride + block_size)
    starts = np.arange(0, n - p.block_size + 1, p.stride) if n >= p.block_size else \
        np.zeros(0, np.int64)
    csum = np.concatenate([np.zeros((1, 576)), np.cumsum(keys[:n], axis=0)])
    comp = (csum[starts + p.block_size] - csum[starts]) / p.block_size
    # 2. scores: max over heads of the raw dot product
    c = (q @ comp.T).max(axis=0) if len(starts) else np.zeros(0)
    # 3. selection block scores: max over overlapping compressed blocks; NaN = no score
    nJ = -(-n // p.selected_block_size)
    J_lo = np.arange(nJ) * p.selected_block_size
    J_hi = J_lo + p.selected_block_size
    overlap = (starts[None, :] < J_hi[:, None]) & (starts[None, :] + p.block_size > J_lo[:, None])
    S = np.where(overlap, c[None, :], -np.inf).max(axis=1, initial=-np.inf)
    scored = overlap.any(axis=1)
    # 4. forced blocks, then the best scores (ties to the lower block) up to the count
    forced = (np.arange(nJ) < p.initial_blocks) | (np.arange(nJ) >= nJ - p.local_blocks)
    free = np.flatnonzero(~forced & scored)
    free = free[np.lexsort((free, -S[free]))]  # score descending, block ascending
    room = max(p.num_selected_blocks - int(forced.sum()), 0)
    chosen = np.concatenate([np.flatnonzero(forced), free[:room]])
    # 5. union with the sliding window, ascending
    take = np.zeros(n, bool)
    for J in chosen:
        take[J * p.selected_block_size:(J + 1) * p.selected_block_size] = True
    take[max(0, n - p.sliding_window):] = True
    return np.flatnonzero(take)


SMALL = mla.BlockSparseParams(block_size=8, stride=4, selected_block_size=16,
                              num_selected_blocks=4, initial_blocks=1, local_blocks=1,
                              sliding_window=8)


@pytest.mark.parametrize("fmt", ["bf16", "fp8_ds_mla"])
def test_select_matches_numpy(rng, fmt):
    # Lengths: empty, shorter than a compressed block, not a multiple of the page or the
    # selection block, and long enough that only some blocks are chosen.
    lengths = [0, 5, 37, 150]
    B, s_q, h, page = len(lengths), 2, 16, 16
    q, cache, bt, sl = make_paged_problem(rng, B, s_q, h, page, lengths, fmt)
    C = mla.block_sparse_capacity(SMALL)
    indices = np.full((B, s_q, C), 7777, np.int32)  # poison
    num = np.full((B, s_q), 7777, np.int32)
    got, got_n = mla.block_sparse_select(q, cache, bt, sl, SMALL, indices=indices,
                                         num_selected=num)
    assert got is indices and got_n is num
    for b, L in enumerate(lengths):
        keys = cache_keys(cache, fmt, bt[b], L) if L else np.zeros((0, 576))
        for i in range(s_q):
            n = max(L - (s_q - 1 - i), 0)
            pos = numpy_block_sparse(q[b, i].astype(np.float64), keys, n, SMALL)
            want = np.full(C, -1, np.int32)
            want[:len(pos)] = bt[b, pos // page] * page + pos % page
            assert np.array_equal(got[b, i], want), (b, i)
            assert got_n[b, i] == len(pos)
    # Long requests really are sparse (the test would pass trivially otherwise).
    assert got_n[3, 1] < 150


def test_capacity_presets_and_defaults():
    # num_selected_blocks * selected_block_size + sliding_window, rounded up to 64.
    assert mla.block_sparse_capacity(SMALL) == 128  # 4 * 16 + 8 = 72 -> 128
    assert mla.block_sparse_capacity() == 16 * 64 + 512  # NSA: 1536, a multiple of 64
    assert mla.BlockSparseParams.default() == mla.BlockSparseParams()
    presets = mla.block_sparse_presets()
    assert {"nsa", "h100", "h200", "b200"} <= set(presets)
    params, source = presets["nsa"]
    assert params == mla.BlockSparseParams() and "NSA" in source
    assert mla.block_sparse_preset("h200") == presets["h200"][0]
    with pytest.raises(mla.InvalidValueError, match="unknown block-sparse preset 'a100'.*h200"):
        mla.block_sparse_preset("a100")


def test_bad_params_and_arguments(rng):
    with pytest.raises(mla.InvalidValueError, match="stride = 40 is past block_size = 32"):
        mla.validate_block_sparse_params(mla.BlockSparseParams(stride=40))
    with pytest.raises(mla.InvalidValueError, match="initial_blocks \\+ local_blocks = 10 \\+ 10"):
        mla.block_sparse_capacity({"initial_blocks": 10, "local_blocks": 10})
    with pytest.raises(mla.InvalidValueError, match="unknown field"):
        mla.block_sparse_capacity({"blocks": 3})
    q, cache, bt, sl = make_paged_problem(rng, 1, 1, 16, 16, [40])
    with pytest.raises(mla.ShapeError, match="indices: C = 64 .* below block_sparse_capacity"):
        mla.block_sparse_select(q, cache, bt, sl, SMALL, indices=np.zeros((1, 1, 64), np.int32))
    with pytest.raises(mla.ShapeError, match="q"):
        mla.block_sparse_select(q[..., :512], cache, bt, sl, SMALL)
    with pytest.raises(mla.DTypeError, match="block_table"):
        mla.block_sparse_select(q, cache, bt.astype(np.int64), sl, SMALL)
    bad = bt.copy()
    bad[0, 1] = cache.shape[0] + 5
    with pytest.raises(mla.OutOfRangeError, match="block_table"):
        mla.block_sparse_select(q, cache, bad, sl, SMALL)


def test_selection_feeds_sparse_decode(rng):
    # The lists are global slots sparse_decode accepts; with a window covering every key
    # the sparse result is the dense one.
    q, cache, bt, sl = make_paged_problem(rng, 2, 1, 16, 16, [30, 45])
    p = mla.BlockSparseParams(block_size=8, stride=8, selected_block_size=16,
                              num_selected_blocks=2, initial_blocks=1, local_blocks=1,
                              sliding_window=64)
    idx, num = mla.block_sparse_select(q, cache, bt, sl, p)
    assert list(num[:, 0]) == [30, 45]
    out, lse = mla.sparse_decode(q, cache, idx, 0.1)
    d_out, d_lse = mla.mla_decode(q, cache, bt, sl, 0.1)
    np.testing.assert_allclose(out, d_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lse, d_lse, rtol=1e-6, atol=1e-6)
