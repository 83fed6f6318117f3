"""The comparison's outputs: Markdown table and matplotlib plots (PNG).
Pure functions of the result records, so they are tested without a GPU."""

from __future__ import annotations

from collections import defaultdict

KERNEL_NAMES = {"mla": "mla (ours)", "torch": "PyTorch", "flashinfer": "FlashInfer",
                "flashmla": "FlashMLA"}


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
            note = f"max diff vs mla {r['max_diff']:.3g}" if r.get("max_diff") is not None else ""
            lines.append(
                f"| {r['suite']} | {r['label']} | {KERNEL_NAMES.get(r['kernel'], r['kernel'])} "
                f"| {r['us']:.1f} | {r['tflops']:.0f} | {r['gbps']:.0f} "
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


def plot_throughput(results: list[dict], suite: str, path: str) -> None:
    """Throughput vs context length, one line per (kernel, shape group): TFLOP/s on
    the left, GB/s on the right."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    lines = defaultdict(list)
    for r in results:
        if r["suite"] == suite and r.get("us"):
            lines[(r["kernel"], r["group"])].append(r)
    markers = {"mla": "o", "torch": "s", "flashinfer": "^", "flashmla": "D"}
    for (kernel, group), rs in sorted(lines.items()):
        rs.sort(key=lambda r: r["context"])
        x = [r["context"] for r in rs]
        lab = f"{KERNEL_NAMES.get(kernel, kernel)}: {group}"
        for ax, key in zip(axes, ("tflops", "gbps")):
            ax.plot(x, [r[key] for r in rs], marker=markers.get(kernel, "x"), label=lab,
                    linewidth=2.2 if kernel == "mla" else 1.2)
    for ax, title in zip(axes, ("TFLOP/s", "GB/s (bytes that must move)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context length (keys per request, mean)")
        ax.set_title(f"{suite}: {title}")
        ax.grid(True, alpha=0.3)
    axes[1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_roofline(results: list[dict], ceilings: dict, path: str) -> None:
    """Each kernel's point (arithmetic intensity, TFLOP/s) under the measured roofline."""
    plt = _plt()
    bw = ceilings["copy_GBps"] * 1e9
    peak = ceilings["bf16_matmul_TFLOPs"] * 1e12
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ai = [10 ** (i / 20) for i in range(0, 81)]  # 1 .. 10^4 FLOP/B
    ax.plot(ai, [min(peak, bw * a) / 1e12 for a in ai], "k-", label="roofline (measured)")
    markers = {"mla": "o", "torch": "s", "flashinfer": "^", "flashmla": "D"}
    for kernel in sorted({r["kernel"] for r in results}):
        rs = [r for r in results if r["kernel"] == kernel and r.get("us")]
        if rs:
            ax.scatter([r["flops"] / r["bytes"] for r in rs], [r["tflops"] for r in rs],
                       marker=markers.get(kernel, "x"), label=KERNEL_NAMES.get(kernel, kernel),
                       alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte that must move)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title("MLA decode on the roofline")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
