"""The comparison's outputs: Markdown table and matplotlib plots (PNG).
Pure functions of the result records, so they are tested without a GPU."""

from __future__ import annotations

from collections import defaultdict

KERNEL_NAMES = {"mla": "mla (ours)", "torch": "PyTorch", "flashinfer": "FlashInfer",
                "flashmla": "FlashMLA"}
MARKERS = {"mla": "o", "torch": "s", "flashinfer": "^", "flashmla": "D"}


def markdown_table(results: list[dict], meta: dict) -> str:
    ceil = meta.get("ceilings", {})
    lines = [
        f"Measured {meta.get('date', '?')} on {meta.get('gpu', {}).get('name', '?')} "
        f"({meta.get('gpu', {}).get('clocks_sm_mem_driver', '')}); command: "
        f"`{meta.get('command', '')}`.",
        f"Ceilings measured in the same run: copy {ceil.get('copy_GBps', 0):.0f} GB/s "
        f"(read+write), bf16 matmul {ceil.get('bf16_matmul_TFLOPs', 0):.0f} TFLOP/s.",
        "",
        "| suite | shape | kernel | time (us) | TFLOP/s | GB/s | % of roofline | vs mla | note |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    ours = {(r["suite"], r["label"]): r for r in results if r["kernel"] == "mla" and r.get("us")}
    for r in results:
        if r.get("us"):
            base = ours.get((r["suite"], r["label"]))
            ratio = f"{base['us'] / r['us']:.2f}x" if base and r["kernel"] != "mla" else ""
            notes = [r["impl"]] if r.get("impl") else []
            if r.get("max_diff") is not None:
                notes.append(f"max diff vs mla {r['max_diff']:.3g}")
            note = "; ".join(notes)
            tflops = f"{r['tflops']:.0f}" if r["flops"] else "—"  # top-k: no FLOPs
            lines.append(
                f"| {r['suite']} | {r['label']} | {KERNEL_NAMES.get(r['kernel'], r['kernel'])} "
                f"| {r['us']:.1f} | {tflops} | {r['gbps']:.0f} "
                f"| {100 * r['roofline_fraction']:.0f}% | {ratio} | {note} |")
        else:
            lines.append(f"| {r['suite']} | {r['label']} | "
                         f"{KERNEL_NAMES.get(r['kernel'], r['kernel'])} | — | — | — | — | | "
                         f"{r.get('skipped') or r.get('error', '')} |")
    lines += ["", "'vs mla' is mla's time divided by the peer's: above 1x the peer is faster. "
              "Roofline: max(FLOPs / matmul ceiling, bytes / copy ceiling)."]
    return "\n".join(lines) + "\n"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


_PANELS = (("tflops", "TFLOP/s"), ("gbps", "GB/s (bytes that must move)"))


def _draw_suite(axes, results: list[dict], suite: str) -> None:
    """One suite's lines on a pair of axes (TFLOP/s, GB/s); a suite without FLOPs
    (top-k) leaves the first one off."""
    rows = [r for r in results if r["suite"] == suite and r.get("us")]
    has_flops = any(r["tflops"] > 0 for r in rows)
    lines = defaultdict(list)
    for r in rows:
        lines[(r["kernel"], r["group"])].append(r)
    for (kernel, group), rs in sorted(lines.items()):
        rs.sort(key=lambda r: r.get("x", r["context"]))
        x = [r.get("x", r["context"]) for r in rs]
        lab = f"{KERNEL_NAMES.get(kernel, kernel)}: {group}"
        for ax, (key, _) in zip(axes, _PANELS):
            if key == "gbps" or has_flops:
                ax.plot(x, [r[key] for r in rs], marker=MARKERS.get(kernel, "x"), label=lab,
                        linewidth=2.2 if kernel == "mla" else 1.2)
    xlabel = rows[0].get("x_label", "context length (keys per request, mean)") if rows else ""
    for ax, (key, title) in zip(axes, _PANELS):
        if key == "tflops" and not has_flops:
            ax.set_axis_off()
            ax.text(0.5, 0.5, f"{suite}: no FLOPs (memory-bound)", ha="center",
                    transform=ax.transAxes)
            continue
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_title(f"{suite}: {title}")
        ax.grid(True, alpha=0.3)
    if lines:
        axes[-1].legend(fontsize=7, loc="best")
    else:
        axes[-1].text(0.5, 0.5, "no kernel ran", ha="center", transform=axes[-1].transAxes)


def plot_throughput(results: list[dict], suite: str, path: str) -> None:
    """Throughput vs the suite's x (context length for most), one line per (kernel,
    shape group): TFLOP/s on the left, GB/s on the right."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    _draw_suite(axes, results, suite)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_throughput_all(results: list[dict], suites: list[str], path: str) -> None:
    """Every suite's throughput in one figure, a row of two panels per suite (the
    GPU machine returns few files; the README shows this one)."""
    plt = _plt()
    fig, axes = plt.subplots(len(suites), 2, figsize=(13, 4.2 * len(suites)), squeeze=False)
    for row, suite in zip(axes, suites):
        _draw_suite(row, results, suite)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def roofline_points(results: list[dict]) -> dict:
    """{kernel: [(FLOP per byte, TFLOP/s), ...]} of every timed record with FLOPs
    (top-k has none: it has no point on a FLOP roofline)."""
    out = defaultdict(list)
    for r in results:
        if r.get("us") and r["flops"] > 0:
            out[r["kernel"]].append((r["flops"] / r["bytes"], r["tflops"]))
    return dict(sorted(out.items()))


def plot_roofline(results: list[dict], ceilings: dict, path: str) -> None:
    """Each kernel's point (arithmetic intensity, TFLOP/s) under the measured roofline."""
    plt = _plt()
    bw = ceilings["copy_GBps"] * 1e9
    peak = ceilings["bf16_matmul_TFLOPs"] * 1e12
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ai = [10 ** (i / 20) for i in range(0, 81)]  # 1 .. 10^4 FLOP/B
    ax.plot(ai, [min(peak, bw * a) / 1e12 for a in ai], "k-", label="roofline (measured)")
    for kernel, pts in roofline_points(results).items():
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=MARKERS.get(kernel, "x"),
                   label=KERNEL_NAMES.get(kernel, kernel), alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte that must move)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title("mla's kernels and their peers on the measured roofline")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
