"""The fp8_e4m3 cache (vLLM's dense fp8 layout: 576 e4m3 codes per token, one
per-tensor scale set with mla.kv_scale) on the CPU reference: bytes against an
independent quantiser, decode against an fp64 NumPy decode of the dequantised
keys, vLLM's FlashMLA fp8 entry point, and the errors."""

import numpy as np
import pytest

import mla
from mla import flash_mla_compat as fm

from conftest import E4M3, decode_reference

SCALE = 0.1
K_SCALE = np.array([0.0173], np.float32)  # not a power of two on purpose


def e4m3_entry(c_kv, k_rope, s):
    """576 codes written independently of the C++ code: e4m3(clip(v / s)) by ml_dtypes
    (round to nearest even), nope then rope."""
    v = np.concatenate([c_kv, k_rope]).astype(np.float32) / np.float32(s)
    return np.clip(v, -448, 448).astype(E4M3).view(np.uint8)


def dequant(cache, s):
    return cache.view(E4M3).astype(np.float64) * np.float64(s)


def filled_cache(rng, num_pages, page):
    cache = mla.empty_kv_cache(num_pages, page, "fp8_e4m3")
    T = num_pages * page
    c_kv = rng.standard_normal((T, 512)).astype(np.float32)
    k_rope = (2 * rng.standard_normal((T, 64))).astype(np.float32)
    with mla.kv_scale(K_SCALE):
        mla.append_kv(c_kv, k_rope, np.arange(T, dtype=np.int64), cache, "fp8_e4m3")
    return cache, c_kv, k_rope


def test_entry_bytes_match_an_independent_quantiser(rng):
    cache, c_kv, k_rope = filled_cache(rng, 2, 3)
    assert cache.shape == (2, 3, 1, 576) and cache.dtype == np.uint8
    flat = cache.reshape(6, 576)
    for t in range(6):
        assert np.array_equal(flat[t], e4m3_entry(c_kv[t], k_rope[t], K_SCALE[0])), t
    with mla.kv_scale(K_SCALE):
        c_out, r_out = mla.read_kv(cache, np.arange(6, dtype=np.int64), "fp8_e4m3")
    want = dequant(flat, K_SCALE[0])
    assert np.array_equal(c_out, want[:, :512].astype(np.float32))
    assert np.array_equal(r_out, want[:, 512:].astype(np.float32))


@pytest.mark.parametrize("page,lengths,s_q,h", [(1, [5, 0], 1, 16), (16, [70, 3, 16], 2, 32),
                                                (64, [130, 1], 4, 64)])
def test_decode_matches_fp64_decode_of_the_dequantised_keys(rng, page, lengths, s_q, h):
    B = len(lengths)
    max_pages = max(1, max((L + page - 1) // page for L in lengths))
    num_pages = B * max_pages + 2
    cache, _, _ = filled_cache(rng, num_pages, page)
    bt = rng.permutation(num_pages).astype(np.int32)[:B * max_pages].reshape(B, max_pages).copy()
    sl = np.array(lengths, np.int32)
    q = rng.standard_normal((B, s_q, h, 576)).astype(np.float32)
    with mla.kv_scale(K_SCALE):
        out, lse = mla.mla_decode(q, cache, bt, sl, SCALE, True, kv_format="fp8_e4m3")
    # Keys code * s in fp64 (exact): the same data, an independent fp64 decode.
    w_out, w_lse = decode_reference(q, dequant(cache, K_SCALE[0]), "bf16", bt, sl, SCALE)
    np.testing.assert_allclose(out, w_out, rtol=0, atol=1e-5)
    np.testing.assert_allclose(lse, w_lse, rtol=0, atol=1e-5)


def test_format_is_inferred_from_the_entry_width(rng):
    cache, _, _ = filled_cache(rng, 1, 4)
    with mla.kv_scale(K_SCALE):
        mla.validate_kv_cache(cache)  # u8 [.., 576]: fp8_e4m3, which needs the scale
    with pytest.raises(mla.InvalidValueError, match="scale"):
        mla.validate_kv_cache(cache)


def test_missing_or_bad_scale_is_named(rng):
    cache, _, _ = filled_cache(rng, 1, 4)
    q = rng.standard_normal((1, 1, 16, 576)).astype(np.float32)
    bt = np.zeros((1, 1), np.int32)
    sl = np.array([3], np.int32)
    with pytest.raises(mla.InvalidValueError, match="kv.scale"):
        mla.mla_decode(q, cache, bt, sl, SCALE, True, kv_format="fp8_e4m3")
    with mla.kv_scale(np.array([-1.0], np.float32)):
        with pytest.raises(mla.InvalidValueError, match="kv.scale = -1"):
            mla.mla_decode(q, cache, bt, sl, SCALE, True, kv_format="fp8_e4m3")
    with mla.kv_scale(np.ones(2, np.float32)):
        with pytest.raises(mla.ShapeError, match="kv.scale"):
            mla.mla_decode(q, cache, bt, sl, SCALE, True, kv_format="fp8_e4m3")


def test_vllm_fp8_dense_entry_point(rng):
    """vLLM's fp8 dense path: tile, splits = get_mla_metadata_dense_fp8(seq_lens, n, 1)
    set on the sched object, then flash_mla_with_kvcache_fp8(q fp8, k_cache e4m3
    [.., 1, 576], block_table, seq_lens, 512, tile, splits, scale, True,
    descale_q=[1], descale_k=[1]); q * descale_q is the query."""
    page, lengths, h = 16, [40, 7], 16
    B = len(lengths)
    cache, _, _ = filled_cache(rng, 8, page)
    bt = np.arange(8, dtype=np.int32)[:B * 3].reshape(B, 3).copy()
    sl = np.array(lengths, np.int32)
    sched, _ = fm.get_mla_metadata(sl, h, 1, is_fp8_kvcache=True)
    tile, splits = fm.get_mla_metadata_dense_fp8(sl, h, 1)
    sched.tile_scheduler_metadata, sched.num_splits = tile, splits
    dq = np.array([0.05], np.float32)
    q8 = np.clip(rng.standard_normal((B, 1, h, 576)) / 0.05, -448, 448).astype(E4M3)
    out, lse = fm.flash_mla_with_kvcache_fp8(q8, cache.view(E4M3), bt, sl, 512, tile, splits,
                                             SCALE, True, descale_q=dq, descale_k=K_SCALE)
    q = q8.astype(np.float32) * dq[0]
    w_out, w_lse = decode_reference(q, dequant(cache, K_SCALE[0]), "bf16", bt, sl, SCALE)
    np.testing.assert_allclose(np.asarray(out, np.float64), w_out, rtol=0, atol=1e-5)
    np.testing.assert_allclose(lse, w_lse, rtol=0, atol=1e-5)
    with pytest.raises(mla.InvalidValueError, match="descale_k"):
        fm.flash_mla_with_kvcache_fp8(q8, cache, bt, sl, 512, tile, splits, SCALE, True,
                                      descale_q=dq)
