"""The fp8_e4m3 cache (vLLM's dense fp8 layout) on the GPU through Python: the CUDA
append writes the CPU reference's bytes, and vLLM's flash_mla_with_kvcache_fp8 (fp8 q
with descale_q, e4m3 cache with descale_k, eager and through its sched object) matches
an fp64 NumPy decode of the dequantised cache. Skipped loudly without torch + CUDA:
    MLA_LIBRARY=build/libmla.so PYTHONPATH=python python -m pytest -rs \\
        python/tests/test_fp8_e4m3_gpu.py
"""

import numpy as np
import pytest

import mla
from mla import flash_mla_compat as fm

from conftest import E4M3, cuda, decode_reference, gpu_skip_reason

REASON = gpu_skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"GPU tests not run: {REASON}")
SCALE = 0.135234
K_SCALE = np.array([0.0173], np.float32)


def test_append_and_vllm_fp8_decode_match_the_reference(rng):
    import torch

    page, lengths, h, s_q = 64, [700, 1, 0, 130], 128, 2
    B = len(lengths)
    max_pages = max(1, max((L + page - 1) // page for L in lengths))
    num_pages = B * max_pages + 2
    T = num_pages * page
    c_kv = rng.standard_normal((T, 512)).astype(np.float32)
    k_rope = (2 * rng.standard_normal((T, 64))).astype(np.float32)
    slots = np.arange(T, dtype=np.int64)
    host = mla.empty_kv_cache(num_pages, page, "fp8_e4m3")
    with mla.kv_scale(K_SCALE):
        mla.append_kv(c_kv, k_rope, slots, host, "fp8_e4m3")
    dev = torch.full((num_pages, page, 1, 576), 0x7f, dtype=torch.uint8, device="cuda")  # NaN
    ks = cuda(K_SCALE)
    with mla.kv_scale(ks):
        mla.append_kv(cuda(c_kv), cuda(k_rope), cuda(slots), dev, "fp8_e4m3")
    torch.cuda.synchronize()
    assert np.array_equal(dev.cpu().numpy(), host)  # the CUDA append: the reference's bytes

    bt = rng.permutation(num_pages).astype(np.int32)[:B * max_pages].reshape(B, max_pages).copy()
    sl = np.array(lengths, np.int32)
    dq = np.array([0.05], np.float32)
    q8 = np.clip(rng.standard_normal((B, s_q, h, 576)) / 0.05, -448, 448).astype(E4M3)
    # The query the compat layer forms: q * descale_q rounded once to bf16.
    q = (q8.astype(np.float32) * dq[0]).astype(np.float32)
    q = torch.from_numpy(q).to(torch.bfloat16).float().numpy()
    keys = host.view(E4M3).astype(np.float64) * np.float64(K_SCALE[0])
    w_out, w_lse = decode_reference(q, keys, "bf16", bt, sl, SCALE)
    w_lse = np.where(np.isneginf(w_lse), np.inf, w_lse)  # FlashMLA's +inf

    tile, splits = fm.get_mla_metadata_dense_fp8(cuda(sl), s_q * h, 1)
    sched, _ = fm.get_mla_metadata()
    outs = []
    for meta, n in ((tile, splits), (sched, None), (sched, None)):
        out, lse = fm.flash_mla_with_kvcache_fp8(
            cuda(q8), dev.view(torch.float8_e4m3fn), cuda(bt), cuda(sl), 512, meta, n, SCALE,
            True, descale_q=cuda(dq), descale_k=ks)
        assert out.dtype == torch.bfloat16
        o = out.float().cpu().numpy()
        # Bounds as tests/gpu/decode/test_decode_gpu.cpp: out per row 1e-2 of the row's
        # max |ref| (P and the output round to f16 / bf16), lse 1e-3.
        row_max = np.abs(w_out).max(axis=-1, keepdims=True)
        assert np.all(np.abs(o - w_out) <= 1e-2 * row_max + 1e-30)
        l = lse.cpu().numpy()
        finite = np.isfinite(w_lse)
        assert np.array_equal(np.isposinf(l), ~finite)
        assert np.abs(l[finite] - w_lse[finite]).max() <= 1e-3
        outs.append(o)
    assert np.array_equal(outs[1], outs[2])  # the planned call: the same bits again
