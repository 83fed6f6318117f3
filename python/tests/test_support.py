"""mla.is_supported: the capability probe over mla_is_supported."""

import pytest

import mla


def test_cpu_runs_every_family():
    r = mla.is_supported("cpu")
    assert r and r.device == "cpu"
    assert set(r.families) == set(mla.support.FAMILIES)
    assert all(v == "" for v in r.reasons.values())
    assert mla.is_supported(-1, "decode") is True


def test_cuda_answer_names_its_reason():
    r = mla.is_supported(0)
    assert r.device == "cuda:0"
    if not mla.built_with_cuda():
        assert not r and "built without the CUDA kernels" in r.reasons["decode"]
    if not r:  # e.g. CI: no GPU, no driver -> said plainly
        for why in r.reasons.values():
            assert why and "driver version is insufficient" not in why
    assert mla.is_supported("cuda:0", "topk") == r["topk"]
    assert mla.is_supported(999, "decode") is False


def test_bad_arguments():
    with pytest.raises(mla.InvalidValueError, match="family = 'attention'"):
        mla.is_supported("cpu", "attention")
    with pytest.raises(mla.InvalidValueError, match="device = 'tpu'"):
        mla.is_supported("tpu")
