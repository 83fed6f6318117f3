"""Host cost of one eager decode call, ours beside FlashMLA's, in the same process.

Host cost: the wall time the Python caller spends in one call, with the GPU kept
busy (torch.cuda._sleep) so that no launch waits for a kernel: what an eager
engine pays per layer on the CPU. Batches of `--calls` calls are timed after a
sleep long enough to cover them; the median batch gives us per call.

End to end: calls back to back on one stream, then a synchronize; time per call =
max(host, GPU) in a pipelined eager loop (the issue's "no slower than FlashMLA").

On a machine without a GPU (--device cpu), the same calls run on CPU tensors of an
empty batch: the Python + binding + validation cost, with no kernel.
"""

from __future__ import annotations

import json
import statistics
import time

from .peers import preallocated

SCALE = 0.135234


def _inputs(torch, B: int, h_q: int, L: int, page: int, device: str):
    g = torch.Generator(device=device).manual_seed(0)
    pages = max(1, -(-L // page))
    cache = torch.randn(max(B, 1) * pages, page, 1, 576, generator=g, device=device,
                        dtype=torch.bfloat16)
    bt = torch.arange(max(B, 1) * pages, dtype=torch.int32, device=device).view(-1, pages)[:B]
    sl = torch.full((B,), L, dtype=torch.int32, device=device)
    q = torch.randn(B, 1, h_q, 576, generator=g, device=device, dtype=torch.bfloat16)
    return q, cache, bt.contiguous(), sl


def _callers(torch, q, cache, bt, sl, with_flashmla: bool):
    """name -> no-argument callable running one decode call as an engine would."""
    import mla
    from mla import flash_mla_compat as compat

    out, lse, ws = preallocated(torch, q, lambda **o: mla.decode_workspace_size(
        q, cache, bt, sl, SCALE, True, **o))
    from mla import _call

    fast = _call.torch_ext_for(q) is not None
    c = {
        "mla.mla_decode" + (" [mla._torch_ext]" if fast else " [mla._ext]"):
            lambda: mla.mla_decode(q, cache, bt, sl, SCALE, True),
        # out_dtype given: the generic path (mla._ext), for comparison
        "mla.mla_decode(out_dtype=bf16) [mla._ext]":
            lambda: mla.mla_decode(q, cache, bt, sl, SCALE, True, out_dtype="bf16"),
        "mla.mla_decode(out, lse, workspace given)":
            lambda: mla.mla_decode(q, cache, bt, sl, SCALE, True, out=out, lse=lse, workspace=ws),
    }
    # One plan per step, reused by every layer (mla.decode_plan): no schedule launch.
    plan = mla.decode_plan(q, cache, bt, sl, SCALE, True)
    c["mla.mla_decode(plan=)" + (" [mla._torch_ext]" if fast else " [mla._ext]")] = \
        lambda: mla.mla_decode(q, cache, bt, sl, SCALE, True, plan=plan)
    # (the newer API's object plans on its first call and reuses the plan after)
    sched, _ = compat.get_mla_metadata()
    c["mla.flash_mla_compat (new API)"] = lambda: compat.flash_mla_with_kvcache(
        q, cache, bt, sl, 512, sched, None, softmax_scale=SCALE, causal=True)
    meta, splits = compat.get_mla_metadata(sl, q.shape[1] * q.shape[2], 1)
    c["mla.flash_mla_compat (old API)"] = lambda: compat.flash_mla_with_kvcache(
        q, cache, bt, sl, 512, meta, splits, softmax_scale=SCALE, causal=True)
    try:
        from mla import torch_ops  # noqa: F401  (registers torch.ops.mla.*)

        op = torch.ops.mla.decode
        c["torch.ops.mla.decode"] = lambda: op(q, cache, bt, sl, SCALE, True)
    except Exception:  # noqa: BLE001  (an older tree without the custom ops)
        pass
    if with_flashmla:
        import flash_mla

        fm_sched, fm_splits = flash_mla.get_mla_metadata(sl, q.shape[1] * q.shape[2], 1)
        c["flash_mla.flash_mla_with_kvcache"] = lambda: flash_mla.flash_mla_with_kvcache(
            q, cache, bt, sl, 512, fm_sched, fm_splits, softmax_scale=SCALE, causal=True)
    return c


def _parts(torch, q, cache, bt, sl):
    """The pieces of one mla.mla_decode call, each timed alone (same method)."""
    import math

    from mla import _call

    out = torch.empty(q.shape[0], q.shape[1], q.shape[2], 512, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], dtype=torch.float32, device=q.device)
    ext = _call.ext()
    st = _call.stream_handle(q, None)
    ws = ext.mla_decode_auto(q, cache, -1, bt, sl, SCALE, True, out, lse, False, None, st,
                             _call.alloc_bytes)
    n = 0 if ws is None else ws.numel()
    shape, lshape = tuple(out.shape), tuple(lse.shape)
    return {
        "outputs: q.new_empty x2": lambda: (q.new_empty(shape),
                                            q.new_empty(lshape, dtype=torch.float32)),
        "workspace: torch.empty": lambda: torch.empty(n, dtype=torch.uint8, device=q.device),
        "stream + device check": lambda: (_call.stream_handle(q, None),
                                          torch._C._cuda_getDevice() if q.is_cuda else 0),
        "mla._ext call (convert + validate + launches)": lambda: ext.mla_decode_auto(
            q, cache, -1, bt, sl, SCALE, True, out, lse, False, ws, st, None),
        "mla._ext.tensor(q) alone": lambda: ext.tensor(q, "q", False),
        "compat: lse.nan_to_num_": lambda: lse.nan_to_num_(nan=math.nan, posinf=math.inf,
                                                          neginf=math.inf),
    }


def _host_us(torch, fn, calls: int, batches: int, cuda: bool) -> dict:
    for _ in range(5):
        fn()
    if cuda:
        torch.cuda.synchronize()
    per_call = []
    for _ in range(batches):
        if cuda:
            torch.cuda._sleep(int(calls * 400e-6 * 2e9))  # ~400 us of GPU time per call
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter_ns()
        per_call.append((t1 - t0) / calls / 1e3)
        if cuda:
            torch.cuda.synchronize()
    return {"median_us": statistics.median(per_call), "min_us": min(per_call),
            "batches": batches, "calls_per_batch": calls}


def _end_to_end_us(torch, fn, calls: int) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t0) / calls / 1e3


def run_host_overhead(args) -> int:
    import torch

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("host-overhead: no CUDA GPU; run with --device cpu for the host-only cost")
        return 2
    with_fm = False
    if cuda and not args.no_flashmla:
        try:
            import flash_mla  # noqa: F401

            with_fm = True
        except ImportError:
            print("host-overhead: flash_mla is not importable; measuring mla alone")
    res = {"device": torch.cuda.get_device_name() if cuda else "cpu",
           "torch": torch.__version__, "shape": {"h_q": args.heads, "L": args.length,
                                                 "page": args.page}, "host": {}, "end_to_end": {}}
    B = args.batch if cuda else 0
    q, cache, bt, sl = _inputs(torch, B, args.heads, args.length, args.page, args.device)
    for name, fn in _callers(torch, q, cache, bt, sl, with_fm).items():
        r = _host_us(torch, fn, args.calls, args.batches, cuda)
        res["host"][name] = r
        print(f"host  B={B} {name:45s} {r['median_us']:8.1f} us/call (min {r['min_us']:.1f})")
    res["parts"] = {}
    for name, fn in _parts(torch, q, cache, bt, sl).items():
        r = _host_us(torch, fn, args.calls, args.batches // 2 or 1, cuda)
        res["parts"][name] = r
        print(f"part  B={B} {name:45s} {r['median_us']:8.1f} us/call")
    if cuda:
        for b in args.e2e_batches:
            q, cache, bt, sl = _inputs(torch, b, args.heads, args.length, args.page, "cuda")
            row = {}
            for name, fn in _callers(torch, q, cache, bt, sl, with_fm).items():
                row[name] = _end_to_end_us(torch, fn, args.e2e_calls)
                print(f"e2e   B={b} {name:45s} {row[name]:8.1f} us/call")
            res["end_to_end"][f"b{b}"] = row
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
        print(f"wrote {args.out}")
    return 0
