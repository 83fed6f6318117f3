"""The comparison's cases, table and plots from synthetic records (no GPU needed)."""

import pytest

from mla.bench import compare, report, suites

CEIL = {"copy_GBps": 4000.0, "bf16_matmul_TFLOPs": 800.0}
ALL_QUICK = [c for cs in suites.all_cases(quick=True).values() for c in cs]


def fake_results():
    out = []
    for case in ALL_QUICK:
        for kernel, us in (("mla", 100.0), ("torch", 400.0)):
            out.append(compare.record(case, kernel, {"us": us, "noise": 0.01, "runs": 5}, CEIL,
                                      max_diff=None if kernel == "mla" else 0.01))
        out.append(compare.record(case, "flashinfer", None, CEIL, skipped="not installed"))
    return out


def test_quick_suites_cover_the_benchmark_suites():
    got = suites.all_cases(quick=True)
    assert list(got) == ["decode-128", "decode-tp", "decode-varlen", "sparse-decode", "topk",
                         "indexer-decode", "prefill", "sparse-prefill"]
    full = suites.all_cases(quick=False)
    assert set(got) <= set(full) and "decode-long" in full
    # docs/benchmarks.md: sparse-decode b 128/64, h 128/64/32/16, s_q 1/2, bf16 and fp8 at
    # top-2048, and b128 h128 s_q1 at top-16384 over 64K keys in both formats.
    assert len(full["sparse-decode"]) == 2 * 4 * 2 * 2 + 2
    assert {(c.topk, c.s_k, c.fmt) for c in full["sparse-decode"] if c.topk != 2048} == {
        (16384, 65536, "bf16"), (16384, 65536, "fp8_ds_mla")}
    assert {(c.rows, c.n) for c in full["topk"]} == {(128, 128 * 1024), (4096, 32 * 1024),
                                                   (1, 1024 * 1024)}
    assert [c.x for c in full["prefill"] if c.prefix] == [20 * 1024, 68 * 1024]


def test_case_flops_and_bytes_follow_perf_md():
    c = suites.DecodeCase("decode-128", 2, 128, 2, (100, 1))
    # keys seen: request 0: 99 + 100, request 1: 0 + 1 (causal among the 2 new tokens)
    assert c.flops() == 2 * 128 * (99 + 100 + 0 + 1) * (576 + 512)
    assert c.bytes() == 101 * 1152 + 2 * 2 * 128 * (576 * 2 + 512 * 2 + 4)
    s = suites.SparseDecodeCase("sparse-decode", 128, 128, 2, 32768, 2048, "fp8_ds_mla")
    assert s.flops() == 2 * 128 * 2048 * 1088 * 128 * 2
    assert s.bytes() == 128 * 2 * 2048 * (656 + 4) + 128 * 2 * 128 * (1152 + 1024 + 4)
    t = suites.TopkCase("topk", 128, 131072, 2048)
    assert t.flops() == 0 and t.bytes() == 128 * (131072 + 2048) * 4
    i = suites.IndexerDecodeCase("indexer-decode", 2, 2, 100)
    assert i.flops() == 2 * 64 * 128 * 2 * (99 + 100)
    assert i.bytes() == 2 * 100 * 132 + 2 * 2 * 64 * 132 + 2 * 2 * 100 * 4
    p = suites.PrefillCase("prefill", 4, 2, heads=1)
    # query i of 4 new over 2 cached keys sees 3, 4, 5, 6 keys
    assert p.pairs() == 3 + 4 + 5 + 6
    assert p.flops() == 2 * 1 * (192 + 128) * 18
    assert p.bytes() == (192 + 128) * 2 * (4 + 6) + 4 * 4


def test_record_roofline_fraction():
    c = suites.DecodeCase("decode-tp", 128, 16, 1, (4096,) * 128)
    r = compare.record(c, "mla", {"us": 1000.0, "noise": 0, "runs": 1}, CEIL)
    floor = max(c.flops() / 800e12, c.bytes() / 4000e9)
    assert r["roofline_fraction"] == pytest.approx(floor / 1e-3)
    assert r["gbps"] == pytest.approx(c.bytes() / 1e-3 / 1e9)
    assert r["x"] == 4096 and r["kind"] == "decode" and r["lengths"] == [4096] * 128
    t = compare.record(suites.TopkCase("topk", 128, 131072), "torch",
                       {"us": 300.0, "noise": 0, "runs": 1}, CEIL)
    assert t["impl"] == "torch.topk(sorted=True)"
    assert t["roofline_fraction"] == pytest.approx(t["bytes"] / 4000e9 / 300e-6)


def test_markdown_table_has_every_row_and_ratio():
    res = fake_results()
    md = report.markdown_table(res, {"date": "2026-11-29", "ceilings": CEIL,
                                     "gpu": {"name": "H200"}, "command": "x"})
    suite_names = tuple(suites.all_cases(quick=True))
    rows = [line for line in md.splitlines() if line.startswith("| ") and
            line.split(" | ")[0][2:] in suite_names]
    assert len(rows) == len(res)
    assert "0.25x" in md and "not installed" in md
    topk_torch = next(r for r in rows if r.startswith("| topk |") and "PyTorch" in r)
    assert "| — |" in topk_torch and "torch.topk" in topk_torch


def test_roofline_points_skip_kernels_without_flops():
    pts = report.roofline_points(fake_results())
    assert set(pts) == {"mla", "torch"}
    n_flop_cases = sum(1 for c in ALL_QUICK if c.flops() > 0)
    assert len(pts["mla"]) == n_flop_cases < len(ALL_QUICK)
    assert all(ai > 0 and tf > 0 for ai, tf in pts["mla"])


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib", reason="plots need matplotlib")
    res = fake_results()
    for suite in suites.all_cases(quick=True):
        p = tmp_path / f"t-{suite}.png"
        report.plot_throughput(res, suite, str(p))
        assert p.stat().st_size > 1000, suite
    report.plot_throughput([], "topk", str(tmp_path / "empty.png"))  # nothing ran
    report.plot_throughput_all(res, list(suites.all_cases(quick=True)), str(tmp_path / "a.png"))
    assert (tmp_path / "a.png").stat().st_size > 10000
    report.plot_roofline(res, CEIL, str(tmp_path / "r.png"))
    assert (tmp_path / "r.png").stat().st_size > 1000
