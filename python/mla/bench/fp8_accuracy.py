"""python -m mla.bench fp8-accuracy: what an fp8 cache costs in accuracy (issue 15).

The same unquantised keys (f32 latent c_kv and rope, random normal) are written into a bf16
cache, an fp8_ds_mla cache (656-byte entries, per-128 block scales) and an fp8_e4m3 cache (576
e4m3 codes, one per-tensor scale = amax / 448), all through mla.append_kv. Each cache is
decoded by our kernels, dense and sparse, and the fp8_ds_mla one also by FlashMLA's sparse fp8
decode where it is importable (it reads the same 656-byte layout). Every output is compared, as
relative L2 (||o - r|| / ||r|| over the whole output), with

  - `vs_bf16`: our output of the bf16 cache of the same keys (what switching the cache format
    changes), and
  - `vs_exact`: an fp64 decode of the unquantised keys (what each path loses in total).
"""

from __future__ import annotations

import contextlib
import json
import math
import sys

SCALE = 0.135234  # DeepSeek-V3.2's softmax scale (docs/design.md)

# (kind, batch, h_q, s_q, keys per request, top-k): dense decode at 128 and 16 heads, sparse
# decode at FlashMLA's shapes (h_q 64 and 128).
CASES = [
    ("dense", 8, 128, 1, 4096, 0),
    ("dense", 4, 128, 2, 8192, 0),
    ("dense", 8, 16, 1, 16384, 0),
    ("sparse", 16, 128, 1, 32768, 2048),
    ("sparse", 16, 128, 2, 32768, 2048),
    ("sparse", 16, 64, 1, 32768, 2048),
]
PAGE = 64


def rel_l2(torch, x, ref) -> float:
    x, ref = x.double(), ref.double()
    return float(torch.linalg.vector_norm(x - ref) / torch.linalg.vector_norm(ref))


class Keys:
    """B requests of L keys each, in pages of PAGE taken in a shuffled order."""

    def __init__(self, torch, g, B: int, L: int):
        self.pages_per_request = math.ceil(L / PAGE)
        n_pages = B * self.pages_per_request
        T = n_pages * PAGE
        self.c_kv = torch.randn(T, 512, generator=g, device="cuda")
        self.k_rope = torch.randn(T, 64, generator=g, device="cuda") * 2
        perm = torch.randperm(n_pages, generator=g, device="cuda").to(torch.int32)
        self.block_table = perm.view(B, self.pages_per_request)
        self.n_pages = n_pages
        # slot of (request b, position j) = block_table[b, j // PAGE] * PAGE + j % PAGE
        pos = torch.arange(self.pages_per_request * PAGE, device="cuda")
        self.slot_of = (self.block_table.long()[:, pos // PAGE] * PAGE + pos % PAGE)  # [B, L']
        self.k_scale = (torch.cat([self.c_kv, self.k_rope], 1).abs().max() / 448).view(1)

    def scale(self, mla, fmt: str):
        """The per-tensor scale an fp8_e4m3 cache is written and read with."""
        return mla.kv_scale(self.k_scale) if fmt == "fp8_e4m3" else contextlib.nullcontext()

    def cache(self, torch, mla, fmt: str):
        c = mla.empty_kv_cache(self.n_pages, PAGE, fmt, like=self.c_kv)
        slots = torch.arange(self.n_pages * PAGE, device="cuda", dtype=torch.int64)
        with self.scale(mla, fmt):
            mla.append_kv(self.c_kv, self.k_rope, slots, c, fmt)
        return c


def exact_decode(torch, q, keys: Keys, visible):
    """fp64 attention of q [B, s_q, h, 576] over the unquantised keys; visible(b, t) gives
    the slots query t of request b sees."""
    B, s_q, h, _ = q.shape
    kv = torch.cat([keys.c_kv, keys.k_rope], 1).double()
    out = torch.empty(B, s_q, h, 512, dtype=torch.float64, device="cuda")
    for b in range(B):
        for t in range(s_q):
            k = kv[visible(b, t)]  # [n, 576]
            s = (q[b, t].double() @ k.T) * SCALE  # [h, n]
            out[b, t] = torch.softmax(s, dim=-1) @ k[:, :512]
    return out


def flashmla_sparse_fp8(torch, q, cache, indices):
    import flash_mla

    meta, _ = flash_mla.get_mla_metadata()
    o, _ = flash_mla.flash_mla_with_kvcache(q, cache.view(torch.float8_e4m3fn), None, None, 512,
                                            meta, None, softmax_scale=SCALE, causal=False,
                                            is_fp8_kvcache=True, indices=indices)
    return o


def run_case(torch, mla, case, seed: int) -> dict:
    kind, B, h, s_q, L, topk = case
    g = torch.Generator(device="cuda").manual_seed(seed)
    keys = Keys(torch, g, B, L)
    q = torch.randn(B, s_q, h, 576, generator=g, device="cuda").to(torch.bfloat16)
    lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
    outs = {}
    if kind == "dense":
        def visible(b, t):  # causal: query t of s_q sees positions <= L - s_q + t
            return keys.slot_of[b, :L - s_q + t + 1]

        for fmt in ("bf16", "fp8_ds_mla", "fp8_e4m3"):
            cache = keys.cache(torch, mla, fmt)
            with keys.scale(mla, fmt):
                outs[f"mla {fmt}"] = mla.mla_decode(q, cache, keys.block_table, lens, SCALE, True,
                                                    kv_format=fmt)[0]
    else:
        pos = torch.rand(B * s_q, L, generator=g, device="cuda").topk(topk).indices
        req = torch.arange(B, device="cuda").repeat_interleave(s_q)[:, None]
        indices = keys.slot_of[req, pos].to(torch.int32).view(B, s_q, topk)

        def visible(b, t):
            return indices[b, t].long()

        for fmt in ("bf16", "fp8_ds_mla", "fp8_e4m3"):
            cache = keys.cache(torch, mla, fmt)
            with keys.scale(mla, fmt):
                outs[f"mla {fmt}"] = mla.sparse_decode(q, cache, indices, SCALE, kv_format=fmt)[0]
            if fmt == "fp8_ds_mla":
                try:
                    outs["flashmla fp8_ds_mla"] = flashmla_sparse_fp8(torch, q, cache, indices)
                except Exception as e:  # not importable, or no kernel for this shape
                    print(f"[fp8-accuracy] FlashMLA: {type(e).__name__}: {e}", file=sys.stderr)
    torch.cuda.synchronize()
    exact = exact_decode(torch, q, keys, visible)
    base = outs["mla bf16"]
    label = f"{kind} b{B} h{h} s_q{s_q} L{L // 1024}K" + (f" top{topk}" if topk else "")
    rows = {name: {"vs_bf16": rel_l2(torch, o, base), "vs_exact": rel_l2(torch, o, exact)}
            for name, o in outs.items()}
    return {"case": label, "kind": kind, "batch": B, "h_q": h, "s_q": s_q, "keys": L,
            "topk": topk, "rel_l2": rows}


def run_fp8_accuracy(args) -> int:
    import torch

    import mla

    if not torch.cuda.is_available():
        print("mla.bench fp8-accuracy needs a CUDA GPU (torch sees none)", file=sys.stderr)
        return 2
    results = [run_case(torch, mla, c, seed=i) for i, c in enumerate(CASES)]
    lines = ["| case | path | rel. L2 vs our bf16-cache output | rel. L2 vs fp64 of the "
             "unquantised keys |", "| --- | --- | ---: | ---: |"]
    for r in results:
        for name, v in r["rel_l2"].items():
            lines.append(f"| {r['case']} | {name} | {v['vs_bf16']:.2e} | {v['vs_exact']:.2e} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "softmax_scale": SCALE,
                       "results": results, "table": table}, f, indent=1)
    return 0
