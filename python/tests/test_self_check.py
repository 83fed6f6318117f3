"""mla.self_check and `python -m mla check` (mla_self_check): the verdict agrees with what the
capability probe says this machine is; without a GPU (CI) it is 77 and says "no CUDA GPU"."""

import os
import subprocess
import sys

import pytest

import mla


def expected_status() -> int:
    """What the self check must answer here, from the capability probe (mla.is_supported)."""
    r = mla.is_supported(0)
    if r:
        return mla.selfcheck.PASSED
    if not mla.built_with_cuda() or r.reasons["decode"].startswith(("no CUDA GPU", "no usable CUDA GPU")):
        return mla.selfcheck.NO_GPU
    return mla.selfcheck.FAILED  # a GPU the sm_90a kernels cannot run on


def test_verdict_matches_this_machine():
    r = mla.self_check(seed=1)
    assert r.status == expected_status(), r.text
    lines = [r.header] + [c.line for c in r.checks] + ([r.summary] if r.summary else [])
    assert r.text == "".join(line + "\n" for line in lines)
    if r.status == 77:  # CI: no GPU, or a CPU-only build
        assert not r and not r.checks and not r.summary
        assert "no CUDA GPU" in r.header
        if not mla.built_with_cuda():
            assert "no CUDA GPU support in this build" in r.header
    elif r.status == 0:
        assert r and len(r.checks) == 6 and all(c.ok for c in r.checks)
        assert "all 6 checks passed" in r.summary
        for c in r.checks:
            assert c.line.startswith("  ok   " + c.name) and c.detail in c.line


def test_python_m_mla_check_exit_code_and_output():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    p = subprocess.run([sys.executable, "-m", "mla", "check", "--seed", "3"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == expected_status(), p.stdout + p.stderr
    assert p.stdout == mla.self_check(seed=3).text
    if p.returncode == 77:
        assert "no CUDA GPU" in p.stdout


def test_bad_seed():
    for bad in (-1, 1 << 64, 1.5, "1", True):
        with pytest.raises(mla.InvalidValueError, match="seed = "):
            mla.self_check(seed=bad)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    for args in (["check", "--seed", "-1"], ["check", "--seed", "x"], []):
        p = subprocess.run([sys.executable, "-m", "mla", *args], env=env, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert "usage: python -m mla" in p.stderr
