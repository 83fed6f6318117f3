#!/usr/bin/env python3
"""Fits the planner's calibration (docs/planner.md) from benchmark JSON measured on one GPU:
per kernel a fraction of the roofline floor and a fixed per-call overhead,
    t = overhead_us + floor_us / fraction,
by least squares over the measured points, with the floors taken from the planner itself
(`mla plan --json`, per layer), so the prediction uses exactly the floors it was fitted on.

Inputs (H200, 2026-11-29, bench/results/):
  dsa-step.json    mla_bench_dsa dsa-step: dense mla_decode, B 64, 128 heads, L 2K-128K
                   (the "dense us" column) -> decode bf16 / fp8
  dsa-stages.json  mla_bench_dsa stages: indexer, top-k, sparse decode (bf16, fp8) at
                   B 4/16/64 x L 8K/32K/128K -> indexer, topk, sparse_decode bf16 / fp8
  layer.json       mla_bench_layer: ONE point, mla-bf16 at 8K (B 66), step minus attention
                   -> projections (the layer's projections and its glue kernels)
and (H200, 2026-11-30, session 3):
  s3-final/bench_prefill.json  mla_bench_prefill: attention alone and the decompression GEMMs
                   at 8K/16K/32K -> prefill, decompress (mean fraction of the ceiling)
The other entries (decode at 16/32 heads) are carried over from the previous calibration
file. The layer study's other 15 points are predictions.

A re-fit on another GPU (2026-12-06, H100): --gpu h100 --step FILE --stages FILE take that GPU's
dsa-step and stages JSON; the projection, prefill and decompression entries (a fraction of the
ceiling each, from the H200 files above) and the other head counts are carried over, as the
"source" field of the output says.

Usage: scripts/fit_calibration.py path/to/mla OUT.json [--results bench/results]
           [--gpu h200] [--step dsa-step.json] [--stages dsa-stages.json]
"""

import json
import subprocess
import sys
from pathlib import Path

LAYERS = 61  # DeepSeek-V3.2: the planner's step floors are for all layers


def plan(mla, gpu, context, batch, kv):
    cmd = [mla, "plan", "--gpu", gpu, "--model", "deepseek-v3.2", "--context", str(context),
           "--kv", kv, "--batch", str(batch), "--weights", "bf16", "--json"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def stage_floor_us(p, fmt_name, stage):
    f = next(x for x in p["formats"] if x["name"] == fmt_name)
    s = next(x for x in f["step"]["stages"] if x["name"] == stage)
    return s["floor_s"] / LAYERS * 1e6


def fit(points):
    """Least squares t = o + a * floor with o >= 0; returns (o, fraction = 1/a, worst error)."""
    n = len(points)
    sx = sum(x for x, _ in points)
    sy = sum(y for _, y in points)
    sxx = sum(x * x for x, _ in points)
    sxy = sum(x * y for x, y in points)
    a = (n * sxy - sx * sy) / (n * sxx - sx * sx) if n > 1 else sy / sx
    o = (sy - a * sx) / n
    if o < 0:  # no negative overheads: fit through the origin
        o, a = 0.0, sxy / sxx
    worst = max(abs(o + a * x - y) / y for x, y in points)
    return o, 1.0 / a, worst


def parse_shape(shape):
    """'b4 s_q1 L8K', '4 x 8K k2048', 'wgmma bf16 b4 s_q1 h128 s_kv8K top2048' -> (B, L)."""
    toks = shape.split()
    if "x" in toks:  # top-k: rows x width
        return int(toks[0]), int(toks[2].rstrip("K")) * 1024
    b = next(int(t[1:]) for t in toks if t.startswith("b") and t[1:].isdigit())
    lt = next(t for t in toks if t.startswith("L") or t.startswith("s_kv"))
    return b, int(lt.split("L")[-1].split("s_kv")[-1].rstrip("K")) * 1024


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    mla, out = sys.argv[1], Path(sys.argv[2])

    def opt(name, default):
        return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default

    res = Path(opt("--results", "bench/results"))
    gpu = opt("--gpu", "h200")
    step_file = Path(opt("--step", res / "2026-11-29-h200-dsa-step.json"))
    stages_file = Path(opt("--stages", res / "2026-11-29-h200-dsa-stages.json"))
    step = json.loads(step_file.read_text())
    stages = json.loads(stages_file.read_text())
    layer = json.loads((res / "2026-11-29-h200-layer.json").read_text())["points"]
    old = json.loads((res / "2026-11-29-h200-calibration.json").read_text())
    prefill = json.loads((res / "2026-11-30-h200-s3-final" / "bench_prefill.json").read_text())

    cache = {}

    def floors(context, batch, kv):
        key = (context, batch, kv)
        if key not in cache:
            cache[key] = plan(mla, gpu, context, batch, kv)
        return cache[key]

    series = {}  # (kernel, format) -> [(floor_us, measured_us, what)]
    for r in step:  # dense decode: "bf16 b64 h128 L2048", dense us in the "tflops" field
        fmt_, b, _, lt = r["shape"].split()
        B, L = int(b[1:]), int(lt[1:])
        kv = "bf16" if fmt_ == "bf16" else "fp8"
        fl = stage_floor_us(floors(L, B, kv), f"mla-{kv}", "attention")
        series.setdefault(("decode", kv), []).append((fl, r["tflops"], r["shape"]))
    names = {"indexer-decode": ("indexer", "fp8", "indexer"), "topk": ("topk", "fp32", "top-k")}
    for r in stages:
        B, L = parse_shape(r["shape"])
        if r["suite"] == "sparse-decode":
            kv = "fp8" if " fp8 " in f" {r['shape']} " else "bf16"
            key, stage = ("sparse_decode", kv), "sparse attention"
        else:
            kernel, fmt_, stage = names[r["suite"]]
            key, kv = (kernel, fmt_), "bf16"
        fl = stage_floor_us(floors(L, B, kv), f"mla-{kv}+dsa", stage)
        series.setdefault(key, []).append((fl, r["us"], r["shape"]))

    entries = []
    print(f"{'kernel':14} {'format':6} {'points':>6} {'fraction':>9} {'overhead us':>12} "
          f"{'worst fit error':>16}")
    for (kernel, fmt_), pts in series.items():
        o, frac, worst = fit([(x, y) for x, y, _ in pts])
        frac = min(frac, 1.0)
        print(f"{kernel:14} {fmt_:6} {len(pts):6d} {frac:9.3f} {o:12.1f} {100 * worst:15.1f}%")
        entries.append({"kernel": kernel, "format": fmt_, "h_q": 128 if kernel != "indexer" else 64,
                        "fraction_of_ceiling": round(frac, 4), "overhead_us": round(o, 2),
                        "fit": f"{len(pts)} points, worst error {100 * worst:.1f}%",
                        "points": [s for _, _, s in pts]})

    # Projections and the layer's other kernels: one layer point (mla-bf16 8K).
    p0 = next(p for p in layer if p["config"] == "mla-bf16" and p["context"] == 8192)
    # The layer point was measured on the H200: its fraction is taken against the H200's floor
    # whatever GPU the other entries are fitted for (a fraction of the ceiling carries over).
    pl = plan(mla, "h200", p0["context"], p0["batch"], "bf16")
    f = next(x for x in pl["formats"] if x["name"] == "mla-bf16")
    proj_floor = f["projections"]["stage"]["floor_s"] / LAYERS * 1e6
    rest = p0["median_us"] - p0["attention_us"]
    frac = proj_floor / rest
    print(f"{'projections':14} {'bf16':6} {1:6d} {frac:9.3f} {0.0:12.1f}  (mla-bf16 8K B "
          f"{p0['batch']}: {rest:.1f} us measured vs {proj_floor:.1f} us floor)")
    entries.append({"kernel": "projections", "format": "bf16", "h_q": 128,
                    "fraction_of_ceiling": round(frac, 4), "overhead_us": 0,
                    "fit": "one point: mla_bench_layer mla-bf16 8K B 66, step - attention",
                    "points": ["mla-bf16 8K"]})

    # Prefill attention and the decompression GEMMs: the mean fraction of the
    # bf16 ceiling over the suite's 8K/16K/32K rows (mla_bench_prefill, session 3:
    # the warp-specialised kernel), no per-call overhead (milliseconds-long calls).
    for kernel, suite, what in (("prefill", "prefill-attention", "b1 h128 L8K-32K causal"),
                                ("decompress", "prefill-decompress", "cuBLAS bf16 GEMMs, 8K-32K")):
        rows = [r for r in prefill["results"] if r["suite"] == suite]
        frac = sum(r["frac_of_792"] for r in rows) / len(rows)
        print(f"{kernel:14} {'mha':6} {128:6d} {frac:9.3f} {0.0:12.1f}  ({len(rows)} rows)")
        entries.append({"kernel": kernel, "format": "mha", "h_q": 128,
                        "fraction_of_ceiling": round(frac, 4), "overhead_us": 0, "shape": what,
                        "fit": f"mean of {suite} rows, 2026-11-30-h200-s3-final/bench_prefill.json"})

    # Carried over: what was not fitted here (other head counts);
    # the old sparse entries measured the kernel sparse decode no longer runs by default.
    fitted = {(e["kernel"], e["format"]) for e in entries}
    for e in old["entries"]:
        k = (e["kernel"], e["format"])
        if e["kernel"] == "sparse_decode" or (k in fitted and (
                e["h_q"] == 128 or e["kernel"] in ("indexer", "topk"))):
            continue
        entries.append(e)
    def short(path):  # the folder and file under bench/results, whatever the path given
        return f"{path.parent.name}/{path.name}"

    source = ("fitted by scripts/fit_calibration.py from bench/results/2026-11-29-h200-"
              "{dsa-step,dsa-stages,layer}.json (H200, 2026-11-29), "
              "2026-11-30-h200-s3-final/bench_prefill.json and carried entries of "
              "2026-11-29-h200-calibration.json")
    if "--step" in sys.argv or "--stages" in sys.argv:
        source = (f"fitted by scripts/fit_calibration.py --gpu {gpu} from {short(step_file)} and "
                  f"{short(stages_file)} ({gpu}); projections from 2026-11-29-h200-layer.json "
                  "(H200), prefill and decompression from 2026-11-30-h200-s3-final/"
                  "bench_prefill.json (H200), other entries carried from "
                  "2026-11-29-h200-calibration.json")
    doc = {"gpu": gpu,
           "source": source,
           "entries": entries}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
