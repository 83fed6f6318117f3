"""python -m mla.bench compare: every kernel on every suite case, in one run."""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import sys
from pathlib import Path

from . import peers, peers_dsa, peers_prefill, report, suites
from .timing import Timer, gpu_info, measure_ceilings

# Where the inputs are made: the GPU (the CPU only in the pipeline's own test).
INPUT_DEVICE = "cuda"
# case.kind -> (inputs class, {kernel: builder}).
KINDS = {
    "decode": (peers.DecodeInputs, peers.BUILDERS),
    "sparse-decode": (peers_dsa.SparseDecodeInputs, peers_dsa.SPARSE_DECODE),
    "topk": (peers_dsa.TopkInputs, peers_dsa.TOPK),
    "indexer-decode": (peers_dsa.IndexerDecodeInputs, peers_dsa.INDEXER_DECODE),
    "prefill": (peers_prefill.PrefillInputs, peers_prefill.PREFILL),
    "sparse-prefill": (peers_dsa.SparsePrefillInputs, peers_dsa.SPARSE_PREFILL),
}
DESCRIPTIONS = {**{("decode", k): v for k, v in peers.DESCRIPTIONS.items()},
                **peers_dsa.DESCRIPTIONS, **peers_prefill.DESCRIPTIONS}


def builder(kind: str, kernel: str):
    """The builder of `kernel` for a case kind; NotApplicable when it has none."""
    b = KINDS[kind][1].get(kernel)
    if b is None:
        raise peers.NotApplicable(f"no {report.KERNEL_NAMES.get(kernel, kernel)} kernel "
                                  f"for {kind} here")
    return b


def comparable(torch, t):
    """An output as f32 for the cross-check, -inf (a masked or keyless entry,
    matching in both) as 0 so that equal masks do not read as NaN differences."""
    t = t.float()
    return t.masked_fill(t == float("-inf"), 0.0)


def _progress(items, desc):
    try:
        from tqdm import tqdm

        return tqdm(items, desc=desc, file=sys.stderr)
    except ImportError:
        return items


def _available(name: str) -> bool:
    return importlib.util.find_spec(peers.MODULES[name]) is not None


def choose_peers(spec: str, quick: bool) -> list[str]:
    if spec != "auto":
        return [p.strip() for p in spec.split(",") if p.strip()]
    chosen = [p for p in ("mla", "torch", "flashmla", "flashinfer") if _available(p)]
    if quick and "flashinfer" in chosen:  # its JIT compile alone can take minutes
        chosen.remove("flashinfer")
    return chosen


def record(case, kernel, timing, ceilings, **extra) -> dict:
    r = {**case.fields(), "kind": case.kind, "suite": case.suite, "label": case.label,
         "group": case.group, "x": case.x, "x_label": suites.X_LABELS[case.kind],
         "context": case.context, "kernel": kernel, "flops": case.flops(),
         "bytes": case.bytes()}
    if (case.kind, kernel) in DESCRIPTIONS:
        r["impl"] = DESCRIPTIONS[(case.kind, kernel)]
    if timing:
        t = timing["us"] * 1e-6
        floor = max(r["flops"] / (ceilings["bf16_matmul_TFLOPs"] * 1e12),
                    r["bytes"] / (ceilings["copy_GBps"] * 1e9))
        r.update(us=timing["us"], noise=timing["noise"], runs=timing["runs"],
                 tflops=r["flops"] / t / 1e12, gbps=r["bytes"] / t / 1e9,
                 roofline_us=floor * 1e6, roofline_fraction=floor / t)
    r.update(extra)
    return r


def run_compare(args) -> int:
    import torch

    if not torch.cuda.is_available():
        print("mla.bench compare needs a CUDA GPU (torch sees none)", file=sys.stderr)
        return 2
    quick = args.quick
    runs = args.runs or (10 if quick else 30)
    date = datetime.datetime.now().strftime("%Y-%m-%d")
    # Default under the current directory: an installed package has no source tree to write to.
    out_dir = Path(args.out or Path.cwd() / "bench-results" /
                   f"compare-{date}{'-quick' if quick else ''}")
    out_dir.mkdir(parents=True, exist_ok=True)
    kernels = choose_peers(args.peers, quick)
    timer = Timer(torch)
    meta = {"date": date, "gpu": gpu_info(torch), "kernels": kernels, "quick": quick,
            "command": "python -m mla.bench " + " ".join(sys.argv[1:] or ["compare"])}
    print(f"[compare] {meta['gpu']['name']}; kernels: {', '.join(kernels)}", file=sys.stderr)
    meta["ceilings"] = ceilings = measure_ceilings(torch, timer, quick)
    print(f"[compare] ceilings: {ceilings['copy_GBps']:.0f} GB/s copy, "
          f"{ceilings['bf16_matmul_TFLOPs']:.0f} TFLOP/s bf16", file=sys.stderr)

    cases = suites.all_cases(quick)
    if args.suite:
        unknown = set(args.suite) - set(cases)
        if unknown:
            print(f"unknown suite(s) {sorted(unknown)}; known: {sorted(cases)}", file=sys.stderr)
            return 2
        cases = {k: v for k, v in cases.items() if k in args.suite}
    if getattr(args, "only", None):
        cases = {k: [c for c in v if any(t in c.label for t in args.only)] for k, v in cases.items()}
    todo = [(c, k) for cs in cases.values() for c in cs for k in kernels]
    results = []
    run = output = o = None
    inputs_for = {}
    ref_out = {}
    for case, kernel in _progress(todo, "compare"):
        if case not in inputs_for:
            inputs_for.clear()  # one case's inputs at a time (memory)
            ref_out.clear()
            torch.cuda.empty_cache()
            try:
                inputs_for[case] = KINDS[case.kind][0](torch, case, device=INPUT_DEVICE)
            except Exception as e:  # e.g. out of memory: every kernel of the case fails
                inputs_for[case] = e
        x = inputs_for[case]
        try:
            if isinstance(x, Exception):
                raise x
            run, output = builder(case.kind, kernel)(torch, x)
            run()
            torch.cuda.synchronize()
            o = comparable(torch, output())
            diff = None
            if kernel == "mla":
                ref_out[case] = o
            elif case in ref_out:
                diff = (o - ref_out[case]).abs().max().item()
            timing = timer.time(run, runs)
            results.append(record(case, kernel, timing, ceilings, max_diff=diff))
        except peers.NotApplicable as e:
            results.append(record(case, kernel, None, ceilings, skipped=str(e)))
        except Exception as e:  # a peer failing must not end the comparison
            results.append(record(case, kernel, None, ceilings,
                                  error=f"{type(e).__name__}: {str(e)[:300]}"))
        run = output = o = None  # drop this kernel's buffers before the next one
    inputs_for.clear()

    (out_dir / "compare.json").write_text(json.dumps({"meta": meta, "results": results},
                                                     indent=1))
    table = report.markdown_table(results, meta)
    (out_dir / "compare.md").write_text(table)
    pngs = []
    try:
        if args.plots in ("per-suite", "both"):
            for suite in cases:
                p = out_dir / f"throughput-{suite}.png"
                report.plot_throughput(results, suite, str(p))
                pngs.append(p)
        if args.plots in ("combined", "both"):
            p = out_dir / "throughput.png"
            report.plot_throughput_all(results, list(cases), str(p))
            pngs.append(p)
        p = out_dir / "roofline.png"
        report.plot_roofline(results, ceilings, str(p))
        pngs.append(p)
    except ImportError:
        print("[compare] matplotlib not installed: no PNG plots", file=sys.stderr)
    print(table)
    print(f"[compare] wrote {out_dir}/compare.json, compare.md"
          + (", " + ", ".join(p.name for p in pngs) if pngs else ""), file=sys.stderr)
    return 0
