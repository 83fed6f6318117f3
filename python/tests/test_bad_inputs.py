"""The bad-input table of issue 20 through the Python API and raw ctypes (CPU):
each repro of the campaign is a test. A crash-prone repro runs in its own
process, so a regression shows as a failed test, not a dead test session.

Python ints and other values that go into C structs (configs, policies, plan
workloads, transfer requests) are checked by mla._lib.c_value: never wrapped to
fit a C type, and errors name the argument's full path and the value as given."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mla

from conftest import make_paged_problem

SCALE = 0.07


def run_isolated(code: str) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with this session's mla; returns the result."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)


def indexer_side(rng, num_pages, B, s_q):
    icache = mla.empty_indexer_cache(num_pages)
    keys = (rng.standard_normal((num_pages * 64, 128)) * 2).astype(np.float32)
    mla.append_indexer_keys(keys, np.arange(num_pages * 64, dtype=np.int64), icache)
    q8, wf = mla.quantize_indexer_query(
        rng.standard_normal((B, s_q, 64, 128)).astype(np.float32),
        rng.standard_normal((B, s_q, 64)).astype(np.float32))
    return icache, q8, wf


# ---- sizes ------------------------------------------------------------------------------


def test_dsa_decode_max_seqlen_2_pow_62_is_an_error_not_a_heap_overflow():
    r = run_isolated("""
        import numpy as np, mla, sys
        sys.path.insert(0, %r)
        from conftest import make_paged_problem
        rng = np.random.default_rng(0)
        q, cache, bt, sl = make_paged_problem(rng, 2, 1, 16, 64, [70, 100])
        icache = mla.empty_indexer_cache(cache.shape[0])
        keys = np.ones((cache.shape[0] * 64, 128), np.float32)
        mla.append_indexer_keys(keys, np.arange(cache.shape[0] * 64, dtype=np.int64), icache)
        q8, wf = mla.quantize_indexer_query(np.ones((2, 1, 64, 128), np.float32),
                                            np.ones((2, 1, 64), np.float32))
        pol = mla.DsaPolicy(topk=64, path="sparse")
        try:
            mla.dsa_decode(q, cache, bt, sl, 2**62, q8, wf, icache, 0.07, policy=pol,
                           workspace=np.zeros(8704, np.uint8))
        except mla.InvalidValueError as e:
            print("ERR", e)
    """ % os.path.dirname(__file__))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ERR" in r.stdout and "max_seqlen = 4611686018427387904" in r.stdout, r.stdout


def test_c_abi_view_extent_overflow_is_an_error():
    # Raw ctypes, in its own process: this crashed before the extents were checked.
    r = run_isolated("""
        import ctypes, numpy as np, mla
        lib = ctypes.CDLL(mla.library_path())
        class T(ctypes.Structure):
            _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32),
                        ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                        ("ndim", ctypes.c_int32), ("shape", ctypes.c_int64 * 6),
                        ("strides", ctypes.c_int64 * 6)]
        buf = np.zeros(4096, np.float32)
        lo = T(buf.ctypes.data, 0, 1, 0, 2)
        lo.shape[0], lo.shape[1], lo.strides[0], lo.strides[1] = 2**62, 64, 64, 1
        ix = T(buf.ctypes.data, 6, 1, 0, 2)
        ix.shape[0], ix.shape[1], ix.strides[0], ix.strides[1] = 2**62, 64, 64, 1
        f = lib.mla_topk_indices
        f.restype = ctypes.c_int32
        rc = f(ctypes.byref(lo), None, 64, ctypes.byref(ix), None, 64, 1, ctypes.c_int64(-1), None)
        lib.mla_last_error_message.restype = ctypes.c_char_p
        print("RC", rc, lib.mla_last_error_message().decode())
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "RC 1 " in r.stdout and "logits" in r.stdout and "overflows" in r.stdout, r.stdout


def test_layer_weight_shapes_overflow():
    cfg = mla.LayerConfig.small_test()
    cfg.heads = 2**31 - 1
    cfg.d_nope = 2**31 - 1
    with pytest.raises(mla.InvalidValueError, match="2147483647"):
        mla.layer_weight_shapes(cfg)


def test_block_sparse_forced_block_sum_overflow():
    p = mla.BlockSparseParams(initial_blocks=2**31 - 1, local_blocks=1)
    with pytest.raises(mla.InvalidValueError, match="initial_blocks"):
        mla.validate_block_sparse_params(p)


def test_calibration_h_q_is_not_wrapped():
    cal = ('{"gpu": "h200", "entries": [{"kernel": "decode", "format": "bf16", '
           '"h_q": 4294967304, "fraction_of_ceiling": 0.5}]}')
    with pytest.raises(mla.InvalidValueError, match="h_q = 4294967304"):
        mla.plan_json(calibration=cal)


def test_min_weight_shards_never_negative():
    try:
        plan = mla.make_plan(mem_util=1e-300)
    except mla.InvalidValueError as e:
        assert "mem_util" in str(e)
    else:
        assert plan["min_weight_shards"] >= 1


def test_batch_past_int64_is_rejected_not_wrapped():
    with pytest.raises(mla.OutOfRangeError, match=r"batch = 18446744073709551632 does not fit"):
        mla.make_plan(batch=2**64 + 16)


def test_heads_past_int32_is_rejected_not_wrapped():
    cfg = mla.LayerConfig.small_test()
    cfg.heads = 2**32 + 8
    with pytest.raises(mla.OutOfRangeError, match=r"config\.heads = 4294967304 does not fit"):
        mla.layer_weight_shapes(cfg)


def test_rope_field_past_int64_names_config_rope():
    cfg = mla.LayerConfig.small_test()
    cfg.rope.original_max_position = 2**63
    with pytest.raises(mla.OutOfRangeError, match=r"config\.rope\.original_max_position = "):
        mla.layer_weight_shapes(cfg)


@pytest.mark.parametrize("k", [2**31, 2**31 - 64, 8256])
def test_topk_k_too_large_fails_before_any_allocation(monkeypatch, k):
    from mla import _call

    def no_alloc(like, shape, dtype):
        raise AssertionError(f"allocated {shape} {dtype} before checking k")

    monkeypatch.setattr(_call, "empty", no_alloc)
    with pytest.raises(mla.MlaError, match=f"k = {k} "):
        mla.topk_indices(np.zeros((1, 128), np.float32), k=k)


# ---- overlapping outputs ----------------------------------------------------------------------


def decode_problem(rng, lengths=(20, 30), s_q=1):
    return make_paged_problem(rng, len(lengths), s_q, 16, 16, list(lengths))


def test_stride_zero_out_is_rejected(rng):
    q, cache, bt, sl = decode_problem(rng)
    base = np.zeros((2, 1, 1, 512), np.float32)
    out = np.lib.stride_tricks.as_strided(base, (2, 1, 16, 512), (2048, 2048, 0, 4),
                                          writeable=True)
    with pytest.raises(mla.StrideError, match="out"):
        mla.mla_decode(q, cache, bt, sl, SCALE, out=out)


def test_out_aliasing_the_kv_cache_is_rejected(rng):
    q, cache, bt, sl = decode_problem(rng)
    out = cache.reshape(-1)[:2 * 16 * 1024].view(np.float32).reshape(2, 1, 16, 512)
    with pytest.raises(mla.InvalidValueError, match="overlaps input kv"):
        mla.mla_decode(q, cache, bt, sl, SCALE, out=out)


def test_lse_aliasing_out_is_rejected(rng):
    q, cache, bt, sl = decode_problem(rng)
    out = np.zeros((2, 1, 16, 512), np.float32)
    lse = out.reshape(-1)[:32].reshape(2, 16, 1)
    with pytest.raises(mla.InvalidValueError, match="overlaps output lse|overlaps output out"):
        mla.mla_decode(q, cache, bt, sl, SCALE, out=out, lse=lse)


# ---- empty batches and rows ----------------------------------------------------------------------


def test_decode_empty_batch_and_empty_step(rng):
    q, cache, bt, sl = decode_problem(rng)
    out, lse = mla.mla_decode(q[:0], cache, bt[:0], sl[:0], SCALE)
    assert out.shape == (0, 1, 16, 512) and lse.shape == (0, 16, 1)
    out, lse = mla.mla_decode(q[:, :0], cache, bt, sl, SCALE)
    assert out.shape == (2, 0, 16, 512) and lse.shape == (2, 16, 0)


def test_empty_arrays_with_zero_strides(rng):
    q, cache, bt, sl = decode_problem(rng)
    z = lambda a: np.lib.stride_tricks.as_strided(a, a.shape, (0,) * a.ndim, writeable=True)
    out = z(np.zeros((0, 1, 16, 512), np.float32))
    lse = z(np.zeros((0, 16, 1), np.float32))
    mla.mla_decode(z(q[:0]), cache, z(bt[:0]), z(sl[:0]), SCALE, out=out, lse=lse)


def test_sparse_and_dsa_empty_batch(rng):
    q, cache, bt, sl = make_paged_problem(rng, 2, 1, 16, 64, [70, 100])
    out, lse = mla.sparse_decode(q[:0], cache, np.zeros((0, 1, 64), np.int32), SCALE)
    assert out.shape == (0, 1, 16, 512)
    icache, q8, wf = indexer_side(rng, cache.shape[0], 2, 1)
    pol = mla.DsaPolicy(topk=64, path="sparse")
    assert mla.dsa_decode_workspace_size(q[:0], cache, bt[:0], sl[:0], 1 << 20, q8[:0], wf[:0],
                                         icache, SCALE, policy=pol) == 0
    out, lse = mla.dsa_decode(q[:0], cache, bt[:0], sl[:0], 1 << 20, q8[:0], wf[:0], icache,
                              SCALE, policy=pol)
    assert out.shape == (0, 1, 16, 512) and lse.shape == (0, 16, 1)


def test_topk_zero_rows_and_zero_columns():
    assert mla.topk_indices(np.zeros((0, 128), np.float32), k=64).shape == (0, 64)
    idx = mla.topk_indices(np.zeros((3, 0), np.float32), k=64)
    assert idx.shape == (3, 64) and (idx == -1).all()


def test_empty_tokens_in_cache_ops(rng):
    _, cache, _, _ = decode_problem(rng)
    mla.append_kv(np.zeros((0, 512), np.float32), np.zeros((0, 64), np.float32),
                  np.zeros(0, np.int64), cache)
    c_kv, k_rope = mla.read_kv(cache, np.zeros(0, np.int64))
    assert c_kv.shape == (0, 512) and k_rope.shape == (0, 64)


def _empty_calls(rng):
    q, cache, bt, sl = make_paged_problem(rng, 2, 1, 16, 64, [70, 100])
    cfg = mla.LayerConfig.small_test()
    w = mla.init_layer_weights(cfg, seed=1)
    f32 = lambda *shape: np.zeros(shape, np.float32)  # noqa: E731
    return {
        # (the call, the shape of each output it must give)
        "layer_forward B = 0": (lambda: mla.layer_forward(
            cfg, w, np.zeros((0, 1, cfg.hidden)), mla.empty_kv_cache(4, 64),
            np.zeros((0, 1), np.int32), np.ones(0, np.int32)), [(0, 1, cfg.hidden)]),
        "layer_forward s_q = 0": (lambda: mla.layer_forward(
            cfg, w, np.zeros((1, 0, cfg.hidden)), mla.empty_kv_cache(4, 64),
            np.zeros((1, 1), np.int32), np.zeros(1, np.int32)), [(1, 0, cfg.hidden)]),
        "apply_rope T = 0": (lambda: mla.apply_rope(f32(0, 4, 64), np.zeros(0, np.int64)),
                             [(0, 4, 64)]),
        "block_sparse_select B = 0": (lambda: mla.block_sparse_select(q[:0], cache, bt[:0], sl[:0]),
                                      [(0, 1, mla.block_sparse_capacity()), (0, 1)]),
        "mha_prefill T = 0": (lambda: mla.mha_prefill(
            f32(0, 2, 24), f32(0, 2, 24), f32(0, 2, 16), np.zeros(1, np.int32),
            np.zeros(1, np.int32), SCALE), [(0, 2, 16), (2, 0)]),
        "decompress_kv N = 0": (lambda: mla.decompress_kv(f32(0, 512), f32(2, 128, 512),
                                                          f32(2, 128, 512)),
                                [(0, 2, 128), (0, 2, 128)]),
        "sparse_prefill s_q = 0": (lambda: mla.sparse_prefill(f32(0, 16, 576), f32(10, 576),
                                                              np.zeros((0, 64), np.int32), SCALE),
                                   [(0, 16, 512), (0, 16)]),
        "quantize_indexer_query B = 0": (lambda: mla.quantize_indexer_query(f32(0, 1, 64, 128),
                                                                            f32(0, 1, 64)),
                                         [(0, 1, 64, 128), (0, 1, 64)]),
    }


@pytest.mark.parametrize("what", sorted(_empty_calls(np.random.default_rng(0))))
def test_empty_batches_are_no_ops_on_every_path(rng, what):
    call, shapes = _empty_calls(rng)[what]
    got = call()
    got = got if isinstance(got, tuple) else (got,)
    assert [tuple(g.shape) for g in got] == shapes


def test_partial_overlap_rejected_on_the_struct_paths(rng):
    x = rng.standard_normal((5, 4, 64)).astype(np.float32)
    shifted = np.lib.stride_tricks.as_strided(x.reshape(-1)[64:], x.shape, x.strides,
                                              writeable=True)
    with pytest.raises(mla.InvalidValueError, match="out .* overlaps input x"):
        mla.apply_rope(x, np.arange(5), out=shifted)
    np.testing.assert_array_equal(mla.apply_rope(x.copy(), np.arange(5), out=None),
                                  mla.apply_rope(x, np.arange(5), out=x))  # in place: documented
    q, cache, bt, sl = make_paged_problem(rng, 2, 1, 16, 64, [70, 100])
    icache, q8, wf = indexer_side(rng, cache.shape[0], 2, 1)
    out = np.zeros((2, 1, 16, 512), np.float32)
    with pytest.raises(mla.InvalidValueError, match="overlaps"):
        mla.dsa_decode(q, cache, bt, sl, 128, q8, wf, icache, SCALE, out=out,
                       lse=out.reshape(-1)[:32].reshape(2, 16, 1),
                       policy=mla.DsaPolicy(topk=64, path="sparse"))


# ---- inputs are only read --------------------------------------------------------------------------


def read_only(a):
    a = a.copy()
    a.setflags(write=False)
    return a


def test_read_only_kv_cache_in_decode(rng):
    q, cache, bt, sl = decode_problem(rng)
    mla.mla_decode(q, read_only(cache), bt, sl, SCALE)


def test_read_only_kv_cache_in_read_kv(rng):
    _, cache, _, _ = decode_problem(rng)
    mla.read_kv(read_only(cache), np.arange(4, dtype=np.int64))


def test_read_only_layer_weights(rng):
    cfg = mla.LayerConfig.small_test()
    w = mla.init_layer_weights(cfg, seed=1)
    hidden = rng.standard_normal((1, 1, cfg.hidden))
    args = (mla.empty_kv_cache(4, 64), np.zeros((1, 1), np.int32), np.ones(1, np.int32))
    want = mla.layer_forward(cfg, w, hidden, *args)
    got = mla.layer_forward(cfg, {k: read_only(v) for k, v in w.items()}, read_only(hidden),
                            *args)
    np.testing.assert_array_equal(got, want)


def test_read_only_kv_cache_in_dsa_decode_and_block_sparse_select(rng):
    q, cache, bt, sl = make_paged_problem(rng, 2, 1, 16, 64, [70, 100])
    icache, q8, wf = indexer_side(rng, cache.shape[0], 2, 1)
    pol = mla.DsaPolicy(topk=64, path="sparse")
    want = mla.dsa_decode(q, cache, bt, sl, 128, q8, wf, icache, SCALE, policy=pol)
    got = mla.dsa_decode(read_only(q), read_only(cache), read_only(bt), read_only(sl), 128,
                         read_only(q8), read_only(wf), read_only(icache), SCALE, policy=pol)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    want = mla.block_sparse_select(q, cache, bt, sl)
    got = mla.block_sparse_select(read_only(q), read_only(cache), read_only(bt), read_only(sl))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_layer_forward_needs_a_writable_cache(rng):
    cfg = mla.LayerConfig.small_test()
    w = mla.init_layer_weights(cfg, seed=1)
    with pytest.raises(mla.MlaError, match="kv"):
        mla.layer_forward(cfg, w, np.zeros((1, 1, cfg.hidden)),
                          read_only(mla.empty_kv_cache(4, 64)), np.zeros((1, 1), np.int32),
                          np.ones(1, np.int32))


# ---- non-finite values ------------------------------------------------------------------------------


def test_fp8_cache_inf_saturates_only_itself(rng):
    cache = mla.empty_kv_cache(1, 16, "fp8_ds_mla")
    c_kv = (rng.uniform(-0.1, 0.1, (1, 512))).astype(np.float32)
    c_kv[0, 5] = np.inf
    c_kv[0, 130] = np.nan
    mla.append_kv(c_kv, np.zeros((1, 64), np.float32), np.zeros(1, np.int64), cache)
    back, _ = mla.read_kv(cache, np.zeros(1, np.int64))
    assert np.isnan(back[0, 130])
    amax = np.abs(np.delete(c_kv[0, :128], 5)).max()
    assert back[0, 5] > 0 and back[0, 5] <= 448 * 2 * amax / 448 * 1.0001 + 1e-30
    mask = np.ones(512, bool)
    mask[[5, 130]] = False
    assert np.allclose(back[0, mask], c_kv[0, mask], atol=amax / 16)


def test_nan_indexer_key_is_never_selected():
    icache = mla.empty_indexer_cache(1)
    keys = np.tile(np.arange(64, dtype=np.float32)[:, None] * 0.01, (1, 128))
    keys[3] = 1.0  # would score highest
    keys[3, 7] = np.nan
    mla.append_indexer_keys(keys, np.arange(64, dtype=np.int64), icache)
    q8, wf = mla.quantize_indexer_query(np.ones((1, 1, 64, 128), np.float32),
                                        np.ones((1, 1, 64), np.float32))
    logits = mla.indexer_logits_decode(q8, wf, icache, np.zeros((1, 1), np.int32),
                                       np.array([64], np.int32), max_len=64)
    assert np.isnan(logits[0, 0, 3])
    idx = mla.topk_indices(logits.reshape(1, 64), k=64)
    assert 3 not in idx[0] and idx[0, -1] == -1


# ---- wrong types and names ---------------------------------------------------------------------------


def test_non_array_argument_is_a_typed_error_naming_it(rng):
    _, cache, bt, sl = decode_problem(rng)
    with pytest.raises(mla.DTypeError, match="q: str is not an array"):
        mla.mla_decode("not an array", cache, bt, sl, SCALE)


def _small_layer(**fields):
    cfg = mla.LayerConfig.small_test()
    for k, v in fields.items():
        setattr(cfg, k, v)
    return cfg


def _rope(**fields):
    return mla.RopeConfig(**fields)


def _side(**fields):
    return mla.TransferSide(**dict(dict(pages=[0], num_pages=4, page_size=16), **fields))


# what -> (the call, what its error must say: the argument's full path and the value given)
WRONG_TYPES = {
    "policy": (lambda: mla.dsa_decode_path(100, "bogus"), r"policy = 'bogus' is a str"),
    "policy.topk": (lambda: mla.dsa_decode_path(100, mla.DsaPolicy(topk="x")),
                    r"policy\.topk = 'x' is not an integer"),
    "policy.dense_below": (lambda: mla.dsa_decode_path(100, mla.DsaPolicy(dense_below=2**63)),
                           r"policy\.dense_below = 9223372036854775808 does not fit"),
    "max_seqlen": (lambda: mla.dsa_decode_path(1.5), r"max_seqlen = 1\.5 is not an integer"),
    "config": (lambda: mla.layer_weight_shapes("cfg"), r"config = 'cfg' is a str"),
    "config.rope": (lambda: mla.layer_weight_shapes(mla.LayerConfig(rope=None)),
                    r"config\.rope = None is a NoneType, not a RopeConfig"),
    "config.norm_eps": (lambda: mla.layer_weight_shapes(_small_layer(norm_eps="tiny")),
                        r"config\.norm_eps = 'tiny' is not a number"),
    "rope config": (lambda: mla.rope_attention_factor(_rope(factor=None)),
                    r"config\.factor = None is not a number"),
    "rope config type": (lambda: mla.rope_inv_freq({"dim": 64}),
                         r"config = \{'dim': 64\} is a dict"),
    "seed": (lambda: mla.init_layer_weights(_small_layer(), seed=-1),
             r"seed = -1 does not fit in \[0, 18446744073709551615\]"),
    "weights": (lambda: mla.layer_forward(_small_layer(), [1], np.zeros((1, 1, 256)),
                                          mla.empty_kv_cache(4, 64), np.zeros((1, 1), np.int32),
                                          np.ones(1, np.int32)), r"weights = \[1\] is a list"),
    "params.stride": (lambda: mla.validate_block_sparse_params({"stride": 2**40}),
                      r"params\.stride = 1099511627776 does not fit"),
    "softmax_scale": (lambda: mla.sparse_decode(np.zeros((1, 1, 16, 576), np.float32),
                                                mla.empty_kv_cache(1, 64),
                                                np.zeros((1, 1, 64), np.int32), "x"),
                      r"softmax_scale = 'x' is not a number"),
    "dsa softmax_scale": (lambda: mla.dsa_decode(*[None] * 4, 128, *[None] * 3, "x"),
                          r"softmax_scale = 'x' is not a number"),
    "plan gpu": (lambda: mla.make_plan(gpu=200), r"gpu = 200 is not a string"),
    "dense threshold heads": (lambda: mla.dsa_dense_threshold(heads=2**31),
                              r"heads = 2147483648 does not fit"),
    "request": (lambda: mla.plan_transfer("x"), r"request = 'x' is a str"),
    "request.num_tokens": (lambda: mla.plan_transfer(src_latent=_side(), dst_latent=_side(),
                                                     num_tokens=2**64),
                           r"num_tokens = 18446744073709551616 does not fit"),
    "src_latent": (lambda: mla.plan_transfer(src_latent=(1, 2), dst_latent=_side(),
                                             num_tokens=1),
                   r"src_latent = \(1, 2\) is a tuple, not a TransferSide"),
    "dst_latent.page_size": (lambda: mla.plan_transfer(src_latent=_side(),
                                                       dst_latent=_side(page_size="16"),
                                                       num_tokens=1),
                             r"dst_latent\.page_size = '16' is not an integer"),
    "who": (lambda: mla.exchange_bytes_file("rank0", "/nonexistent", b"x"),
            r"who = 'rank0' is a str, not a LaunchInfo"),
    "who.rank": (lambda: mla.exchange_bytes_file(mla.LaunchInfo(rank=2**31), "/nonexistent",
                                                 b"x"),
                 r"who\.rank = 2147483648 does not fit"),
    "kv_format float": (lambda: mla.mla_decode(*_decode_args(), kv_format=3.5),
                        r"kv_format = 3\.5 is not one of \['bf16', 'fp8_ds_mla', 'fp8_e4m3'\]"),
    "kv_format list": (lambda: mla.mla_decode(*_decode_args(), kv_format=[1]),
                       r"kv_format = \[1\] is not one of"),
    "causal": (lambda: mla.mla_decode(*_decode_args(), causal="no"),
               r"causal = 'no' is not a bool"),
    "batch_invariant": (lambda: mla.mla_decode(*_decode_args(), batch_invariant=2),
                        r"batch_invariant = 2 is not a bool"),
    "mha causal": (lambda: mla.mha_prefill(*[np.zeros((1, 1, 8), np.float32)] * 3,
                                           np.array([0, 1], np.int32), np.array([0, 1], np.int32),
                                           SCALE, causal=None), r"causal = None is not a bool"),
    "out_dtype": (lambda: mla.mla_decode(*_decode_args(), out_dtype="f17"),
                  r"out_dtype = 'f17' is not one of"),
    "merge out_dtype": (lambda: mla.merge_attn_partials(np.zeros((2, 1, 512), np.float32),
                                                        np.zeros((2, 1), np.float32),
                                                        out_dtype="x"),
                        r"out_dtype = 'x' is not one of"),
    "stream": (lambda: mla.mla_decode(*_decode_args(), stream="x"),
               r"stream = 'x' is not a CUDA stream"),
    "like": (lambda: mla.empty_kv_cache(4, 16, like="x"), r"like: str is not an array"),
    "attention": (lambda: mla.layer_forward(_small_layer(), {}, np.zeros((1, 1, 256)),
                                            mla.empty_kv_cache(4, 64), np.zeros((1, 1), np.int32),
                                            np.ones(1, np.int32), attention=["x"]),
                  r"attention = \['x'\] is not one of"),
    "layout": (lambda: mla.apply_rope(np.zeros((1, 1, 64), np.float32), np.zeros(1, np.int64),
                                      layout=3), r"layout = 3 is not one of"),
    "policy.path": (lambda: mla.dsa_decode_path(100, mla.DsaPolicy(path=["x"])),
                    r"policy\.path = \['x'\] is not one of"),
    "order": (lambda: mla.plan_transfer(src_latent=_side(), dst_latent=_side(), num_tokens=1,
                                        order={}), r"order = \{\} is not one of"),
    "plan": (lambda: mla.execute_copy_plan("x", [], []), r"plan = 'x' is a str"),
    "plan[0]": (lambda: mla.execute_copy_plan([(0, 0, 8)], [], []), r"plan\[0\] = \(0, 0, 8\)"),
    "env": (lambda: mla.launch_info_from_env(5), r"env = 5 is a int, not a Mapping"),
}


def _decode_args():
    q, cache, bt, sl = make_paged_problem(np.random.default_rng(3), 2, 1, 16, 16, [20, 30])
    return q, cache, bt, sl, SCALE


@pytest.mark.parametrize("what", sorted(WRONG_TYPES))
def test_wrong_type_is_a_typed_error_naming_the_argument(what):
    call, message = WRONG_TYPES[what]
    with pytest.raises(mla.MlaError, match=message):
        call()


def test_dsa_errors_name_index_block_table(rng):
    q, cache, bt, sl = make_paged_problem(rng, 2, 1, 16, 16, [70, 100])
    icache, q8, wf = indexer_side(rng, 4, 2, 1)
    ibt = np.array([[0, 1], [2, 1000]], np.int32)
    pol = mla.DsaPolicy(topk=64, path="sparse")
    with pytest.raises(mla.OutOfRangeError, match=r"index_block_table\[1\]\[1\] = 1000"):
        mla.dsa_decode(q, cache, bt, sl, 128, q8, wf, icache, SCALE, index_block_table=ibt,
                       policy=pol)


def test_layer_errors_name_config_rope_factor():
    cfg = mla.LayerConfig.small_test()
    cfg.rope.factor = -1.0
    with pytest.raises(mla.InvalidValueError, match=r"config\.rope\.factor = -1"):
        mla.layer_weight_shapes(cfg)


# ---- the checked mode switch (its effect on CUDA tensors: test_bad_inputs_gpu.py) -----------


def test_checked_mode_is_per_thread_and_restored():
    import threading

    assert not mla.check_device_values()
    seen = []
    with mla.checked_device_values():
        assert mla.check_device_values()
        t = threading.Thread(target=lambda: seen.append(mla.check_device_values()))
        t.start()
        t.join()
        with mla.checked_device_values(False):
            assert not mla.check_device_values()
        assert mla.check_device_values()
    assert not mla.check_device_values() and seen == [False]


# ---- sizes the Python helpers allocate from the caller's numbers ------------------------------

ALLOCATION_SIZES = {
    "kv pages overflow": (lambda: mla.empty_kv_cache(2**62, 64),
                          mla.OutOfRangeError, r"num_pages = 4611686018427387904, page_size = 64"),
    "kv negative": (lambda: mla.empty_kv_cache(-1, 64), mla.InvalidValueError,
                    r"num_pages = -1 is negative"),
    "kv page_size type": (lambda: mla.empty_kv_cache(4, "x"), mla.InvalidValueError,
                          r"page_size = 'x' is not an integer"),
    "kv past int64": (lambda: mla.empty_kv_cache(4, 2**64 + 16, "fp8_ds_mla"),
                      mla.OutOfRangeError, r"page_size = 18446744073709551632 does not fit"),
    "indexer pages": (lambda: mla.empty_indexer_cache(2**62), mla.OutOfRangeError,
                      r"num_pages = 4611686018427387904: the array"),
    "logits max_len": (lambda: mla.indexer_logits_decode(
        np.zeros((1, 1, 64, 128), np.uint8), np.zeros((1, 1, 64), np.float32),
        mla.empty_indexer_cache(1), np.zeros((1, 1), np.int32), np.ones(1, np.int32),
        max_len=2**62), mla.OutOfRangeError, r"max_len = 4611686018427387904: the array"),
    "layer_bases num_layers": (lambda: mla.layer_bases(np.zeros(64, np.uint8), 8, 2**31),
                               mla.OutOfRangeError, r"num_layers = 2147483648 does not fit"),
    "transfer_cache_name": (lambda: mla.transfer_cache_name(2**40), mla.OutOfRangeError,
                            r"cache = 1099511627776 does not fit"),
}


@pytest.mark.parametrize("what", sorted(ALLOCATION_SIZES))
def test_sizes_from_the_caller_are_checked_before_allocating(monkeypatch, what):
    call, cls, message = ALLOCATION_SIZES[what]
    from mla import _call

    real_empty = _call.empty

    def guarded(like, shape, dtype):
        n = 1
        for d in shape:
            n *= d
        assert n < 2**40, f"asked the allocator for {shape} {dtype}"
        return real_empty(like, shape, dtype)

    monkeypatch.setattr(_call, "empty", guarded)
    with pytest.raises(cls, match=message):
        call()
