"""Engines' call sequences on the GPU: torch.compile(fullgraph=True) of a decode
loop (inductor), CUDA-graph capture and replay through mla.mla_decode and the
FlashMLA compat layer (SGLang's and vLLM's sequences), and FlashMLA itself beside
us when it is importable. Skipped loudly without torch + CUDA + a CUDA build:
    MLA_LIBRARY=build/libmla.so PYTHONPATH=python python -m pytest -rs \
        python/tests/test_engines_gpu.py
"""

import numpy as np
import pytest

import mla
from mla import flash_mla_compat as fm

from conftest import BF16, cuda, gpu_skip_reason, make_paged_problem


REASON = gpu_skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"GPU tests not run: {REASON}")
SCALE = 0.135234



def problem(rng, B, h, lengths, page=64, s_q=1, max_pages=None):
    q, cache, bt, sl = make_paged_problem(rng, B, s_q, h, page, lengths, q_dtype=BF16)
    return cuda(q), cuda(cache), cuda(bt), cuda(sl)


def test_compile_fullgraph_decode_loop_inductor(rng):
    import torch

    q, cache, bt, sl = problem(rng, 4, 128, [4096, 100, 1, 2000])

    def layers(q, cache, bt, sl):
        x = q
        for _ in range(4):  # four "layers": decode, then a cheap op that feeds the next q
            out, lse = mla.mla_decode(x, cache, bt, sl, SCALE, True)
            x = torch.cat([out, out[..., :64]], dim=-1) * 0.5
        return out, lse

    compiled = torch.compile(layers, fullgraph=True)
    got_out, got_lse = compiled(q, cache, bt, sl)
    want_out, want_lse = layers(q, cache, bt, sl)
    assert torch.equal(got_out, want_out) and torch.equal(got_lse, want_lse)


def test_compile_reduce_overhead_replays_cuda_graphs(rng):
    import torch

    q, cache, bt, sl = problem(rng, 2, 128, [300, 4000])
    f = torch.compile(lambda q, c, b, s: mla.mla_decode(q, c, b, s, SCALE, True)[0],
                      fullgraph=True, mode="reduce-overhead")
    for _ in range(3):  # warm-up, record, replay
        got = f(q, cache, bt, sl).clone()
    assert torch.equal(got, mla.mla_decode(q, cache, bt, sl, SCALE, True)[0])


def test_eager_cuda_graph_capture_and_replay(rng):
    import torch

    q, cache, bt, sl = problem(rng, 3, 64, [500, 64, 3000])
    mla.mla_decode(q, cache, bt, sl, SCALE, True)  # warm-up outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, lse = mla.mla_decode(q, cache, bt, sl, SCALE, True)
    sl.copy_(torch.tensor([1, 64, 2999], dtype=torch.int32))
    q.normal_()
    g.replay()
    want_out, want_lse = mla.mla_decode(q, cache, bt, sl, SCALE, True)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)


def test_sglang_sequence_with_graph_buffers(rng):
    """SGLang's FlashMLA backend (older API), as in test_flash_mla_compat.py, with the
    decode captured in a CUDA graph and replayed at another batch content."""
    import torch

    h, max_bs = 128, 8
    meta_buf, splits_buf = fm.get_mla_metadata(torch.ones(max_bs, dtype=torch.int32,
                                                          device="cuda"), h, 1)
    q, cache, bt, sl = problem(rng, 4, h, [100, 4096, 1, 777])
    bs = 4
    meta, splits = fm.get_mla_metadata(sl, h, 1)
    meta_buf.copy_(meta)
    splits_buf[:bs + 1].copy_(splits)

    def forward_decode():
        o, _ = fm.flash_mla_with_kvcache(
            q=q.view(bs, -1, h, 576), k_cache=cache.view(-1, 64, 1, 576), block_table=bt,
            cache_seqlens=sl, head_dim_v=512, tile_scheduler_metadata=meta_buf,
            num_splits=splits_buf[:bs + 1], softmax_scale=SCALE, causal=True)
        return o

    forward_decode()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        o = forward_decode()
    sl.copy_(torch.tensor([5, 4000, 64, 1], dtype=torch.int32))
    meta, splits = fm.get_mla_metadata(sl, h, 1)
    meta_buf.copy_(meta)
    splits_buf[:bs + 1].copy_(splits)
    g.replay()
    assert torch.equal(o, mla.mla_decode(q, cache, bt, sl, SCALE, True)[0])


def test_vllm_sequence_and_flashmla_beside_us(rng):
    """vLLM's FlashMLA backend (newer API), and FlashMLA's own output on the same data
    when flash_mla is importable (bf16 outputs of two fp32-accumulating kernels)."""
    import torch

    h = 128
    q, cache, bt, sl = problem(rng, 8, h, [4096] * 8)
    sched, _ = fm.get_mla_metadata(sl, h, 1, is_fp8_kvcache=False)
    o, lse = fm.flash_mla_with_kvcache(q=q, k_cache=cache[:, :, 0].unsqueeze(-2),
                                       block_table=bt, cache_seqlens=sl, head_dim_v=512,
                                       tile_scheduler_metadata=sched, softmax_scale=SCALE,
                                       causal=True, is_fp8_kvcache=False)
    w_out, w_lse = mla.mla_decode(q, cache, bt, sl, SCALE, True)
    assert torch.equal(o, w_out) and torch.equal(lse, w_lse)
    from mla import _call

    assert _call.kept_workspaces()  # kept for the next layer (per stream)
    try:
        import flash_mla
    except ImportError:
        pytest.skip("flash_mla not importable: our side checked, FlashMLA's not compared")
    fs, fsp = flash_mla.get_mla_metadata(sl, h, 1)
    f_out, f_lse = flash_mla.flash_mla_with_kvcache(q, cache, bt, sl, 512, fs, fsp,
                                                    softmax_scale=SCALE, causal=True)
    torch.testing.assert_close(o.float(), f_out.float(), rtol=2**-7, atol=1e-2)
    torch.testing.assert_close(lse, f_lse, rtol=1e-4, atol=1e-4)


def test_flashinfer_wrapper_on_torch_cuda(rng):
    """SGLang's FlashInfer MLA decode shape: page_size 1, ckv/kpe views of one k buffer,
    CSR indices on the GPU; plan once, run per layer."""
    import torch
    from mla.flashinfer_compat import BatchMLAPagedAttentionWrapper

    h, page, lengths = 128, 1, [700, 3, 2048]
    q, cache, bt, sl = problem(rng, 3, h, lengths, page=page)
    buf = cache[:, :, 0, :]
    indptr = torch.tensor([0] + list(np.cumsum(lengths)), dtype=torch.int32, device="cuda")
    indices = torch.cat([bt[b, :L] for b, L in enumerate(lengths)])
    w = BatchMLAPagedAttentionWrapper(torch.empty(128 << 20, dtype=torch.uint8, device="cuda"))
    w.plan(torch.arange(4, dtype=torch.int32, device="cuda"), indptr, indices, sl, h, 512, 64,
           page, False, SCALE, torch.bfloat16, torch.bfloat16)
    qf = q.view(3, h, 576)
    out, lse = w.run(qf[..., :512], qf[..., 512:], buf[..., :512], buf[..., 512:],
                     return_lse=True)
    n_out, n_lse = mla.mla_decode(q, cache, bt, sl, SCALE, False)
    assert torch.equal(out, n_out.view(3, h, 512))
    torch.testing.assert_close(lse * np.log(2.0), n_lse[:, :, 0], rtol=1e-6, atol=0)


def test_eager_workspace_is_kept_per_stream_not_in_graphs(rng):
    import torch
    from mla import _call

    q, cache, bt, sl = problem(rng, 2, 128, [4096, 4096])
    mla.release_workspaces()
    want, _ = mla.mla_decode(q, cache, bt, sl, SCALE, True)
    kept = _call.kept_workspaces()
    assert len(kept) == 1
    ptr = next(iter(kept.values())).data_ptr()
    again, _ = mla.mla_decode(q, cache, bt, sl, SCALE, True)
    assert next(iter(_call.kept_workspaces().values())).data_ptr() == ptr
    assert torch.equal(again, want)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        other, _ = mla.mla_decode(q, cache, bt, sl, SCALE, True)
    torch.cuda.current_stream().wait_stream(side)
    assert len(_call.kept_workspaces()) == 2 and torch.equal(other, want)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, _ = mla.mla_decode(q, cache, bt, sl, SCALE, True)
    assert len(_call.kept_workspaces()) == 2  # the capture made its own workspace
    g.replay()
    assert torch.equal(out, want)


def test_is_supported_on_the_gpu_machine():
    r = mla.is_supported()
    assert r, r.reasons  # an H200 with a CUDA build: every family
    assert mla.is_supported("cuda:0", "decode") is True


def test_torch_ext_is_used_when_built():
    import importlib.machinery
    import pathlib

    import torch
    from mla import _call

    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    built = (pathlib.Path(mla.library_path()).parent / f"_torch_ext{suffix}").is_file()
    if not built:
        pytest.skip("mla._torch_ext not built (scripts/build_torch_ext.sh): generic path only")
    assert _call.torch_ext_for(torch.zeros(1, device="cuda")) is not None
    for op in ("decode", "sparse_decode"):
        assert "CUDA" in torch._C._dispatch_dump(f"mla::{op}")


@pytest.mark.parametrize("fmt", ["bf16", "fp8_ds_mla"])
def test_sparse_decode_through_the_compat_layer(rng, fmt):
    """vLLM's / SGLang's sparse (DSA) decode call: indices with -1 and >= the number of
    keys (FlashMLA's two spellings of none), topk_length; against the generic path."""
    import torch

    B, s_q, h, page, topk = 2, 1, 64, 64, 128
    q, cache, bt, sl = make_paged_problem(rng, B, s_q, h, page, [700, 700], fmt, q_dtype=BF16)
    gq, gc = cuda(q), cuda(cache)
    total = cache.shape[0] * page
    idx = rng.integers(0, total, (B, s_q, topk)).astype(np.int32)
    idx[0, 0, 5:9] = -1
    idx[1, 0, 3] = total + 7
    tl = np.array([100, 64], np.int32)
    sched, _ = fm.get_mla_metadata()
    out, lse = fm.flash_mla_with_kvcache(gq, gc, None, None, 512, sched, None, SCALE,
                                         is_fp8_kvcache=fmt != "bf16", indices=cuda(idx),
                                         topk_length=cuda(tl))
    fixed = np.where(idx >= total, -1, idx).astype(np.int32)
    w_out, w_lse = mla.sparse_decode(gq, gc, cuda(fixed), SCALE, topk_length=cuda(tl),
                                     kv_format=fmt, out_dtype="bf16")
    assert torch.equal(out, w_out)
    assert torch.equal(lse, torch.where(torch.isneginf(w_lse), float("inf"), w_lse))
    # The object planned on that call (with mla._torch_ext); a second layer reuses it.
    first = sched.sparse_plan
    out2, _ = fm.flash_mla_with_kvcache(gq, gc, None, None, 512, sched, None, SCALE,
                                        is_fp8_kvcache=fmt != "bf16", indices=cuda(idx),
                                        topk_length=cuda(tl))
    assert sched.sparse_plan is first and torch.equal(out2, w_out)


def test_plan_reused_by_layers_eager_and_in_a_cuda_graph(rng):
    """One mla.decode_plan per step, three layers with their own q and cache: every
    layer bit-identical to its call without a plan (the torch fast path with a plan);
    then the plan call and the layers captured in one graph, replayed with new lengths."""
    import torch

    lengths = [5000, 70, 20000, 0, 1]
    layers = [problem(rng, 5, 128, lengths) for _ in range(3)]
    bt, sl = layers[0][2], layers[0][3]
    plan = mla.decode_plan(layers[0][0], layers[0][1], bt, sl, SCALE, True)
    for q, cache, _, _ in layers:
        got = mla.mla_decode(q, cache, bt, sl, SCALE, True, plan=plan)
        want = mla.mla_decode(q, cache, bt, sl, SCALE, True)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        p = mla.decode_plan(layers[0][0], layers[0][1], bt, sl, SCALE, True)
        outs = [mla.mla_decode(q, cache, bt, sl, SCALE, True, plan=p) for q, cache, _, _ in layers]
    for new in ([4999, 1, 19000, 64, 0], [2, 64, 63, 1, 4096]):
        sl.copy_(torch.tensor(new, dtype=torch.int32))
        for q, _, _, _ in layers:
            q.normal_()
        g.replay()
        for (q, cache, _, _), (o, lse) in zip(layers, outs):
            w_out, w_lse = mla.mla_decode(q, cache, bt, sl, SCALE, True)
            assert torch.equal(o, w_out) and torch.equal(lse, w_lse)
    with pytest.raises(mla.InvalidValueError, match="plan"):
        mla.mla_decode(layers[0][0][:2], layers[0][1], bt[:2], sl[:2], SCALE, True, plan=plan)


def test_flashmla_newer_api_plans_once_on_the_gpu(rng):
    """vLLM's sequence: one sched object per step; the first layer's call plans, the
    others reuse it; results equal the native call's with FlashMLA's +inf lse."""
    import torch

    lengths = [4641, 45118, 1730, 1696]
    layers = [problem(rng, 4, 16, lengths, s_q=4) for _ in range(3)]
    bt, sl = layers[0][2], layers[0][3]
    sched, _ = fm.get_mla_metadata(sl, 4 * 16, 1, is_fp8_kvcache=False)
    for i, (q, cache, _, _) in enumerate(layers):
        o, lse = fm.flash_mla_with_kvcache(q, cache, bt, sl, 512, sched, None,
                                           softmax_scale=SCALE, causal=True)
        first = sched.plan if i == 0 else first
        assert sched.plan is first
        w_out, w_lse = mla.mla_decode(q, cache, bt, sl, SCALE, True)
        assert torch.equal(o, w_out)
        assert torch.equal(lse, torch.where(torch.isneginf(w_lse), torch.inf, w_lse))
