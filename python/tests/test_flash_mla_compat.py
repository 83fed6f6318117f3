"""FlashMLA call shapes: same results as the native API, FlashMLA's conventions."""

import numpy as np
import pytest

import mla
from mla import flash_mla_compat as fm

from conftest import BF16, cache_keys, decode_reference, make_paged_problem

SCALE = 0.1


def _native(q, cache, bt, sl, **kw):
    out, lse = mla.mla_decode(q, cache, bt, sl, SCALE, True, **kw)
    return out, np.where(np.isneginf(lse), np.inf, lse)


def test_dense_decode_matches_native_with_plus_inf_lse(rng):
    q, cache, bt, sl = make_paged_problem(rng, 3, 2, 16, 64, [70, 0, 1], q_dtype=BF16)
    sched, _ = fm.get_mla_metadata()
    out, lse = fm.flash_mla_with_kvcache(q, cache, bt, sl, 512, sched, None,
                                         softmax_scale=SCALE, causal=True)
    n_out, n_lse = mla.mla_decode(q, cache, bt, sl, SCALE, causal=True)
    assert out.dtype == BF16 and out.shape == (3, 2, 16, 512) and lse.shape == (3, 16, 2)
    assert np.array_equal(out.view(np.uint16), n_out.view(np.uint16))
    empty = np.isneginf(n_lse)
    assert empty[1].all() and empty[2, :, 0].all() and not empty[2, :, 1].any()
    assert np.all(np.isposinf(lse[empty]))  # FlashMLA: +inf for a query with no key
    assert np.array_equal(lse[~empty], n_lse[~empty])
    # One metadata object serves every later call, of any shape (FlashMLA's needs one
    # per shape; ours only keeps the workspace, grown as needed).
    out2, _ = fm.flash_mla_with_kvcache(q[:, :1], cache, bt, sl, 512, sched, None, SCALE, True)
    assert np.array_equal(out2.view(np.uint16),
                          mla.mla_decode(q[:, :1], cache, bt, sl, SCALE)[0].view(np.uint16))


def test_sglang_flashmla_backend_sequence(rng):
    """SGLang's FlashMLA backend (python/sglang/srt/layers/attention/flashmla_backend.py),
    the older FlashMLA API, page size 64, s_q = 1:
      1. init_cuda_graph_state(max_bs): buffers (meta_buf, splits_buf) =
         get_mla_metadata(ones(max_bs) int32, 1 * num_q_heads, 1);
      2. per step (capture and replay): meta, splits = get_mla_metadata(seq_lens int32,
         1 * num_q_heads, 1); meta_buf.copy_(meta); splits_buf[:bs + 1].copy_(splits);
      3. per layer: o, _ = flash_mla_with_kvcache(q=q.view(bs, -1, h, 576),
         k_cache=k_buffer.view(-1, 64, 1, 576), block_table=block_kv_indices[:bs],
         cache_seqlens=seq_lens int32, head_dim_v=512, tile_scheduler_metadata=meta_buf,
         num_splits=splits_buf[:bs + 1], softmax_scale=scaling, causal=True)."""
    h, max_bs = 16, 4
    meta_buf, splits_buf = fm.get_mla_metadata(np.ones(max_bs, np.int32), 1 * h, 1)
    assert meta_buf.dtype == np.int32 and meta_buf.shape[1] == 8
    assert splits_buf.dtype == np.int32 and splits_buf.shape == (max_bs + 1,)
    for bs, lengths in ((3, [70, 1, 130]), (2, [5, 64])):
        q, cache, bt, sl = make_paged_problem(rng, bs, 1, h, 64, lengths, q_dtype=BF16)
        meta, splits = fm.get_mla_metadata(sl, 1 * h, 1)
        meta_buf[...] = meta  # copy_ into the graph buffers: shapes fit for any bs
        splits_buf[:bs + 1] = splits
        k_buffer = cache.reshape(-1, 576)  # the pool as SGLang holds it, viewed back
        o, lse = fm.flash_mla_with_kvcache(
            q=q.reshape(bs, -1, h, 576), k_cache=k_buffer.reshape(-1, 64, 1, 576),
            block_table=bt, cache_seqlens=sl, head_dim_v=512, tile_scheduler_metadata=meta_buf,
            num_splits=splits_buf[:bs + 1], softmax_scale=SCALE, causal=True)
        w_out, w_lse = _native(q, cache, bt, sl)
        assert np.array_equal(o.view(np.uint16), w_out.view(np.uint16))
        assert np.array_equal(lse, w_lse)


@pytest.mark.parametrize("invariant", [False, True])
def test_vllm_flashmla_backend_sequence(rng, invariant):
    """vLLM's FlashMLA backend (vllm/v1/attention/backends/mla/flashmla.py), the newer
    API, page size 64 (its kernel block size):
      1. metadata builder, per step: sched, _ = get_mla_metadata(seq_lens,
         max_query_len * num_q_heads, 1, is_fp8_kvcache=False);
      2. batch-invariant mode sets sched.tile_scheduler_metadata = zeros((1, 8)) int32
         (one partition) and sched.num_splits = zeros(B + 1) int32;
      3. per layer: o, lse = flash_mla_with_kvcache(q=q, k_cache=kv_cache.unsqueeze(-2),
         block_table=block_table, cache_seqlens=seq_lens, head_dim_v=512,
         tile_scheduler_metadata=sched, softmax_scale=scale, causal=True,
         is_fp8_kvcache=False); lse is kept (decode context parallelism merges it)."""
    h, s_q = 16, 2
    q, cache, bt, sl = make_paged_problem(rng, 2, s_q, h, 64, [100, 3], q_dtype=BF16)
    kv_cache = cache[:, :, 0, :]  # vLLM's layout: [num_blocks, block_size, 576]
    sched, _ = fm.get_mla_metadata(sl, s_q * h, 1, is_fp8_kvcache=False)
    if invariant:
        sched.tile_scheduler_metadata = np.zeros((1, 8), np.int32)
        sched.num_splits = np.zeros(3, np.int32)
    for _layer in range(2):
        o, lse = fm.flash_mla_with_kvcache(
            q=q, k_cache=kv_cache[:, :, None, :], block_table=bt, cache_seqlens=sl,
            head_dim_v=512, tile_scheduler_metadata=sched, softmax_scale=SCALE, causal=True,
            is_fp8_kvcache=False)
        w_out, w_lse = _native(q, cache, bt, sl, batch_invariant=invariant)
        assert np.array_equal(o.view(np.uint16), w_out.view(np.uint16))
        assert np.array_equal(lse, w_lse)


def test_default_scale_and_not_causal(rng):
    q, cache, bt, sl = make_paged_problem(rng, 1, 2, 16, 16, [30])
    sched, _ = fm.get_mla_metadata()
    out, _ = fm.flash_mla_with_kvcache(q, cache, bt, sl, 512, sched)
    want, _ = decode_reference(q, cache, "bf16", bt, sl, 576 ** -0.5, causal=False)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def sparse_reference(q, keys, idx, scale):
    """q [R, h, 576], keys [S, 576] f64, idx [R, topk] -> out, lse (+inf empty), max."""
    R, h, _ = q.shape
    out, lse, mx = np.zeros((R, h, 512)), np.full((R, h), np.inf), np.full((R, h), -np.inf)
    for r in range(R):
        v = [i for i in idx[r] if 0 <= i < len(keys)]
        if not v:
            continue
        k = keys[v]
        lg = scale * (q[r].astype(np.float64) @ k.T)
        m = lg.max(1, keepdims=True)
        p = np.exp(lg - m)
        out[r] = p / p.sum(1, keepdims=True) @ k[:, :512]
        lse[r], mx[r] = (m + np.log(p.sum(1, keepdims=True)))[:, 0], m[:, 0]
    return out, lse, mx


def test_sparse_prefill(rng):
    s_q, h, s_kv, topk = 5, 16, 40, 8
    q = rng.standard_normal((s_q, h, 576)).astype(BF16)
    kv = rng.standard_normal((s_kv, 1, 576)).astype(BF16)
    idx = rng.integers(0, s_kv, (s_q, 1, topk)).astype(np.int32)
    idx[0, 0, [1, 4]] = -1  # holes
    idx[1, 0, 2] = s_kv + 3  # >= s_kv: none
    idx[3, 0, :] = -1  # a query with nothing
    out, mx, lse = fm.flash_mla_sparse_fwd(q, kv, idx, SCALE)
    w_out, w_lse, w_mx = sparse_reference(q, kv[:, 0].astype(np.float64), idx[:, 0], SCALE)
    np.testing.assert_allclose(out.astype(np.float64), w_out, rtol=2**-8, atol=1e-5)
    assert np.all(np.isposinf(lse[3])) and np.all(out[3].astype(np.float32) == 0)
    np.testing.assert_allclose(lse, w_lse, rtol=1e-5)
    # max_logits comes from the framework's f32 einsum over 576 products of size ~1:
    # absolute rounding ~ sqrt(576) * 2^-24 * |terms| * scale, well under 1e-4.
    np.testing.assert_allclose(mx, w_mx, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("fmt", ["bf16", "fp8_ds_mla"])
def test_sparse_decode(rng, fmt):
    B, s_q, h, page, topk = 2, 2, 16, 16, 12
    q, cache, bt, sl = make_paged_problem(rng, B, s_q, h, page, [40, 40], fmt, q_dtype=BF16)
    total = cache.shape[0] * page
    idx = rng.integers(0, total, (B, s_q, topk)).astype(np.int32)
    idx[0, 1, 5:] = -1
    idx[1, 0, :] = -1
    sched, _ = fm.get_mla_metadata(sl, s_q * h, 1, h, fmt != "bf16", topk)
    assert isinstance(sched, fm.FlashMLASchedMeta)
    out, lse = fm.flash_mla_with_kvcache(q, cache, None, None, 512, sched, None, SCALE,
                                         is_fp8_kvcache=fmt != "bf16", indices=idx)
    assert out.shape == (B, s_q, h, 512) and lse.shape == (B, h, s_q)
    all_keys = cache_keys(cache, fmt, np.arange(cache.shape[0]), total)
    w_out, w_lse, _ = sparse_reference(q.reshape(B * s_q, h, 576), all_keys,
                                       idx.reshape(B * s_q, topk), SCALE)
    np.testing.assert_allclose(out.astype(np.float64).reshape(B * s_q, h, 512), w_out,
                               rtol=2**-8, atol=1e-5)
    np.testing.assert_allclose(lse.transpose(0, 2, 1).reshape(B * s_q, h), w_lse, rtol=1e-5)


def test_unsupported_arguments_say_so(rng):
    q, cache, bt, sl = make_paged_problem(rng, 1, 1, 16, 16, [5])
    sched, _ = fm.get_mla_metadata()
    with pytest.raises(mla.UnsupportedError, match="attn_sink"):
        fm.flash_mla_with_kvcache(q, cache, bt, sl, 512, sched, attn_sink=np.zeros(16, np.float32))
    with pytest.raises(mla.InvalidValueError, match="head_dim_v"):
        fm.flash_mla_with_kvcache(q, cache, bt, sl, 128, sched)


def test_topk_length_limits_each_row(rng):
    """topk_length[i]: only the first topk_length[i] entries of row i count (sparse
    prefill: FlashMLA's flash_mla_sparse_fwd; sparse decode: flash_mla_with_kvcache)."""
    s_q, h, s_kv, topk = 4, 16, 30, 8
    q = rng.standard_normal((s_q, h, 576)).astype(BF16)
    kv = rng.standard_normal((s_kv, 1, 576)).astype(BF16)
    idx = rng.integers(0, s_kv, (s_q, 1, topk)).astype(np.int32)
    tl = np.array([8, 3, 0, 5], np.int32)
    out, mx, lse = fm.flash_mla_sparse_fwd(q, kv, idx, SCALE, topk_length=tl)
    cut = idx.copy()
    for i, n in enumerate(tl):
        cut[i, 0, n:] = -1
    w_out, w_mx, w_lse = fm.flash_mla_sparse_fwd(q, kv, cut, SCALE)
    assert np.array_equal(out.view(np.uint16), w_out.view(np.uint16))
    assert np.array_equal(lse, w_lse) and np.array_equal(mx, w_mx)
    assert np.all(np.isposinf(lse[2]))  # topk_length 0: nothing attended

    B, s_q, page = 2, 1, 16
    q, cache, bt, sl = make_paged_problem(rng, B, s_q, h, page, [40, 40], q_dtype=BF16)
    idx = rng.integers(0, cache.shape[0] * page, (B, s_q, topk)).astype(np.int32)
    tl = np.array([2, 6], np.int32)
    sched, _ = fm.get_mla_metadata()
    out, lse = fm.flash_mla_with_kvcache(q, cache, None, None, 512, sched, None, SCALE,
                                         indices=idx, topk_length=tl)
    cut = idx.copy()
    for b, n in enumerate(tl):
        cut[b, :, n:] = -1
    w_out, w_lse = fm.flash_mla_with_kvcache(q, cache, None, None, 512, sched, None, SCALE,
                                             indices=cut)
    assert np.array_equal(out.view(np.uint16), w_out.view(np.uint16))
    assert np.array_equal(lse, w_lse)
