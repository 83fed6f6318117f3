"""Where the CUDA indexer logits differ from the exact ones, and by how much (issue 20).

The CPU reference computes I[t, s] = k_scale[s] * sum_h w'[t, h] * ReLU(q8[t, h] . k8[s])
in fp64 over the same e4m3 codes, so the codes are not a source of difference: what
remains is the kernels' arithmetic. The FP8 tensor-core dot products accumulate with
a reduced-precision adder (DeepSeek-V3's report measures about 14 bits kept on
H800), so the error of one dot is bounded relative to the sum of the |products|,
not to the dot itself: cancellation between products of both signs, then the ReLU,
can make it a large fraction of a small logit. This test measures both ratios:
  err / |row max|          (what top-k near-ties see), and
  err / A[t, s]            with A = k_scale * sum_h |w'| * sum_d |q8 k8|,
and asserts the second, the accumulation bound. Run on the GPU machine:
    MLA_LIBRARY=build/libmla.so PYTHONPATH=python python -m pytest -s \\
        python/tests/test_indexer_precision_gpu.py
"""

import numpy as np
import pytest

import mla

from conftest import E4M3
from test_gpu import REASON, cuda, host

pytestmark = pytest.mark.skipif(REASON is not None, reason=f"GPU tests not run: {REASON}")


def abs_logits(q8, wf, icache, bt, lens, width):
    """A[b, i, s]: the logits with every product and weight taken by magnitude."""
    B, s_q = q8.shape[:2]
    qa = np.abs(q8.view(E4M3).astype(np.float64)).reshape(B, s_q, 64, 128)
    wa = np.abs(wf.astype(np.float64))
    codes = icache[:, :8192].view(E4M3).astype(np.float64).reshape(-1, 64, 128)
    scales = icache[:, 8192:].copy().view(np.float32).astype(np.float64).reshape(-1, 64)
    out = np.zeros((B, s_q, width))
    for b in range(B):
        n = int(lens[b])
        pages = bt[b, :(n + 63) // 64]
        k = np.abs(codes[pages].reshape(-1, 128)[:n])
        ks = scales[pages].reshape(-1)[:n]
        for i in range(s_q):
            out[b, i, :n] = ks * (wa[b, i] @ (qa[b, i] @ k.T))
    return out


@pytest.mark.parametrize("s_q", [1, 4])
def test_cuda_indexer_logits_error_is_the_fp8_accumulation(rng, s_q):
    import torch

    B, width = 2, 16384
    lens = np.array([width, 9000], np.int32)
    pages = width // 64
    icache = mla.empty_indexer_cache(B * pages)
    keys = rng.standard_normal((B * pages * 64, 128)).astype(np.float32)
    mla.append_indexer_keys(keys, np.arange(B * pages * 64, dtype=np.int64), icache)
    bt = rng.permutation(B * pages).astype(np.int32).reshape(B, pages)
    q8, wf = mla.quantize_indexer_query(
        rng.standard_normal((B, s_q, 64, 128)).astype(np.float32),
        rng.standard_normal((B, s_q, 64)).astype(np.float32))
    ref = mla.indexer_logits_decode(q8, wf, icache, bt, lens, max_len=width)
    got = host(mla.indexer_logits_decode(cuda(q8), cuda(wf), cuda(icache), cuda(bt), cuda(lens),
                                         max_len=width))
    torch.cuda.synchronize()
    seen = np.isfinite(ref)
    assert np.array_equal(seen, np.isfinite(got)), "masks differ"
    err = np.abs(np.where(seen, got.astype(np.float64), 0.0) - np.where(seen, ref, 0.0))
    rowmax = np.abs(np.where(seen, ref, 0.0)).max(axis=2, keepdims=True)
    A = abs_logits(q8, wf, icache, bt, lens, width)
    rel_row = (err / rowmax).max()
    rel_abs = (err / np.where(seen, np.maximum(A, 1e-30), 1.0)).max()
    print(f"\ns_q {s_q}: max err / |row max| = {rel_row:.3g}, max err / A = {rel_abs:.3g} "
          f"(2^-14 = {2**-14:.3g})")
    # The accumulation bound: an adder keeping ~14 bits loses about 2^-14 of the
    # running sum of |products|. Measured on the H200 (2026-12-02, 16K keys):
    # err / A <= 1.42e-5 (s_q 4), err / |row max| <= 2.7e-4; 2^-13 keeps 8x margin.
    assert rel_abs <= 2**-13, f"err / A = {rel_abs:.3g}: more than fp8 accumulation explains"
