#!/usr/bin/env python3
"""GQA-8 comparison point of the layer study (docs/layer-study.md, "GQA-8 of the same
width"): one layer's decode attention of a GQA-8 model through PyTorch's
scaled_dot_product_attention(q, k, v, enable_gqa=True), every SDPA backend that takes the
shape, the fastest reported per shape.

  seed004: seed 004's model, hidden 7168 = 128 query heads x 56 dims, 8 KV heads (group 16),
           1792 B/token/layer (the planner's gqa-8-bf16 row of seed004-64l)
  fi128:   the FlashInfer-shaped reading, 56 query heads x 128 dims, 8 KV heads (group 7),
           4096 B/token/layer; run at the SAME batches as seed004 (the planner has no such
           model, so its own largest batch is not known; at 2.29x the bytes it would be smaller)

q [B, Hq, 1, D] bf16, k/v [B, 8, L, D] bf16 contiguous (dense, no paging), default scale
1/sqrt(D). L in 8K/32K/64K/128K, B = the planner's largest batch for the gqa-8-bf16 row on the
H200 (`mla plan --gpu h200 --model seed004-64l --context L --json`, formats[name=gqa-8-bf16]
.max_batch: 124/31/15/7) and B = 4.

Timing as bench/peers/torch_decode.py: CUDA events around the call, a 256 MB buffer written
before each timed call (L2 flushed), 3 warm-up calls, median of --reps (>= 20) calls, random
data (never zeros). Bytes = the KV cache read once, B*L*8*D*2 (K and V) * 2 B; GB/s against
the measured read ceiling 4391 GB/s (docs/benchmarks.md). The math backend materializes K/V per query
head (repeat_interleave) and the full score matrix, so it is run only where that expansion is
<= 2 GB (B 4 at 8K only), as a reference point. The efficient (mem-efficient) backend has no
GQA kernel in torch 2.11 ("both fused kernels require query, key and value to have the same
num_heads"); its refusal is recorded per shape.

Correctness, once per shape and backend: request 0's output against a float32 einsum
reference (all heads, all L keys); pass when max|out - ref| <= 2e-2 * max|ref| + 2e-3.

Usage: gqa_decode.py [--json FILE] [--reps N] [--quick]
"""
import argparse
import json
import math
import subprocess
import sys
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from torch_decode import timed  # (this folder: the scripts run as bench/peers/NAME.py)

READ_CEILING_GBPS = 4391.0  # docs/benchmarks.md, measured read ceiling of the H200
H_KV = 8
# mla plan --gpu h200 --model seed004-64l --context L --json: gqa-8-bf16 row's max_batch
PLANNER_BATCH = {8192: 124, 32768: 31, 65536: 15, 131072: 7}
PLANNER_CMD = "mla plan --gpu h200 --model seed004-64l --context {L} --json"
VARIANTS = {"seed004": (128, 56), "fi128": (56, 128)}  # name: (query heads, head dim)
BACKENDS = [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
            ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)]
MATH_MAX_EXPANDED = 2 << 30  # bytes of K/V repeated per query head
TOL_REL, TOL_ABS = 2e-2, 2e-3


def clocks_under_load():
    """Queue ~1.5 s of bf16 matmuls, read the clocks with nvidia-smi while they run."""
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.mm(x, x)
    torch.cuda.synchronize()
    for _ in range(1000):
        torch.mm(x, x)
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,"
             "power.draw,temperature.gpu", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:  # noqa: BLE001 - report, keep going
        out = f"nvidia-smi failed: {e}"
    torch.cuda.synchronize()
    del x
    torch.cuda.empty_cache()
    return out


def reference(q0, k0, v0):
    """float32 einsum of one request: q0 [Hq, 1, D], k0/v0 [H_KV, L, D] -> [Hq, 1, D]."""
    hq, _, d = q0.shape
    g = hq // H_KV  # query head h reads KV head h // g (SDPA's repeat_interleave)
    qf = q0.float().reshape(H_KV, g, d)
    s = torch.einsum("kgd,kld->kgl", qf, k0.float()) / math.sqrt(d)
    p = torch.softmax(s, dim=-1)
    o = torch.einsum("kgl,kld->kgd", p, v0.float())
    return o.reshape(hq, 1, d)


def run_shape(variant, B, L, reps, flush):
    hq, d = VARIANTS[variant]
    g = torch.Generator(device="cuda").manual_seed(B * 1000003 + L + d)
    # q ~ N(0, 4^2): scores of std ~2.3, a softmax that is not flat over L keys
    q = torch.randn(B, hq, 1, d, device="cuda", dtype=torch.bfloat16, generator=g) * 4
    k = torch.rand(B, H_KV, L, d, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
    v = torch.rand(B, H_KV, L, d, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
    ref = reference(q[0], k[0], v[0])
    ref_max = ref.abs().max().item()
    tol = TOL_REL * ref_max + TOL_ABS
    kv_bytes = B * L * H_KV * d * 2 * 2
    row = dict(variant=variant, h_q=hq, h_kv=H_KV, d=d, batch=B, L=L,
               batch_source="planner gqa-8-bf16 max_batch" if B == PLANNER_BATCH.get(L) else "fixed",
               kv_bytes=kv_bytes, kv_bytes_per_token_layer=H_KV * d * 2 * 2,
               check=dict(ref_max_abs=ref_max, tol=tol), backends={})
    for name, be in BACKENDS:
        if be == SDPBackend.MATH and B * L * hq * d * 2 * 2 > MATH_MAX_EXPANDED:
            row["backends"][name] = dict(skipped=f"K/V expanded per query head would be "
                                         f"{B * L * hq * d * 4 / 1e9:.1f} GB (> 2 GB): too slow")
            continue
        fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # noqa: E731
        try:
            with sdpa_kernel([be]), warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                try:
                    out = fn()
                except RuntimeError as e:
                    why = " | ".join(str(x.message).splitlines()[0][:200] for x in w)
                    raise RuntimeError(f"{str(e).splitlines()[0][:120]}: {why}") from None
                err = (out[0].float() - ref).abs().max().item()
                us = timed(fn, reps, flush)
            del out
            gbps = kv_bytes / (us * 1e-6) / 1e9
            row["backends"][name] = dict(time_us=us, gbps=gbps, frac_of_4391=gbps / READ_CEILING_GBPS,
                                         max_abs_err=err, check_pass=err <= tol)
        except Exception as e:  # noqa: BLE001 - report, keep going
            row["backends"][name] = dict(error=str(e)[:400])
        torch.cuda.empty_cache()
    ok = {n: r for n, r in row["backends"].items() if "time_us" in r and r["check_pass"]}
    if ok:
        best = min(ok, key=lambda n: ok[n]["time_us"])
        row.update(best_backend=best, time_us=ok[best]["time_us"], gbps=ok[best]["gbps"],
                   frac_of_4391=ok[best]["frac_of_4391"])
    del q, k, v, ref
    torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="")
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--quick", action="store_true", help="8K only")
    args = ap.parse_args()
    assert args.reps >= 20, "median of >= 20 calls"
    dev = torch.cuda.get_device_name()
    cudnn = torch.backends.cudnn.version()
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {cudnn}, {dev}")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    clocks = clocks_under_load()
    print(f"clocks under load (sm, mem, max sm, max mem, power, temp): {clocks}", flush=True)
    Ls = [8192] if args.quick else [8192, 32768, 65536, 131072]
    rows = []
    print(f"{'variant':8s} {'B':>4s} {'L':>7s} {'backend':9s} {'us':>9s} {'KV MB':>8s} "
          f"{'GB/s':>6s} {'of 4391':>7s}  others (us; check)")
    for variant in VARIANTS:
        for L in Ls:
            for B in sorted({PLANNER_BATCH[L], 4}, reverse=True):
                r = run_shape(variant, B, L, args.reps, flush)
                rows.append(r)
                others = ", ".join(
                    f"{n} {x['time_us']:.1f}{'' if x['check_pass'] else ' FAIL'}" if "time_us" in x
                    else f"{n} -" for n, x in r["backends"].items())
                if "best_backend" in r:
                    print(f"{variant:8s} {B:4d} {L:7d} {r['best_backend']:9s} {r['time_us']:9.1f} "
                          f"{r['kv_bytes'] / 1e6:8.1f} {r['gbps']:6.0f} {100 * r['frac_of_4391']:6.1f}%"
                          f"  {others}", flush=True)
                else:
                    print(f"{variant:8s} {B:4d} {L:7d} none ran/passed: {others}", flush=True)
    for r in rows:  # the reasons a backend did not run, once each
        for n, x in r["backends"].items():
            if "error" in x:
                print(f"  {r['variant']} B{r['batch']} L{r['L']} {n}: {x['error'][:300]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(torch=torch.__version__, cuda=torch.version.cuda, cudnn=cudnn, device=dev,
                           clocks_under_load=clocks, read_ceiling_gbps=READ_CEILING_GBPS,
                           reps=args.reps, planner_batch=PLANNER_BATCH, planner_cmd=PLANNER_CMD,
                           tolerance=f"max|out-ref| <= {TOL_REL} * max|ref| + {TOL_ABS}, request 0, "
                                     "float32 einsum reference",
                           results=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
