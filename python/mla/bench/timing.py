"""CUDA-event timing with an L2 flush before every run, and the GPU's ceilings
measured in the same run (docs/benchmarks.md, how we time)."""

from __future__ import annotations

import statistics
import subprocess

L2_FLUSH_BYTES = 256 << 20  # > 4x the H200's 60 MB L2


class Timer:
    def __init__(self, torch):
        self.torch = torch
        self.flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")

    def time(self, fn, runs: int, warmup: int = 3) -> dict:
        """Median time (us) of `runs` calls, each after an L2 flush; `noise` is the
        relative gap between the medians of the first and second halves."""
        torch = self.torch
        for _ in range(warmup):
            fn()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(runs)]
        for s, e in ev:
            self.flush.zero_()  # also hides the host's launch overhead behind the flush
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        t = [s.elapsed_time(e) * 1e3 for s, e in ev]
        h = max(1, runs // 2)
        a, b = statistics.median(t[:h]), statistics.median(t[h:] or t)
        return {"us": statistics.median(t), "noise": abs(a - b) / max(min(a, b), 1e-9),
                "runs": runs}


def measure_ceilings(torch, timer: Timer, quick: bool) -> dict:
    """Copy bandwidth (read + write counted) and bf16 matmul on random data."""
    n = (1 << 30) if quick else (4 << 30)
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    copy = timer.time(lambda: b.copy_(a), runs=5 if quick else 10)
    del a, b
    m = 8192
    x = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
    y = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
    mm = timer.time(lambda: x @ y, runs=5 if quick else 10)
    del x, y
    return {
        "copy_GBps": 2 * n / (copy["us"] * 1e-6) / 1e9,
        "copy_bytes": n,
        "bf16_matmul_TFLOPs": 2 * m**3 / (mm["us"] * 1e-6) / 1e12,
        "matmul_n": m,
    }


def gpu_info(torch) -> dict:
    info = {"name": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cuda": torch.version.cuda}
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,driver_version",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        info["clocks_sm_mem_driver"] = r.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        info["clocks_sm_mem_driver"] = "nvidia-smi unavailable"
    return info
