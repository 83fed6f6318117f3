#!/usr/bin/env python3
"""Peer for the docs/benchmarks.md prefill suite: PyTorch scaled_dot_product_attention with
the cuDNN backend (its flash backend has no kernel for d_qk 192 / d_v 128) on
the same shapes as mla_bench_prefill, timed with CUDA events (median).

  causal b1 h128 L 8K/16K/32K, d_qk 192, d_v 128
  chunked: 4K queries that are the last of P + 4K keys (bottom-right causal), P 0/16K/64K

FLOPs as ours: 2*h*(192+128) per visible (query, key) pair. Attention only
(no decompression). Usage: torch_sdpa.py [--json FILE] [--quick]
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

PAPER_CEILING = 792e12
SCALE = (0.1 * __import__("math").log(40.0) + 1.0) ** 2 / 192 ** 0.5


def median_ms(fn, reps, warmup=2):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def pairs(tq, tk):
    return tq * (tk - tq) + tq * (tq + 1) / 2


def run(tq, tk, h, reps, backend):
    g = torch.Generator(device="cuda").manual_seed(tq * 7 + tk)
    q = torch.rand(1, h, tq, 192, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
    k = torch.rand(1, h, tk, 192, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
    v = torch.rand(1, h, tk, 128, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
    if tq == tk:
        kw = dict(is_causal=True)
    else:
        from torch.nn.attention.bias import causal_lower_right
        kw = dict(attn_mask=causal_lower_right(tq, tk))
    with sdpa_kernel([backend]):
        fn = lambda: F.scaled_dot_product_attention(q, k, v, scale=SCALE, **kw)
        ms = median_ms(fn, reps)
    return ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name()}")
    h = 128
    shapes = [("peer-sdpa-cudnn", f"b1 h128 L{L // 1024}K causal", L, L) for L in
              ([8192] if args.quick else [8192, 16384, 32768])]
    shapes += [("peer-sdpa-cudnn-chunked", f"4K new + {P // 1024}K prefix", 4096, P + 4096)
               for P in ([0] if args.quick else [0, 16384, 65536])]
    rows = []
    for suite, shape, tq, tk in shapes:
        flops = 2.0 * h * (192 + 128) * pairs(tq, tk)
        try:
            ms = run(tq, tk, h, 7 if tk >= 32768 else 11, SDPBackend.CUDNN_ATTENTION)
            tf = flops / (ms * 1e-3)
            rows.append(dict(suite=suite, shape=shape, ms=ms, tflops=tf / 1e12,
                             frac_of_792=tf / PAPER_CEILING))
            print(f"{suite:24s} {shape:28s} {ms:9.3f} ms {tf / 1e12:7.1f} TFLOP/s "
                  f"{100 * tf / PAPER_CEILING:5.1f}% of 792", flush=True)
        except Exception as e:  # noqa: BLE001 - report, keep going
            msg = str(e).splitlines()[0][:160]
            rows.append(dict(suite=suite, shape=shape, error=msg))
            print(f"{suite:24s} {shape:28s} not run: {msg}", flush=True)
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(torch=torch.__version__, device=torch.cuda.get_device_name(),
                           results=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
