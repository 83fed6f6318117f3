#!/usr/bin/env python3
"""Plain PyTorch peer of the dense MLA decode (docs/benchmarks.md): absorbed MQA form,
scores = q @ K^T (bf16 bmm, fp32 out), fp32 softmax, out = P @ V (bf16 bmm),
over a dense [B, L, 576] cache (no paging: the peer's best case). Timed with
CUDA events, L2 flushed before each call, median of --reps calls. Also
re-measures the two ceilings (bf16 matmul 8192^3 on random data, read-only
pass over 4 GiB) so the run states its own roofline."""
import argparse
import json
import statistics

import torch


def timed(fn, reps, flush, warmup=3):
    """Median time (us) of `reps` calls after `warmup`, each after `flush` (a 256 MB
    buffer) is written: nothing of the inputs is left in the 60 MB L2."""
    times = []
    for r in range(reps + warmup):
        flush.fill_(r & 0xFF)
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        if r >= warmup:
            times.append(a.elapsed_time(b))
    return statistics.median(times) * 1e3  # us


def ceilings(flush):
    n = 8192
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    t = timed(lambda: torch.mm(x, y), 10, flush)
    tflops = 2 * n**3 / (t * 1e-6) / 1e12
    big = torch.randn(1 << 30, device="cuda", dtype=torch.float32)  # 4 GiB
    t = timed(lambda: big.sum(), 10, flush)
    gbps = big.numel() * 4 / (t * 1e-6) / 1e9
    del x, y, big
    return tflops, gbps


def decode_peer(B, h, s_q, L, reps, flush):
    dqk, dv = 576, 512
    q = torch.randn(B, s_q * h, dqk, device="cuda", dtype=torch.bfloat16)
    kv = torch.rand(B, L, dqk, device="cuda", dtype=torch.bfloat16) * 2 - 1
    scale = 0.135234
    mask = None
    if s_q > 1:  # causal among the new tokens: token i sees L - (s_q - 1 - i) keys
        i = torch.arange(s_q, device="cuda").repeat_interleave(h)[:, None]
        k = torch.arange(L, device="cuda")[None, :]
        mask = k >= (L - (s_q - 1 - i))

    def step():
        s = torch.bmm(q, kv.transpose(1, 2)).float() * scale
        if mask is not None:
            s.masked_fill_(mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        return torch.bmm(p.to(torch.bfloat16), kv[:, :, :dv])

    t = timed(step, reps, flush)
    flops = sum(2 * h * (dqk + dv) * (L - (s_q - 1 - i)) for i in range(s_q)) * B
    bytes_ = B * L * 1152 + B * s_q * h * (dqk * 2 + dv * 2)
    del q, kv
    torch.cuda.empty_cache()
    return dict(suite="decode-128" if h == 128 else "decode-tp", batch=B, h_q=h, s_q=s_q,
                L=L, time_us=t, tflops=flops / (t * 1e-6) / 1e12, gbps=bytes_ / (t * 1e-6) / 1e9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    tf, gb = ceilings(flush)
    print(f"ceilings: bf16 matmul 8192^3 {tf:.0f} TFLOP/s, read pass 4 GiB {gb:.0f} GB/s")
    res = []
    shapes = [(128, 128, 1, L) for L in (4096, 8192, 16384, 32768)]
    shapes += [(64, 128, 1, L) for L in (4096, 32768)]
    shapes += [(128, 128, 2, 8192)]
    shapes += [(128, h, 1, L) for h in (16, 32) for L in (4096, 32768)]
    for B, h, s_q, L in shapes:
        r = decode_peer(B, h, s_q, L, args.reps, flush)
        print(f"torch {r['suite']:11s} b{B} h{h} s_q{s_q} L{L // 1024}K: {r['time_us']:9.1f} us "
              f"{r['tflops']:6.1f} TFLOP/s {r['gbps']:6.0f} GB/s", flush=True)
        res.append(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), ceilings=dict(
                bf16_tflops=tf, read_gbps=gb), results=res), f, indent=1)


if __name__ == "__main__":
    main()
