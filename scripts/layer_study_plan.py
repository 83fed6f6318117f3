#!/usr/bin/env python3
"""Prints the planner's predictions for the layer study's points (docs/layer-study.md)
as Markdown tables: DeepSeek-V3.2 on the H200 at 8K/32K/64K/128K for MLA bf16,
MLA fp8, MLA+DSA (bf16 and fp8 caches), and the seed-004 model's GQA-8 row.

Also the whole attention layer (attention + the layer's projections: the planner's
layer view, bf16 weights as the study's layer runs them, and fp8 weights beside).

Usage: scripts/layer_study_plan.py [path/to/mla] [--calibrate FILE]
Nothing here is measured: these are `mla plan` roofline floors (or, with
--calibrate, predictions from measured kernel efficiencies)."""

import json
import subprocess
import sys

CONTEXTS = [8192, 32768, 65536, 131072]


def plan(mla, model, context, kv, batch=0, calibrate=None, weights="bf16"):
    # The study's layer runs its projections in bf16 (cuBLAS, bf16 in / f32 accumulate), so
    # the layer view is priced with bf16 weights unless asked otherwise.
    cmd = [mla, "plan", "--gpu", "h200", "--model", model, "--context", str(context), "--kv", kv,
           "--batch", str(batch), "--weights", weights, "--json"]
    if calibrate:
        cmd += ["--calibrate", calibrate]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def fmt_bytes(b):
    return f"{b / 1e9:.2f} GB" if b >= 1e9 else f"{b / 1e6:.1f} MB"


def fmt_time(s):
    return f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.0f} us"


def row(d, name):
    return next(f for f in d["formats"] if f["name"] == name)


POINTS = [("mla-bf16", "bf16"), ("mla-fp8", "fp8"), ("mla-bf16+dsa", "bf16"),
          ("mla-fp8+dsa", "fp8")]  # (format row, cache precision)


def point_plans(mla, calibrate, weights="bf16"):
    """(point, context label, plan at its largest batch) for every point and context."""
    for name, kv in POINTS:
        for ctx in CONTEXTS:
            yield name, f"{ctx // 1024}K", plan(mla, "deepseek-v3.2", ctx, kv,
                                                calibrate=calibrate, weights=weights)


def table(*columns):
    """Prints a Markdown table's header and rule."""
    cells(*columns)
    print("|" + "---|" * len(columns))


def cells(*values):
    print("| " + " | ".join(str(v) for v in values) + " |")


def main():
    args = sys.argv[1:]
    calibrate = None
    if "--calibrate" in args:
        i = args.index("--calibrate")
        calibrate = args[i + 1]
        del args[i:i + 2]
    mla = args[0] if args else "./build/mla"

    table("point", "context", "KV/request (61 layers, + indexer)", "largest batch", "batch used",
          "bytes/step (61 layers)", "FLOP/B", "floor/step, 61 layers", "per layer",
          "predicted/step", "binds")
    for name, context, d in point_plans(mla, calibrate):
        layers = d["model"]["layers"]
        f = row(d, name)
        st = f["step"]
        cells(name, context, fmt_bytes(f["kv_bytes_per_request"]), f["max_batch"],
              d["workload"]["batch"], fmt_bytes(st["bytes"]), f"{st['intensity']:.0f}",
              fmt_time(st["floor_s"]), fmt_time(st["floor_s"] / layers),
              fmt_time(st["predicted_s"]), st["binds"])
    print()
    print("Fixed batch 4 (the seed's B4), DeepSeek-V3.2, per step of all 61 layers:")
    print()
    names = [name for name, _ in POINTS]
    table("context", *names, "dense/DSA (bf16)")
    for ctx in CONTEXTS:
        d = plan(mla, "deepseek-v3.2", ctx, "bf16", batch=4, calibrate=calibrate)
        t = {n: row(d, n)["step"]["predicted_s"] for n in names}
        cells(f"{ctx // 1024}K", *(fmt_time(v) for v in t.values()),
              f"{t['mla-bf16'] / t['mla-bf16+dsa']:.1f}x")
    print()
    print("Whole attention layer (attention + projections), DeepSeek-V3.2, each configuration "
          "at its own largest batch; projections with bf16 weights (the study's layer) and, "
          "last columns, fp8 weights (the released precision):")
    print()
    table("point", "context", "batch", "weights read/layer (bf16)", "projections/layer",
          "attention/layer", "layer (bf16 w)", "61 layers (bf16 w)", "projections share",
          "layer (fp8 w)", "61 layers (fp8 w)")
    for (name, context, d), (_, _, d8) in zip(point_plans(mla, calibrate),
                                              point_plans(mla, calibrate, weights="fp8")):
        n = d["model"]["layers"]
        f, f8 = row(d, name), row(d8, name)
        ls, ls8 = f["layer_step"], f8["layer_step"]
        proj = f["projections"]["stage"]
        cells(name, context, d["workload"]["batch"],
              fmt_bytes(f["projections"]["weight_bytes_per_layer"]),
              fmt_time(proj["floor_s"] / n), fmt_time(f["step"]["floor_s"] / n),
              fmt_time(ls["per_layer_predicted_s"]), fmt_time(ls["predicted_s"]),
              f"{100 * ls['projections_share_of_floor']:.0f}%",
              fmt_time(ls8["per_layer_predicted_s"]), fmt_time(ls8["predicted_s"]))
    print()
    print("Fixed batch 4, whole layer (attention + bf16-weight projections), per step of all 61 "
          "layers, and the dense/DSA ratio of the layer beside attention's alone:")
    print()
    table("context", *names, "dense/DSA layer (bf16)", "dense/DSA attention only (bf16)")
    for ctx in CONTEXTS:
        d = plan(mla, "deepseek-v3.2", ctx, "bf16", batch=4, calibrate=calibrate)
        t = {n: row(d, n)["layer_step"]["predicted_s"] for n in names}
        a = {n: row(d, n)["step"]["predicted_s"] for n in ("mla-bf16", "mla-bf16+dsa")}
        cells(f"{ctx // 1024}K", *(fmt_time(v) for v in t.values()),
              f"{t['mla-bf16'] / t['mla-bf16+dsa']:.1f}x",
              f"{a['mla-bf16'] / a['mla-bf16+dsa']:.1f}x")
    print()
    print("GQA-8 (seed 004's 64-layer model: 128 heads x 56 dims, 8 KV heads), H200:")
    print()
    table("context", "KV/request (64 layers)", "largest batch", "bytes/step at batch 4",
          "floor/step, batch 4", "per layer", "layer with projections (bf16 w), per layer")
    for ctx in CONTEXTS:
        d = plan(mla, "seed004-64l", ctx, "bf16", batch=4, calibrate=calibrate)
        f = row(d, "gqa-8-bf16")
        st = f["step"]
        n = d["model"]["layers"]
        cells(f"{ctx // 1024}K", fmt_bytes(f["kv_bytes_per_request"]), f["max_batch"],
              fmt_bytes(st["bytes"]), fmt_time(st["floor_s"]), fmt_time(st["floor_s"] / n),
              fmt_time(f["layer_step"]["per_layer_floor_s"]))


if __name__ == "__main__":
    main()
