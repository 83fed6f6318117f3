"""Plan reuse (mla.decode_plan / mla.sparse_decode_plan, mla/decode.hpp DecodePlan):
same results as calls without a plan, misuse named; the FlashMLA newer-API object
plans on its first call and reuses the plan. CPU here; test_engines_gpu.py and the
GPU tests cover the kernels."""

import numpy as np
import pytest

import mla
from mla import flash_mla_compat as fm

from conftest import BF16, make_paged_problem

SCALE = 0.1


def test_plan_reused_by_layers_gives_the_same_results(rng):
    lengths = [70, 0, 1, 130]
    q, cache, bt, sl = make_paged_problem(rng, 4, 2, 16, 64, lengths, q_dtype=BF16)
    plan = mla.decode_plan(q, cache, bt, sl, SCALE)
    assert (plan.batch, plan.s_q, plan.h_q, plan.sparse) == (4, 2, 16, False)
    assert not plan.batch_invariant and "dense" in repr(plan)
    for layer in range(3):  # other q and cache values, the same lengths
        q_l, cache_l, _, _ = make_paged_problem(rng, 4, 2, 16, 64, lengths, q_dtype=BF16)
        out, lse = mla.mla_decode(q_l, cache_l, bt, sl, SCALE, plan=plan)
        w_out, w_lse = mla.mla_decode(q_l, cache_l, bt, sl, SCALE)
        assert np.array_equal(out.view(np.uint16), w_out.view(np.uint16)), layer
        assert np.array_equal(lse, w_lse), layer


def test_plan_for_other_shapes_or_mode_is_refused(rng):
    q, cache, bt, sl = make_paged_problem(rng, 3, 2, 16, 64, [70, 5, 9], q_dtype=BF16)
    plan = mla.decode_plan(q, cache, bt, sl, SCALE)
    with pytest.raises(mla.InvalidValueError, match=r"plan.*B 3.*B 2"):
        mla.mla_decode(q[:2], cache, bt[:2], sl[:2], SCALE, plan=plan)
    with pytest.raises(mla.InvalidValueError, match=r"plan.*s_q 2.*s_q 1"):
        mla.mla_decode(q[:, :1], cache, bt, sl, SCALE, plan=plan)
    with pytest.raises(mla.InvalidValueError, match="batch_invariant"):
        mla.mla_decode(q, cache, bt, sl, SCALE, batch_invariant=True, plan=plan)
    idx = np.full((3, 2, 64), -1, np.int32)
    sparse = mla.sparse_decode_plan(q, cache, idx, SCALE)
    assert sparse.sparse and sparse.topk == 64
    with pytest.raises(mla.InvalidValueError, match="sparse"):
        mla.mla_decode(q, cache, bt, sl, SCALE, plan=sparse)
    with pytest.raises(mla.InvalidValueError, match="decode_plan"):
        mla.sparse_decode(q, cache, idx, SCALE, plan=plan)


def test_sparse_plan_reused_gives_the_same_results(rng):
    B, s_q, h, page, topk = 2, 2, 16, 16, 64
    q, cache, _, _ = make_paged_problem(rng, B, s_q, h, page, [40, 40], q_dtype=BF16)
    total = cache.shape[0] * page
    idx = rng.integers(0, total, (B, s_q, topk)).astype(np.int32)
    idx[0, 1, 5:] = -1
    plan = mla.sparse_decode_plan(q, cache, idx, SCALE)
    for _layer in range(2):
        q_l = rng.standard_normal(q.shape).astype(BF16)
        out, lse = mla.sparse_decode(q_l, cache, idx, SCALE, plan=plan)
        w_out, w_lse = mla.sparse_decode(q_l, cache, idx, SCALE)
        assert np.array_equal(out.view(np.uint16), w_out.view(np.uint16))
        assert np.array_equal(lse, w_lse)


def test_flashmla_newer_api_object_plans_once_and_reuses(rng):
    """FlashMLA's newer call sequence (vLLM): one sched object per step, every layer
    passes it; the first call schedules (here an mla.DecodePlan kept on the object)."""
    lengths = [100, 3, 64]
    q, cache, bt, sl = make_paged_problem(rng, 3, 1, 16, 64, lengths, q_dtype=BF16)
    sched, _ = fm.get_mla_metadata(sl, 16, 1, is_fp8_kvcache=False)
    assert sched.plan is None and not sched.have_initialized
    first = None
    for layer in range(3):
        q_l, cache_l, _, _ = make_paged_problem(rng, 3, 1, 16, 64, lengths, q_dtype=BF16)
        o, lse = fm.flash_mla_with_kvcache(q_l, cache_l, bt, sl, 512, sched, None,
                                           softmax_scale=SCALE, causal=True)
        if first is None:
            first = sched.plan
        assert sched.have_initialized and sched.plan is first, layer  # reused, not remade
        w_out, w_lse = mla.mla_decode(q_l, cache_l, bt, sl, SCALE)
        assert np.array_equal(o.view(np.uint16), w_out.view(np.uint16))
        assert np.array_equal(lse, np.where(np.isneginf(w_lse), np.inf, w_lse))
    # Another shape with the same object: a new plan (FlashMLA would refuse the call).
    o, _ = fm.flash_mla_with_kvcache(q[:2], cache, bt[:2], sl[:2], 512, sched, None, SCALE, True)
    assert sched.plan is not first and sched.plan.batch == 2
    assert np.array_equal(o.view(np.uint16),
                          mla.mla_decode(q[:2], cache, bt[:2], sl[:2], SCALE)[0].view(np.uint16))
