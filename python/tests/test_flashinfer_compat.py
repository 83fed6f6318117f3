"""FlashInfer's MLA wrapper shape (plan/run, split q and caches, CSR pages) against
mla's native decode on the same data."""

import math

import numpy as np
import pytest

import mla
from mla.flashinfer_compat import BatchMLAPagedAttentionWrapper

from conftest import BF16, make_paged_problem

SCALE = 0.135234


def csr(block_table, lengths, page):
    """FlashInfer's page table for the same pages: indptr [B + 1], indices, kv_len [B]."""
    pages = [-(-int(L) // page) for L in lengths]
    indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    indices = np.concatenate([block_table[b, :n] for b, n in enumerate(pages)] +
                             [np.zeros(0, np.int32)]).astype(np.int32)
    return indptr, indices, np.asarray(lengths, np.int32)


@pytest.mark.parametrize("page,s_q,causal", [(1, 1, False), (16, 2, True), (64, 1, True)])
def test_run_matches_native_decode(rng, page, s_q, causal):
    B, h = 3, 16
    lengths = [33, 1, 70]
    q, cache, bt, sl = make_paged_problem(rng, B, s_q, h, page, lengths, q_dtype=BF16)
    buf = cache[:, :, 0, :]  # [pages, page, 576]: ckv and kpe are views of one buffer
    ckv, kpe = buf[..., :512], buf[..., 512:]
    qf = q.reshape(B * s_q, h, 576)
    q_nope, q_pe = qf[..., :512].copy(), qf[..., 512:].copy()  # separate tensors
    indptr, indices, kv_len = csr(bt, lengths, page)
    w = BatchMLAPagedAttentionWrapper(np.zeros(1 << 20, np.uint8))
    w.plan(np.arange(0, (B + 1) * s_q, s_q, dtype=np.int32), indptr, indices, kv_len, h, 512,
           64, page, causal, SCALE, BF16, BF16)
    out, lse2 = w.run(q_nope, q_pe, ckv, kpe, return_lse=True)
    n_out, n_lse = mla.mla_decode(q, cache, bt, sl, SCALE, causal)
    assert out.shape == (B * s_q, h, 512) and lse2.shape == (B * s_q, h)
    assert np.array_equal(out.view(np.uint16), n_out.reshape(B * s_q, h, 512).view(np.uint16))
    want = n_lse.transpose(0, 2, 1).reshape(B * s_q, h)
    np.testing.assert_allclose(lse2 * math.log(2.0), want, rtol=1e-6)  # base 2 by default
    # q as views of one buffer (no join), natural-log lse, caller's out.
    out2 = np.empty_like(out)
    got, lse_e = w.run(qf[..., :512], qf[..., 512:], ckv, kpe, out=out2, return_lse=True,
                       return_lse_base_on_e=True)
    assert got is out2 and np.array_equal(out2.view(np.uint16), out.view(np.uint16))
    assert np.array_equal(lse_e, want)


def test_separate_cache_allocations_are_refused(rng):
    q, cache, bt, sl = make_paged_problem(rng, 1, 1, 16, 16, [20])
    buf = cache[:, :, 0, :]
    indptr, indices, kv_len = csr(bt, [20], 16)
    w = BatchMLAPagedAttentionWrapper()
    w.plan(np.array([0, 1], np.int32), indptr, indices, kv_len, 16, 512, 64, 16, True, SCALE)
    with pytest.raises(mla.InvalidValueError, match="kpe_cache must be the view"):
        w.run(q[:, 0, :, :512], q[:, 0, :, 512:], buf[..., :512].copy(), buf[..., 512:].copy())


def test_plan_checks(rng):
    w = BatchMLAPagedAttentionWrapper()
    with pytest.raises(mla.UnsupportedError, match="query tokens per request"):
        w.plan(np.array([0, 1, 3], np.int32), np.array([0, 1, 2], np.int32),
               np.array([0, 1], np.int32), np.array([5, 5], np.int32), 16, 512, 64, 16, True, 1.0)
    with pytest.raises(mla.OutOfRangeError, match=r"kv_len\[0\] = 40 needs 3 pages"):
        w.plan(np.array([0, 1], np.int32), np.array([0, 2], np.int32),
               np.array([0, 1], np.int32), np.array([40], np.int32), 16, 512, 64, 16, True, 1.0)
    with pytest.raises(mla.InvalidValueError, match="run\\(\\) before plan\\(\\)"):
        BatchMLAPagedAttentionWrapper().run(None, None, None, None)
