"""The comparison's table and plots from synthetic records (no GPU needed)."""

import pytest

from mla.bench import compare, report, suites

CEIL = {"copy_GBps": 4000.0, "bf16_matmul_TFLOPs": 800.0}


def fake_results():
    out = []
    for case in [c for cs in suites.decode_cases(quick=True).values() for c in cs]:
        for kernel, us in (("mla", 100.0), ("torch", 400.0)):
            out.append(compare.record(case, kernel, {"us": us, "noise": 0.01, "runs": 5}, CEIL,
                                      max_diff=None if kernel == "mla" else 0.01))
        out.append(compare.record(case, "flashinfer", None, CEIL, skipped="not installed"))
    return out


def test_case_flops_and_bytes_follow_perf_md():
    c = suites.DecodeCase("decode-128", 2, 128, 2, (100, 1))
    # keys seen: request 0: 99 + 100, request 1: 0 + 1 (causal among the 2 new tokens)
    assert c.flops() == 2 * 128 * (99 + 100 + 0 + 1) * (576 + 512)
    assert c.bytes() == 101 * 1152 + 2 * 2 * 128 * (576 * 2 + 512 * 2 + 4)


def test_record_roofline_fraction():
    c = suites.DecodeCase("decode-tp", 128, 16, 1, (4096,) * 128)
    r = compare.record(c, "mla", {"us": 1000.0, "noise": 0, "runs": 1}, CEIL)
    floor = max(c.flops() / 800e12, c.bytes() / 4000e9)
    assert r["roofline_fraction"] == pytest.approx(floor / 1e-3)
    assert r["gbps"] == pytest.approx(c.bytes() / 1e-3 / 1e9)


def test_markdown_table_has_every_row_and_ratio():
    res = fake_results()
    md = report.markdown_table(res, {"date": "2026-11-29", "ceilings": CEIL,
                                     "gpu": {"name": "H200"}, "command": "x"})
    assert md.count("\n| decode-") == len(res)
    assert "0.25x" in md and "not installed" in md


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib", reason="plots need matplotlib")
    res = fake_results()
    report.plot_throughput(res, "decode-tp", str(tmp_path / "t.png"))
    report.plot_roofline(res, CEIL, str(tmp_path / "r.png"))
    assert (tmp_path / "t.png").stat().st_size > 1000
    assert (tmp_path / "r.png").stat().st_size > 1000
