"""The DSA decode step (mla.dsa_decode) on the CPU: equal to the pipeline run op by op,
dense when k >= L, the dispatch rule, the threshold, and errors."""

from pathlib import Path

import numpy as np
import pytest

import mla

from conftest import make_paged_problem

SCALE = 0.07


def indexer_side(rng, cache, block_table, seqlens, s_q):
    """An indexer cache sharing the latent block table (pages of 64), random keys in
    every slot, and quantised indexer queries [B, s_q, 64, 128]."""
    num_pages = cache.shape[0]
    icache = mla.empty_indexer_cache(num_pages)
    keys = (rng.standard_normal((num_pages * 64, 128)) * 2).astype(np.float32)
    mla.append_indexer_keys(keys, np.arange(num_pages * 64, dtype=np.int64), icache)
    B = block_table.shape[0]
    q8, wf = mla.quantize_indexer_query(
        rng.standard_normal((B, s_q, 64, 128)).astype(np.float32),
        rng.standard_normal((B, s_q, 64)).astype(np.float32))
    return icache, q8, wf


@pytest.mark.parametrize("fmt,s_q", [("bf16", 1), ("fp8_ds_mla", 2), ("bf16", 4)])
def test_step_equals_pipeline_op_by_op(rng, fmt, s_q):
    lengths, topk, max_seqlen = [300, 0, 70, 2], 64, 320
    q, cache, bt, sl = make_paged_problem(rng, 4, s_q, 16, 64, lengths, fmt)
    icache, q8, wf = indexer_side(rng, cache, bt, sl, s_q)
    pol = mla.DsaPolicy(topk=topk, dense_below=0)
    assert mla.dsa_decode_path(max_seqlen, pol) == "sparse"
    out, lse = mla.dsa_decode(q, cache, bt, sl, max_seqlen, q8, wf, icache, SCALE, policy=pol)

    logits = mla.indexer_logits_decode(q8, wf, icache, bt, sl, max_len=max_seqlen)
    idx = mla.topk_indices(logits.reshape(-1, max_seqlen), topk, lengths=np.repeat(sl, s_q),
                           block_table=bt, page_size=64, rows_per_request=s_q,
                           num_pages=cache.shape[0])
    w_out, w_lse = mla.sparse_decode(q, cache, idx.reshape(4, s_q, topk), SCALE)
    assert np.array_equal(out, w_out, equal_nan=True)
    assert np.array_equal(lse, w_lse)
    # Request 0 (300 keys, 64 chosen) is not dense attention over all of them.
    d_out, _ = mla.mla_decode(q, cache, bt, sl, SCALE)
    assert np.abs(out[0] - d_out[0]).max() > 1e-4


def test_k_at_least_length_is_dense(rng):
    lengths, topk = [64, 5, 0, 40], 64
    q, cache, bt, sl = make_paged_problem(rng, 4, 2, 16, 64, lengths)
    icache, q8, wf = indexer_side(rng, cache, bt, sl, 2)
    d_out, d_lse = mla.mla_decode(q, cache, bt, sl, SCALE)
    pol = mla.DsaPolicy(topk=topk)
    assert mla.dsa_decode_path(64, pol) == "dense"
    out, lse = mla.dsa_decode(q, cache, bt, sl, 64, q8, wf, icache, SCALE, policy=pol)
    assert np.array_equal(out, d_out) and np.array_equal(lse, d_lse)
    # Forced sparse: every visible key is selected; the same sum in another order
    # (fp64 inside, f32 outputs: equal to f32 rounding).
    pol.path = "sparse"
    out, lse = mla.dsa_decode(q, cache, bt, sl, 64, q8, wf, icache, SCALE, policy=pol)
    np.testing.assert_allclose(out, d_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(d_lse))
    fin = np.isfinite(d_lse)
    np.testing.assert_allclose(lse[fin], d_lse[fin], rtol=1e-6, atol=1e-6)


def test_threshold_and_default_policy():
    t = mla.dsa_dense_threshold("h200")
    assert t > 2048
    # The default is the crossover measured on the H200 (-1: per cache format, mla/dsa.hpp):
    # later than the roofline's.
    assert mla.dsa_default_policy().dense_below == -1
    assert mla.dsa_default_policy().topk == 2048
    assert mla.dsa_decode_path(4736) == "dense" and mla.dsa_decode_path(4737) == "sparse"
    assert mla.dsa_decode_path(3072, kv="fp8_ds_mla") == "dense"
    assert mla.dsa_decode_path(3073, kv="fp8_ds_mla") == "sparse"
    forced = mla.DsaPolicy(dense_below=t)
    assert mla.dsa_decode_path(t, forced) == "dense" and mla.dsa_decode_path(t + 1, forced) == "sparse"
    cal = Path(__file__).resolve().parents[2] / "bench/results/2026-11-29-h200-calibration.json"
    if cal.exists():  # measured fractions: sparse decode at 14% of its floor moves it up
        assert mla.dsa_dense_threshold("h200", cal.read_text()) > t
    fit = Path(__file__).resolve().parents[2] / "bench/results/2026-11-29-h200-calibration-v2.json"
    if fit.exists():  # per-call overheads: smaller batches move the crossover out
        assert (mla.dsa_dense_threshold("h200", fit.read_text(), batch=4)
                > mla.dsa_dense_threshold("h200", fit.read_text(), batch=64) > 2048)
    h100 = Path(__file__).resolve().parents[2] / "bench/results/2026-12-06-h100-calibration.json"
    if h100.exists():  # fitted from the H100 sweep: within 25% of that sweep's crossovers
        for kv, measured in (("bf16", 4160), ("fp8", 2432)):  # mla/dsa.hpp kDsaDenseBelowH100*
            assert abs(mla.dsa_dense_threshold("h100", h100.read_text(), kv=kv) - measured) < 0.25 * measured
        with pytest.raises(mla.InvalidValueError, match="h200"):
            mla.dsa_dense_threshold("h200", h100.read_text())  # a calibration names its GPU
    with pytest.raises(mla.InvalidValueError, match="opts.batch = 0"):
        mla.dsa_dense_threshold("h200", batch=0)
    assert mla.dsa_dense_threshold("h200", kv="fp8") > 2048
    with pytest.raises(mla.InvalidValueError, match="h999"):
        mla.dsa_dense_threshold("h999")
    with pytest.raises(mla.InvalidValueError, match="opts.kv"):
        mla.dsa_dense_threshold("h200", kv="fp4")


def test_errors(rng):
    q, cache, bt, sl = make_paged_problem(rng, 2, 1, 16, 64, [200, 10])
    icache, q8, wf = indexer_side(rng, cache, bt, sl, 1)
    pol = mla.DsaPolicy(topk=64, dense_below=0)
    with pytest.raises(mla.InvalidValueError, match="policy.topk = 100"):
        mla.dsa_decode(q, cache, bt, sl, 256, q8, wf, icache, SCALE,
                       policy=mla.DsaPolicy(topk=100))
    with pytest.raises(mla.InvalidValueError, match="max_seqlen = -1"):
        mla.dsa_decode(q, cache, bt, sl, -1, q8, wf, icache, SCALE, policy=pol)
    with pytest.raises(mla.OutOfRangeError, match=r"cache_seqlens\[0\] = 200 is past max_seqlen"):
        mla.dsa_decode(q, cache, bt, sl, 150, q8, wf, icache, SCALE, policy=pol)
    need = mla.dsa_decode_workspace_size(q, cache, bt, sl, 256, q8, wf, icache, SCALE, policy=pol)
    assert need > 2 * 256 * 4
    with pytest.raises(mla.WorkspaceError, match=f"needs {need} bytes"):
        mla.dsa_decode(q, cache, bt, sl, 256, q8, wf, icache, SCALE, policy=pol,
                       workspace=np.empty(need - 1, np.uint8))
    with pytest.raises(mla.InvalidValueError, match="policy.path"):
        mla.dsa_decode(q, cache, bt, sl, 256, q8, wf, icache, SCALE,
                       policy=mla.DsaPolicy(path="fast"))
