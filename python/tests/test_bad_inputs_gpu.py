"""The bad-input table of issue 20 on torch CUDA tensors: empty batches are no-ops,
overlapping outputs are rejected before any launch, and the non-finite rules of the
quantisers and the indexer hold in the kernels as in the CPU reference.

Skipped where torch with CUDA, a GPU or a CUDA build of libmla.so is missing (CI).
On the GPU machine:
    MLA_LIBRARY=build/libmla.so PYTHONPATH=python python -m pytest -rs \\
        python/tests/test_bad_inputs_gpu.py
"""

import numpy as np
import pytest

import mla

from conftest import make_paged_problem
from test_gpu import REASON, cuda, host

pytestmark = pytest.mark.skipif(REASON is not None, reason=f"GPU tests not run: {REASON}")

SCALE = 0.07


def torch_mod():
    import torch

    return torch


def dense_problem(rng, lengths=(20, 30), s_q=1, h=16, page=64):
    q, cache, bt, sl = make_paged_problem(rng, len(lengths), s_q, h, page, list(lengths))
    return cuda(q.astype(np.float32)).bfloat16(), cuda(cache), cuda(bt), cuda(sl)


# ---- empty batches and rows: no launch, no error -------------------------------------------------


def test_cuda_decode_empty_batch_and_empty_step(rng):
    q, cache, bt, sl = dense_problem(rng)
    out, lse = mla.mla_decode(q[:0], cache, bt[:0], sl[:0], SCALE)
    assert tuple(out.shape) == (0, 1, 16, 512) and tuple(lse.shape) == (0, 16, 1)
    assert mla.decode_workspace_size(q[:0], cache, bt[:0], sl[:0], SCALE) == 0
    out, lse = mla.mla_decode(q[:, :0], cache, bt, sl, SCALE)
    assert tuple(out.shape) == (2, 0, 16, 512)


def test_cuda_sparse_decode_empty_batch(rng):
    q, cache, _, _ = dense_problem(rng)
    torch = torch_mod()
    idx = torch.zeros((0, 1, 64), dtype=torch.int32, device="cuda")
    out, lse = mla.sparse_decode(q[:0], cache, idx, SCALE)
    assert tuple(out.shape) == (0, 1, 16, 512)


def test_cuda_topk_zero_rows_and_zero_columns():
    torch = torch_mod()
    idx = mla.topk_indices(torch.zeros((0, 128), device="cuda"), k=64)
    assert tuple(idx.shape) == (0, 64)
    # N = 0: no candidates, so every entry is -1 (the CPU reference's rule).
    idx = mla.topk_indices(torch.zeros((3, 0), device="cuda"), k=64)
    torch.cuda.synchronize()
    assert (host(idx) == -1).all()


def test_cuda_dsa_empty_batch(rng):
    q, cache, bt, sl = dense_problem(rng)
    torch = torch_mod()
    icache = cuda(mla.empty_indexer_cache(cache.shape[0]))
    q8 = torch.zeros((0, 1, 64, 128), dtype=torch.float8_e4m3fn, device="cuda")
    wf = torch.zeros((0, 1, 64), device="cuda")
    pol = mla.DsaPolicy(topk=64, path="sparse")
    assert mla.dsa_decode_workspace_size(q[:0], cache, bt[:0], sl[:0], 1 << 20, q8, wf, icache,
                                         SCALE, policy=pol) == 0
    out, _ = mla.dsa_decode(q[:0], cache, bt[:0], sl[:0], 1 << 20, q8, wf, icache, SCALE,
                            policy=pol)
    assert tuple(out.shape) == (0, 1, 16, 512)


def test_cuda_empty_cache_and_indexer_ops(rng):
    torch = torch_mod()
    _, cache, _, _ = dense_problem(rng)
    mla.append_kv(torch.zeros((0, 512), device="cuda"), torch.zeros((0, 64), device="cuda"),
                  torch.zeros(0, dtype=torch.int64, device="cuda"), cache)
    q8, wf = mla.quantize_indexer_query(torch.zeros((0, 64, 128), device="cuda"),
                                        torch.zeros((0, 64), device="cuda"))
    assert tuple(q8.shape) == (0, 64, 128)
    torch.cuda.synchronize()


# ---- overlapping outputs: rejected before the launch ----------------------------------------------


def test_cuda_out_aliasing_the_cache_is_rejected(rng):
    q, cache, bt, sl = dense_problem(rng)
    out = cache.view(-1)[:2 * 16 * 512].view(2, 1, 16, 512)
    with pytest.raises(mla.InvalidValueError, match="overlaps input kv"):
        mla.mla_decode(q, cache, bt, sl, SCALE, out=out)


def test_cuda_stride_zero_out_is_rejected(rng):
    q, cache, bt, sl = dense_problem(rng)
    torch = torch_mod()
    out = torch.zeros((2, 1, 1, 512), dtype=torch.bfloat16, device="cuda").expand(2, 1, 16, 512)
    with pytest.raises(mla.StrideError, match="out"):
        mla.mla_decode(q, cache, bt, sl, SCALE, out=out)


# ---- non-finite values: the kernels follow the reference's rules ------------------------------


def test_cuda_fp8_cache_inf_and_nan_bytes_match_the_reference(rng):
    torch = torch_mod()
    c_kv = rng.uniform(-0.1, 0.1, (4, 512)).astype(np.float32)
    c_kv[0, 5], c_kv[1, 130], c_kv[2, 300] = np.inf, np.nan, -np.inf
    k_rope = rng.uniform(-1, 1, (4, 64)).astype(np.float32)
    slots = np.arange(4, dtype=np.int64)
    ref = mla.empty_kv_cache(1, 16, "fp8_ds_mla")
    ref[:] = 0
    mla.append_kv(c_kv, k_rope, slots, ref)
    dev = torch.zeros(ref.shape, dtype=torch.uint8, device="cuda")
    mla.append_kv(cuda(c_kv), cuda(k_rope), cuda(slots), dev, "fp8_ds_mla")
    torch.cuda.synchronize()
    assert np.array_equal(host(dev)[0, :4], ref[0, :4])


def test_cuda_nan_indexer_key_is_never_selected():
    torch = torch_mod()
    keys = np.tile(np.arange(64, dtype=np.float32)[:, None] * 0.01, (1, 128))
    keys[3] = 1.0
    keys[3, 7] = np.nan
    ref = mla.empty_indexer_cache(1)
    ref[:] = 0
    mla.append_indexer_keys(keys, np.arange(64, dtype=np.int64), ref)
    dev = torch.zeros(ref.shape, dtype=torch.uint8, device="cuda")
    mla.append_indexer_keys(cuda(keys), cuda(np.arange(64, dtype=np.int64)), dev)
    torch.cuda.synchronize()
    assert np.array_equal(host(dev), ref), "indexer cache bytes (codes and NaN scale) differ"
    q8, wf = mla.quantize_indexer_query(torch.ones((1, 1, 64, 128), device="cuda"),
                                        torch.ones((1, 1, 64), device="cuda"))
    logits = mla.indexer_logits_decode(q8, wf, dev, cuda(np.zeros((1, 1), np.int32)),
                                       cuda(np.array([64], np.int32)), max_len=64)
    idx = mla.topk_indices(logits.reshape(1, 64), k=64)
    torch.cuda.synchronize()
    assert np.isnan(host(logits)[0, 0, 3])
    assert 3 not in host(idx)[0]


# ---- guards: device values the host cannot check ----------------------------------------------


def test_cuda_indexer_length_past_the_block_table_reads_nothing_outside_it():
    # Request 0 has cache_seqlens = 1000 but its block table row holds one page (64
    # tokens): the keys past it do not exist. Reading on past the row would find
    # request 1's page id (valid), so an unguarded kernel scores keys 64..127 of
    # request 0 with request 1's keys. They must be -inf (never selected).
    torch = torch_mod()
    icache = cuda(mla.empty_indexer_cache(2))
    mla.append_indexer_keys(torch.ones((128, 128), device="cuda"),
                            torch.arange(128, dtype=torch.int64, device="cuda"), icache)
    q8, wf = mla.quantize_indexer_query(torch.ones((2, 1, 64, 128), device="cuda"),
                                        torch.ones((2, 1, 64), device="cuda"))
    bt = torch.tensor([[0], [1]], dtype=torch.int32, device="cuda")
    sl = torch.tensor([1000, 10], dtype=torch.int32, device="cuda")
    logits = mla.indexer_logits_decode(q8, wf, icache, bt, sl, max_len=1024)
    torch.cuda.synchronize()
    got = host(logits)[0, 0]
    assert np.isfinite(got[:64]).all()
    assert (got[64:] == -np.inf).all(), "keys past the block table's capacity were scored"


def test_cuda_topk_length_past_the_block_table_translates_nothing_outside_it():
    # Row 0 has length 200 but its block table row holds one page of 64: positions
    # 64..199 have no slot. Reading on past the row finds row 1's page (1), so an
    # unguarded kernel returns slots 64..127 of page 1. Contract (CUDA cannot report
    # it): such positions are not candidates; the CPU reference rejects the input.
    torch = torch_mod()
    logits = torch.arange(512, dtype=torch.float32, device="cuda").reshape(2, 256)
    lengths = torch.tensor([200, 10], dtype=torch.int32, device="cuda")
    bt = torch.tensor([[0], [1]], dtype=torch.int32, device="cuda")
    idx = mla.topk_indices(logits, k=64, lengths=lengths, block_table=bt, page_size=64,
                           num_pages=2)
    torch.cuda.synchronize()
    row = host(idx)[0]
    assert ((row == -1) | ((row >= 0) & (row < 64))).all(), row


# ---- the checked mode: device values checked on the host before the launch ----------------


# issue 20's GPU repros for dense decode: (the tensor, the entry of request 0 it breaks, the
# value, the checked mode's error). Lengths (20, 30), pages of 64: block_table [2, 1], 5 pages.
BAD_DENSE = {
    "page past the pool": ("block_table", (0, 0), 1000,
                           r"block_table\[0\]\[0\] = 1000 is past num_pages"),
    "page 2^31 - 1": ("block_table", (0, 0), 2**31 - 1,
                      r"block_table\[0\]\[0\] = 2147483647 is past num_pages"),
    "page -5": ("block_table", (0, 0), -5, r"block_table\[0\]\[0\] = -5 is negative"),
    "length past the block table": ("cache_seqlens", 0, 65,
                                    r"cache_seqlens\[0\] = 65 is past the capacity"),
    "negative length": ("cache_seqlens", 0, -3, r"cache_seqlens\[0\] = -3 is negative"),
}


@pytest.mark.parametrize("what", sorted(BAD_DENSE))
def test_cuda_decode_bad_device_values_nan_rows_or_checked_error(rng, what):
    tensor, at, value, message = BAD_DENSE[what]
    q, cache, bt, sl = dense_problem(rng)
    bt, sl = bt.clone(), sl.clone()
    {"block_table": bt, "cache_seqlens": sl}[tensor][at] = value
    out, lse = mla.mla_decode(q, cache, bt, sl, SCALE)  # unchecked: the documented guard
    torch = torch_mod()
    torch.cuda.synchronize()
    o, l = host(out).astype(np.float32), host(lse)
    assert np.isnan(o[0]).all() and np.isnan(l[0]).all(), "request 0 is not NaN"
    assert np.isfinite(o[1]).all() and np.isfinite(l[1]).all(), "request 1 was disturbed"
    with mla.checked_device_values():
        with pytest.raises(mla.OutOfRangeError, match=message):
            mla.mla_decode(q, cache, bt, sl, SCALE)


def _bad_index_is_none(run, idx, bad, message):
    """run(indices) with out-of-range entries in `bad` gives finite out and lse, those of
    `idx` (-1 there); the checked mode names the first bad entry instead."""
    idx, bad = cuda(idx), cuda(bad)
    got, want = run(bad), run(idx)
    go, wo = host(got[0]).astype(np.float32), host(want[0]).astype(np.float32)
    gl, wl = host(got[1]), host(want[1])
    assert np.isfinite(go).all() and np.isfinite(gl).all()
    np.testing.assert_allclose(go, wo, rtol=0, atol=1e-2)  # bf16 outputs of size ~1
    np.testing.assert_allclose(gl, wl, rtol=0, atol=1e-4)
    with mla.checked_device_values():
        with pytest.raises(mla.OutOfRangeError, match=message):
            run(bad)


def test_cuda_sparse_decode_bad_index_is_none(rng):
    q, cache, _, _ = dense_problem(rng, lengths=(100, 120))
    slots = cache.shape[0] * cache.shape[1]
    idx = rng.integers(0, slots, (2, 1, 64)).astype(np.int32)
    idx[:, :, 40:] = -1
    bad = idx.copy()
    bad[0, 0, 40], bad[0, 0, 41], bad[1, 0, 42] = 10**6, -5, 2**31 - 1
    _bad_index_is_none(lambda i: mla.sparse_decode(q, cache, i, SCALE), idx, bad,
                       r"indices\[0\]\[0\]\[40\] = 1000000")


def test_cuda_sparse_prefill_bad_index_is_none(rng):
    s_q, h, s_kv, topk = 4, 64, 256, 64
    q = cuda(rng.standard_normal((s_q, h, 576)).astype(np.float32)).bfloat16()
    kv = cuda(rng.standard_normal((s_kv, 576)).astype(np.float32)).bfloat16()
    idx = np.stack([rng.permutation(s_kv)[:topk] for _ in range(s_q)]).astype(np.int32)
    idx[:, 48:] = -1
    bad = idx.copy()
    bad[0, 48], bad[1, 49], bad[3, 50] = 10**6, -5, s_kv
    _bad_index_is_none(lambda i: mla.sparse_prefill(q, kv, i, SCALE), idx, bad,
                       r"indices\[0\]\[48\] = 1000000 is past")


def test_cuda_checked_mode_names_bad_slots_and_indices(rng):
    torch = torch_mod()
    q, cache, bt, sl = dense_problem(rng)
    slots = torch.tensor([0, 10**6], dtype=torch.int64, device="cuda")
    c_kv, k_rope = torch.zeros((2, 512), device="cuda"), torch.zeros((2, 64), device="cuda")
    mla.append_kv(c_kv, k_rope, slots, cache)  # unchecked: the bad slot is skipped
    idx = torch.full((2, 1, 64), -1, dtype=torch.int32, device="cuda")
    idx[1, 0, 5] = 10**6
    with mla.checked_device_values():
        with pytest.raises(mla.OutOfRangeError, match=r"slots\[1\] = 1000000"):
            mla.append_kv(c_kv, k_rope, slots, cache)
        with pytest.raises(mla.OutOfRangeError, match=r"indices\[1\]\[0\]\[5\] = 1000000"):
            mla.sparse_decode(q, cache, idx, SCALE)
