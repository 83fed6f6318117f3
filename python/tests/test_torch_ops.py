"""torch.library custom ops (mla.torch_ops) on the CPU: schemas, fake (meta)
implementations, and torch.compile(fullgraph=True) through mla's Python functions.

Skipped loudly where torch is not installed (CI); the GPU versions (inductor,
CUDA graphs) are in test_engines_gpu.py.
"""

import numpy as np
import pytest

import mla

from conftest import BF16, make_paged_problem

torch = pytest.importorskip("torch", reason="TORCH TESTS NOT RUN: torch is not installed")
from mla import torch_ops  # noqa: E402

SCALE = 0.135234


def to_torch(a):
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def problem(rng, B=2, s_q=1, h=16, page=16, lengths=(20, 7)):
    q, cache, bt, sl = make_paged_problem(rng, B, s_q, h, page, list(lengths), q_dtype=BF16)
    return to_torch(q), to_torch(cache), to_torch(bt), to_torch(sl)


def test_every_op_is_registered():
    for name in torch_ops.registered():
        assert hasattr(torch.ops.mla, name), name


def test_fake_decode_gives_shapes_and_dtypes_without_running(rng):
    from torch._subclasses.fake_tensor import FakeTensorMode

    q, cache, bt, sl = problem(rng)
    with FakeTensorMode() as mode:
        fq, fc, fbt, fsl = (mode.from_tensor(t) for t in (q, cache, bt, sl))
        out, lse = torch.ops.mla.decode(fq, fc, fbt, fsl, SCALE, True, -1, False)
        assert out.shape == (2, 1, 16, 512) and out.dtype == torch.bfloat16
        assert lse.shape == (2, 16, 1) and lse.dtype == torch.float32
        fs = mode.from_tensor(torch.zeros(5, 16, 576, dtype=torch.bfloat16))
        o2, l2 = torch.ops.mla.sparse_prefill(fs, mode.from_tensor(torch.zeros(9, 576)),
                                              mode.from_tensor(torch.zeros(5, 4, dtype=torch.int32)),
                                              SCALE)
        assert o2.shape == (5, 16, 512) and l2.shape == (5, 16)
        idx = torch.ops.mla.topk_indices(mode.from_tensor(torch.zeros(3, 100)), 64)
        assert idx.shape == (3, 64) and idx.dtype == torch.int32


def test_opcheck_decode(rng):
    # Schema, fake-vs-real shapes and strides, mutation annotations, autograd registration.
    q, cache, bt, sl = problem(rng)
    torch.library.opcheck(torch.ops.mla.decode.default, (q, cache, bt, sl, SCALE, True, -1, False))
    out = torch.empty(2, 1, 16, 512, dtype=torch.bfloat16)
    lse = torch.empty(2, 16, 1)
    torch.library.opcheck(torch.ops.mla.decode_out.default,
                          (q, cache, bt, sl, SCALE, True, -1, False, out, lse))


def test_ops_match_the_python_functions(rng):
    q, cache, bt, sl = problem(rng)
    out, lse = torch.ops.mla.decode(q, cache, bt, sl, SCALE, True, -1, False)
    w_out, w_lse = mla.mla_decode(q, cache, bt, sl, SCALE, True)
    assert torch.equal(out, w_out) and torch.equal(lse, w_lse)


def test_compile_fullgraph_decode_loop(rng):
    # mla.mla_decode under torch.compile routes to torch.ops.mla.decode: no graph break.
    q, cache, bt, sl = problem(rng)

    def step(q, cache, bt, sl):
        acc = torch.zeros((), dtype=torch.float32)
        for _ in range(3):
            out, lse = mla.mla_decode(q, cache, bt, sl, SCALE, True)
            acc = acc + out.float().sum() + lse.sum()
            q = q * 0.5
        return acc, out

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    got, got_out = compiled(q, cache, bt, sl)
    want, want_out = step(q, cache, bt, sl)
    assert torch.equal(got_out, want_out)
    torch.testing.assert_close(got, want)


def test_compile_fullgraph_flash_mla_compat(rng):
    from mla import flash_mla_compat as fm

    q, cache, bt, sl = problem(rng, lengths=(20, 0))

    def step(q, cache, bt, sl):
        sched, _ = fm.get_mla_metadata()
        return fm.flash_mla_with_kvcache(q, cache, bt, sl, 512, sched, None, SCALE, True)

    out, lse = torch.compile(step, fullgraph=True, backend="aot_eager")(q, cache, bt, sl)
    w_out, w_lse = step(q, cache, bt, sl)
    assert torch.equal(out, w_out) and torch.equal(lse, w_lse)
    assert torch.isposinf(lse[1]).all()


def test_opcheck_the_other_ops(rng):
    # Each op on small CPU inputs: schema, fake shapes/dtypes vs the real run, mutations.
    g = torch.Generator().manual_seed(0)
    f32 = dict(dtype=torch.float32)
    ops = torch.ops.mla
    cache = torch.zeros(4, 16, 1, 576, dtype=torch.bfloat16)
    slots = torch.tensor([3, 17, -1, 40], dtype=torch.int64)
    c_kv, k_rope = torch.randn(4, 512, generator=g), torch.randn(4, 64, generator=g)
    torch.library.opcheck(ops.append_kv.default, (c_kv, k_rope, slots, cache, -1))
    torch.library.opcheck(ops.read_kv.default, (cache, slots[:2], -1))
    torch.library.opcheck(ops.merge_attn_partials.default,
                          (torch.randn(3, 5, 512, generator=g), torch.randn(3, 5, generator=g)))
    icache = torch.zeros(2, 8448, dtype=torch.uint8)
    torch.library.opcheck(ops.append_indexer_keys.default,
                          (torch.randn(3, 128, generator=g), torch.tensor([0, 5, 70]), icache))
    q = torch.randn(2, 1, 64, 128, generator=g)
    w = torch.randn(2, 1, 64, generator=g)
    torch.library.opcheck(ops.quantize_indexer_query.default, (q, w))
    q8, wf = ops.quantize_indexer_query(q, w)
    bt = torch.tensor([[0], [1]], dtype=torch.int32)
    # fp8 inputs: torch's schema check cannot compare e4m3 tensors on the CPU, so only
    # the fake-vs-real check runs for these two.
    fake_only = ("test_faketensor",)
    torch.library.opcheck(ops.indexer_logits_decode.default,
                          (q8, wf, icache, bt, torch.tensor([10, 64], dtype=torch.int32), 64),
                          test_utils=fake_only)
    k8 = torch.randn(9, 128, generator=g).to(torch.float8_e4m3fn)
    torch.library.opcheck(ops.indexer_logits_prefill.default,
                          (q8[:, 0], wf[:, 0], k8, torch.ones(9), torch.tensor([0, 2], dtype=torch.int32),
                           torch.tensor([5, 9], dtype=torch.int32)), test_utils=fake_only)
    logits = torch.randn(2, 100, generator=g)
    torch.library.opcheck(ops.topk_indices.default, (logits, 64))
    torch.library.opcheck(ops.sparse_prefill.default,
                          (torch.randn(3, 16, 576, generator=g).to(torch.bfloat16),
                           torch.randn(9, 576, generator=g).to(torch.bfloat16),
                           torch.tensor([[0, 1, -1, 8]] * 3, dtype=torch.int32), 0.1))
    w_uk, w_uv = torch.randn(2, 16, 32, generator=g), torch.randn(2, 16, 32, generator=g)
    ckv = torch.randn(6, 32, generator=g)
    torch.library.opcheck(ops.decompress_kv.default, (ckv, w_uk, w_uv))
    kn, v = ops.decompress_kv(ckv, w_uk, w_uv)
    cu = torch.tensor([0, 2, 6], dtype=torch.int32)
    torch.library.opcheck(ops.mha_prefill.default, (kn, kn, v, cu, cu, 0.3, True))


def test_compile_in_a_fresh_process_where_torch_came_after_mla():
    # The first thing mla sees of torch is Dynamo tracing it (no eager call before,
    # mla.torch_ops not imported yet): the trace must still route to the custom op.
    import os
    import subprocess
    import sys

    code = """
import mla, torch
q = torch.randn(1, 1, 16, 576).to(torch.bfloat16)
cache = torch.randn(2, 16, 1, 576).to(torch.bfloat16)
bt = torch.tensor([[0, 1]], dtype=torch.int32)
sl = torch.tensor([20], dtype=torch.int32)
f = torch.compile(lambda q, c, b, s: mla.mla_decode(q, c, b, s, 0.1, True), fullgraph=True,
                  backend="aot_eager")
o, l = f(q, cache, bt, sl)
w, wl = mla.mla_decode(q, cache, bt, sl, 0.1, True)
print("same", torch.equal(o, w) and torch.equal(l, wl))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "same True" in r.stdout


def test_torch_ext_checks_without_a_gpu():
    # mla._torch_ext (when built for this torch): arguments of another framework go back
    # to the generic path (NotImplemented); bad arguments raise mla's errors by name.
    from mla import _call

    _call.torch_module()
    te = _call._torch_ext_module
    if not te:
        pytest.skip("TORCH EXT TESTS NOT RUN: mla._torch_ext is not built for this torch "
                    "(scripts/build_torch_ext.sh)")
    q = torch.zeros(1, 1, 16, 576, dtype=torch.bfloat16)
    kv = torch.zeros(2, 16, 1, 576, dtype=torch.bfloat16)
    bt = torch.zeros(1, 2, dtype=torch.int32)
    sl = torch.ones(1, dtype=torch.int32)
    assert te.decode(q, kv, -1, bt.numpy(), sl, 0.1, True, False, False) is NotImplemented
    with pytest.raises(mla.ShapeError, match="q: a CUDA tensor"):
        te.decode(q, kv, -1, bt, sl, 0.1, True, False, False)  # CPU q: not this path's
    with pytest.raises(mla.OutOfRangeError, match="kv_format"):
        te.decode(q, kv, 2**40, bt, sl, 0.1, True, False, False)
    with pytest.raises(mla.DTypeError, match="block_table: dtype ComplexFloat"):
        te.decode(q, kv, -1, bt.to(torch.complex64), sl, 0.1, True, False, False)
    assert te.sparse_decode(q, kv, -1, bt.numpy(), None, 0.1, False, 0) is NotImplemented
    with pytest.raises(mla.OutOfRangeError, match="invalid_from"):
        te.sparse_decode(q, kv, -1, bt, None, 0.1, False, -5)
