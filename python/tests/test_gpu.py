"""The same operations on torch CUDA tensors, compared with the CPU path.

Skipped (with the reason in the summary and a banner, see conftest.py) where
torch with CUDA, a GPU or a CUDA build of libmla.so is missing: on CI. The
integrator runs them on the GPU machine:
    MLA_LIBRARY=build/libmla.so PYTHONPATH=python python -m pytest -rs python/tests/test_gpu.py
"""

import numpy as np
import pytest

import mla
from mla import flash_mla_compat as fm

from conftest import BF16, cuda, gpu_skip_reason, make_paged_problem


REASON = gpu_skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"GPU tests not run: {REASON}")

SCALE = 0.135234



def host(t):
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16)
    if t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8).numpy()
    return t.numpy()


def close(gpu, cpu, what):
    """Kernel vs reference: fp32 accumulation in another order, bf16 output rounding.
    Bound: 2^-7 relative to the element plus 1e-2 of the tensor's largest value."""
    g, c = host(gpu).astype(np.float64), np.asarray(cpu, np.float64)
    fin = np.isfinite(c)
    assert np.array_equal(np.isfinite(g), fin), f"{what}: non-finite pattern differs"
    assert np.array_equal(g[~fin], c[~fin]), f"{what}: infinities differ"
    scale = np.abs(c[fin]).max() if fin.any() else 0
    np.testing.assert_allclose(g[fin], c[fin], rtol=2**-7, atol=1e-2 * scale + 1e-6, err_msg=what)


@pytest.mark.parametrize("fmt", ["bf16", "fp8_ds_mla"])
def test_append_and_read_kv_bytes_match_cpu(rng, fmt):
    page, num_pages, T = 64, 4, 200
    c_kv = rng.standard_normal((T, 512)).astype(np.float32)
    k_rope = rng.standard_normal((T, 64)).astype(np.float32)
    slots = rng.permutation(num_pages * page)[:T].astype(np.int64)
    slots[7] = -1
    cpu = mla.empty_kv_cache(num_pages, page, fmt)
    cpu.view(np.uint8)[:] = 0
    mla.append_kv(c_kv, k_rope, slots, cpu)
    gpu = cuda(np.zeros_like(cpu))
    mla.append_kv(cuda(c_kv), cuda(k_rope), cuda(slots), gpu, kv_format=fmt)
    assert np.array_equal(host(gpu).view(np.uint8), cpu.view(np.uint8))
    ok = slots[slots >= 0]
    # read_kv is an inspection op with no CUDA kernel: read the GPU-written
    # cache back through the CPU path, and check that CUDA tensors get a clear
    # UnsupportedError rather than a crash.
    gc, gr = mla.read_kv(host(gpu), ok, kv_format=fmt)
    cc, cr = mla.read_kv(cpu, ok)
    assert np.array_equal(gc, cc) and np.array_equal(gr, cr)
    with pytest.raises(mla.UnsupportedError, match="read_kv"):
        mla.read_kv(gpu, cuda(ok), kv_format=fmt)


@pytest.mark.parametrize(
    "B,s_q,h,page,lengths,fmt",
    [
        (4, 1, 128, 64, [4096, 1, 0, 777], "bf16"),
        (3, 2, 64, 16, [300, 2, 1], "bf16"),
        (2, 4, 16, 1, [100, 3], "fp8_ds_mla"),
        (3, 1, 32, 128, [1000, 129, 64], "fp8_ds_mla"),
    ],
)
def test_decode_matches_cpu(rng, B, s_q, h, page, lengths, fmt):
    import torch

    q, cache, bt, sl = make_paged_problem(rng, B, s_q, h, page, lengths, fmt, q_dtype=BF16)
    c_out, c_lse = mla.mla_decode(q, cache, bt, sl, SCALE, out_dtype="f32")
    out = torch.full((B, s_q, h, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse = torch.full((B, h, s_q), float("nan"), dtype=torch.float32, device="cuda")
    g_out, g_lse = mla.mla_decode(cuda(q), cuda(cache), cuda(bt), cuda(sl), SCALE, out=out,
                                  lse=lse)
    torch.cuda.synchronize()
    close(g_out, c_out, "out")
    close(g_lse, c_lse, "lse")


def test_decode_runs_on_the_callers_stream(rng):
    import torch

    q, cache, bt, sl = make_paged_problem(rng, 8, 1, 64, 64, [2048] * 8, q_dtype=BF16)
    c_out, _ = mla.mla_decode(q, cache, bt, sl, SCALE, out_dtype="f32")
    args = [cuda(x) for x in (q, cache, bt, sl)]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        g_out, _ = mla.mla_decode(*args, SCALE)
    s.synchronize()
    close(g_out, c_out, "out on a side stream")


def test_flash_mla_compat_on_cuda(rng):
    import torch

    q, cache, bt, sl = make_paged_problem(rng, 2, 2, 128, 64, [500, 0], q_dtype=BF16)
    sched, _ = fm.get_mla_metadata(cuda(sl), 2 * 128, 1)
    g_out, g_lse = fm.flash_mla_with_kvcache(cuda(q), cuda(cache), cuda(bt), cuda(sl), 512, sched,
                                             None, SCALE, True)
    c_out, c_lse = fm.flash_mla_with_kvcache(q, cache, bt, sl, 512, fm.get_mla_metadata()[0],
                                             None, SCALE, True)
    torch.cuda.synchronize()
    assert torch.isposinf(g_lse[1]).all()
    close(g_out, c_out.astype(np.float32), "compat out")
    close(g_lse, c_lse, "compat lse")


def test_indexer_on_cuda(rng):
    num_pages, B, s_q = 4, 2, 2
    keys = rng.standard_normal((num_pages * 64, 128)).astype(np.float32)
    slots = np.arange(num_pages * 64, dtype=np.int64)
    cpu = mla.empty_indexer_cache(num_pages)
    cpu[:] = 0
    mla.append_indexer_keys(keys, slots, cpu)
    gpu = cuda(np.zeros_like(cpu))
    try:
        mla.append_indexer_keys(cuda(keys), cuda(slots), gpu)
    except mla.UnsupportedError as e:
        pytest.skip(f"indexer CUDA kernels not in this build: {e}")
    assert np.array_equal(host(gpu), cpu)
    q = rng.standard_normal((B, s_q, 64, 128)).astype(np.float32)
    w = rng.standard_normal((B, s_q, 64)).astype(np.float32)
    cq8, cwf = mla.quantize_indexer_query(q, w)
    gq8, gwf = mla.quantize_indexer_query(cuda(q), cuda(w))
    assert np.array_equal(host(gq8), cq8.view(np.uint8))
    bt = np.array([[2, 0], [3, 1]], np.int32)
    sl = np.array([100, 65], np.int32)
    c_lg = mla.indexer_logits_decode(cq8, cwf, cpu, bt, sl)
    g_lg = mla.indexer_logits_decode(gq8, gwf, gpu, cuda(bt), cuda(sl))
    close(g_lg, c_lg, "indexer logits")


def test_device_mix_is_refused(rng):
    q, cache, bt, sl = make_paged_problem(rng, 1, 1, 16, 64, [10], q_dtype=BF16)
    with pytest.raises(mla.DeviceError):
        mla.mla_decode(cuda(q), cache, bt, sl, SCALE)


@pytest.mark.parametrize("fmt", ["bf16", "fp8_ds_mla"])
def test_sparse_decode_and_topk_match_cpu(rng, fmt):
    import torch

    B, s_q, h, page, topk = 4, 2, 128, 64, 2048
    q, cache, bt, sl = make_paged_problem(rng, B, s_q, h, page, [5000] * B, fmt, q_dtype=BF16)
    logits = rng.standard_normal((B * s_q, 5000)).astype(np.float32)
    c_idx = mla.topk_indices(logits, topk, block_table=bt, page_size=page, rows_per_request=s_q,
                             num_pages=cache.shape[0])
    g_idx = mla.topk_indices(cuda(logits), topk, block_table=cuda(bt), page_size=page,
                             rows_per_request=s_q, num_pages=cache.shape[0])
    assert np.array_equal(host(g_idx), c_idx)
    idx = c_idx.reshape(B, s_q, topk).copy()
    idx[1, 0, 100:] = -1
    c_out, c_lse = mla.sparse_decode(q, cache, idx, SCALE, out_dtype="f32")
    g_out, g_lse = mla.sparse_decode(cuda(q), cuda(cache), cuda(idx), SCALE)
    torch.cuda.synchronize()
    close(g_out, c_out, "sparse out")
    close(g_lse, c_lse, "sparse lse")


def test_sparse_prefill_and_explicit_workspace_match_cpu(rng):
    import torch

    s_q, h, s_kv, topk = 64, 32, 3000, 512
    q = rng.standard_normal((s_q, h, 576)).astype(BF16)
    kv = rng.standard_normal((s_kv, 576)).astype(BF16)
    idx = np.stack([rng.permutation(s_kv)[:topk] for _ in range(s_q)]).astype(np.int32)
    idx[3, 10:] = -1
    c_out, c_lse = mla.sparse_prefill(q, kv, idx, SCALE, out_dtype="f32")
    gq, gkv, gidx = cuda(q), cuda(kv), cuda(idx)
    n = mla.sparse_prefill_workspace_size(gq, gkv, gidx, SCALE)
    ws = torch.empty(max(n, 1), dtype=torch.uint8, device="cuda")
    g_out, g_lse = mla.sparse_prefill(gq, gkv, gidx, SCALE, workspace=ws)
    torch.cuda.synchronize()
    close(g_out, c_out, "sparse prefill out")
    close(g_lse, c_lse, "sparse prefill lse")
    if n > 0:  # too little scratch is refused, naming the bytes
        with pytest.raises(mla.WorkspaceError, match=str(n)):
            mla.sparse_prefill(gq, gkv, gidx, SCALE, workspace=ws[:n - 1])


def test_block_sparse_select_says_cuda_is_not_there_yet(rng):
    # CPU only for now (src/api/block_sparse.cpp): CUDA tensors get a clear error.
    q, cache, bt, sl = make_paged_problem(rng, 1, 1, 16, 64, [100], q_dtype=BF16)
    with pytest.raises(mla.UnsupportedError, match="block_sparse_select: CUDA"):
        mla.block_sparse_select(cuda(q), cuda(cache), cuda(bt), cuda(sl))
