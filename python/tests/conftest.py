"""Shared helpers of the mla pytest suite: seeded inputs and independent NumPy
computations (fp64) of what each operation must return."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import pytest

# A relative MLA_LIBRARY (the documented `MLA_LIBRARY=build/libmla.so ... pytest`) must
# keep naming the same file in the tests' subprocesses, which run in other directories.
if os.environ.get("MLA_LIBRARY"):
    os.environ["MLA_LIBRARY"] = str(Path(os.environ["MLA_LIBRARY"]).resolve())

ml_dtypes = pytest.importorskip("ml_dtypes", reason="bf16/fp8 NumPy arrays need ml_dtypes")
BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn


@pytest.fixture
def rng(request):
    # One seed per test (its name), so a failure reproduces on its own.
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)


def bf16_round(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float32).astype(BF16).astype(np.float64)


def fp8_ds_mla_entry(c_kv: np.ndarray, k_rope: np.ndarray) -> np.ndarray:
    """One 656-byte fp8_ds_mla entry written independently of the C++ code:
    per 128 values s = 2^ceil(log2(max(amax / 448, 1e-4))), e4m3 of v / s (ml_dtypes
    rounds to nearest even), then four fp32 scales, then 64 bf16 rope values."""
    out = np.zeros(656, np.uint8)
    scales = np.zeros(4, np.float32)
    for g in range(4):
        v = c_kv[g * 128:(g + 1) * 128].astype(np.float32)
        amax = float(np.abs(v).max())
        s = np.float32(2.0 ** np.ceil(np.log2(max(amax / 448.0, 1e-4))))
        scales[g] = s
        out[g * 128:(g + 1) * 128] = np.clip(v / s, -448, 448).astype(E4M3).view(np.uint8)
    out[512:528] = scales.view(np.uint8)
    out[528:656] = k_rope.astype(np.float32).astype(BF16).view(np.uint8)
    return out


def dequant_entry(entry: np.ndarray) -> np.ndarray:
    """576 values of a fp8_ds_mla entry, exactly (fp64)."""
    c8 = entry[:512].view(E4M3).astype(np.float64)
    s = entry[512:528].view(np.float32).astype(np.float64)
    rope = entry[528:656].view(BF16).astype(np.float64)
    return np.concatenate([c8 * np.repeat(s, 128), rope])


def cache_keys(cache: np.ndarray, fmt: str, block_table_row, length: int) -> np.ndarray:
    """[length, 576] fp64 keys of one request, gathered through its block table."""
    page = cache.shape[1]
    rows = []
    for p in range(length):
        e = cache[block_table_row[p // page], p % page, 0]
        rows.append(e.astype(np.float64) if fmt == "bf16" else dequant_entry(e))
    return np.array(rows).reshape(length, 576)


def decode_reference(q, cache, fmt, block_table, seqlens, scale, causal=True,
                     kv_begin=None, kv_end=None):
    """Dense absorbed decode in fp64: out [B, s_q, h, 512], lse [B, h, s_q]."""
    B, s_q, h, _ = q.shape
    out = np.zeros((B, s_q, h, 512))
    lse = np.full((B, h, s_q), -np.inf)
    for b in range(B):
        L = int(seqlens[b])
        keys = cache_keys(cache, fmt, block_table[b], L)
        for i in range(s_q):
            hi = L - (s_q - 1 - i) if causal else L
            lo = 0
            if kv_begin is not None:
                lo, hi = int(kv_begin[b]), min(hi, int(kv_end[b]))
            if hi <= lo:
                continue
            k = keys[lo:hi]
            logits = scale * (q[b, i].astype(np.float64) @ k.T)  # [h, n]
            m = logits.max(axis=1, keepdims=True)
            p = np.exp(logits - m)
            ssum = p.sum(axis=1, keepdims=True)
            out[b, i] = (p / ssum) @ k[:, :512]
            lse[b, :, i] = (m + np.log(ssum))[:, 0]
    return out, lse


def make_paged_problem(rng, B, s_q, h, page, lengths, fmt="bf16", q_dtype=np.float32,
                       extra_pages=3):
    """A random paged cache (pages shuffled, spare pages poisoned with random data),
    block table, lengths and q. Returns (q, cache, block_table, seqlens)."""
    import mla

    max_pages = max(1, max((L + page - 1) // page for L in lengths))
    num_pages = B * max_pages + extra_pages
    cache = mla.empty_kv_cache(num_pages, page, fmt)
    T = num_pages * page
    c_kv = rng.standard_normal((T, 512)).astype(np.float32)
    k_rope = rng.standard_normal((T, 64)).astype(np.float32)
    mla.append_kv(c_kv, k_rope, np.arange(T, dtype=np.int64), cache)
    perm = rng.permutation(num_pages).astype(np.int32)
    block_table = perm[:B * max_pages].reshape(B, max_pages).copy()
    seqlens = np.array(lengths, np.int32)
    q = rng.standard_normal((B, s_q, h, 576)).astype(q_dtype)
    return q, cache, block_table, seqlens


def pytest_terminal_summary(terminalreporter):
    """A banner when the GPU tests were skipped, so nobody reads 'passed' as 'ran'."""
    skipped = terminalreporter.stats.get("skipped", [])
    for what, marker in (("GPU", "_gpu.py"), ("TORCH", "test_torch_ops.py")):
        hit = [r for r in skipped if marker in str(getattr(r, "nodeid", "")) or
               (isinstance(r.longrepr, tuple) and marker in str(r.longrepr[0]))]
        if hit:
            reason = hit[0].longrepr[2] if isinstance(hit[0].longrepr, tuple) else ""
            terminalreporter.write_sep("!", f"{len(hit)} {what} TESTS SKIPPED: {reason}",
                                       yellow=True)


# ---- GPU tests (torch CUDA tensors) ------------------------------------------------------------


def gpu_skip_reason():
    """Why the GPU tests cannot run here, or None when they can."""
    import mla

    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    if not mla.built_with_cuda():
        return f"{mla.library_path()} was built without CUDA"
    return None


def cuda(a):
    """NumPy (ml_dtypes too) -> torch CUDA tensor, bit for bit."""
    import torch

    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).cuda()
    if a.dtype.name == "float8_e4m3fn":
        return torch.from_numpy(a.view(np.uint8).copy()).view(torch.float8_e4m3fn).cuda()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()
