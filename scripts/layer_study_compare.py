#!/usr/bin/env python3
"""Prediction beside measurement for the layer study (docs/layer-study.md, issue 8): for every
point of mla_bench_layer's JSON, the calibrated planner's per-layer step (attention + the
layer's projections stage) and attention alone, the measured ones, and the relative error.

Usage: scripts/layer_study_compare.py path/to/mla CALIBRATION.json LAYER.json
Prints a Markdown table; exit status 1 if any whole-step prediction is off by more than 15%
(the issue's bound), so the check is a command, not a reading of the table."""

import json
import subprocess
import sys


def plan(mla, model, context, kv, batch, calibrate):
    cmd = [mla, "plan", "--gpu", "h200", "--model", model, "--context", str(context), "--kv", kv,
           "--batch", str(batch), "--weights", "bf16", "--json", "--calibrate", calibrate]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    mla, cal, layer = sys.argv[1:]
    points = json.loads(open(layer).read())["points"]
    print("| point | context | batch | step measured | step predicted | error | attention measured "
          "| attention predicted | error | rest measured | projections predicted |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for p in points:
        kv = "fp8" if "fp8" in p["config"] else "bf16"
        d = plan(mla, "deepseek-v3.2", p["context"], kv, p["batch"], cal)
        layers = d["model"]["layers"]
        f = next(x for x in d["formats"] if x["name"] == p["config"])
        step = f["layer_step"]["per_layer_predicted_s"] * 1e6
        att = f["step"]["predicted_s"] / layers * 1e6
        proj = f["projections"]["stage"]["predicted_s"] / layers * 1e6
        e_step = step / p["median_us"] - 1
        e_att = att / p["attention_us"] - 1
        worst = max(worst, abs(e_step))
        print(f"| {p['config']} | {p['context'] // 1024}K | {p['batch']} | {p['median_us']:.0f} us "
              f"| {step:.0f} us | {100 * e_step:+.1f}% | {p['attention_us']:.0f} us | {att:.0f} us "
              f"| {100 * e_att:+.1f}% | {p['median_us'] - p['attention_us']:.0f} us | {proj:.0f} us |")
    print()
    print(f"worst whole-step error: {100 * worst:.1f}% (bound 15%)")
    return 0 if worst <= 0.15 else 1


if __name__ == "__main__":
    sys.exit(main())
