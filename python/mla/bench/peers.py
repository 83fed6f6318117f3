"""Decode kernels under test, each built for one case: ours, plain PyTorch, FlashInfer,
FlashMLA. A builder returns a no-argument callable that runs the kernel once, and a
function that returns its output (to cross-check against ours), or raises
NotApplicable with the reason."""

from __future__ import annotations

import math

SCALE = 0.135234  # DeepSeek-V3.2 (docs/design.md)


class NotApplicable(Exception):
    pass


def random_latent_cache(torch, g, num_pages: int, page: int, fmt: str, device="cuda"):
    """A paged latent cache of random entries: bf16 [P, page, 1, 576], or valid
    fp8_ds_mla entries [P, page, 1, 656] (e4m3 codes, power-of-two scales, bf16 rope)."""
    if fmt == "bf16":
        return torch.randn(num_pages, page, 1, 576, generator=g, device=device,
                           dtype=torch.bfloat16)
    n = num_pages * page
    codes = (torch.randn(n, 512, generator=g, device=device) * 64).to(
        torch.float8_e4m3fn).view(torch.uint8)
    scales = torch.exp2(torch.randint(-8, -4, (n, 4), generator=g, device=device).float())
    rope = torch.randn(n, 64, generator=g, device=device).to(torch.bfloat16)
    return torch.cat([codes, scales.view(torch.uint8), rope.view(torch.uint8)],
                     dim=1).view(num_pages, page, 1, 656)


class DecodeInputs:
    """Random inputs of one DecodeCase: a paged cache with shuffled pages."""

    def __init__(self, torch, case, seed: int = 0, device="cuda"):
        g = torch.Generator(device=device).manual_seed(seed)
        self.case = case
        self.device = device
        page = case.page
        pages = [max(1, math.ceil(L / page)) for L in case.lengths]
        num_pages = sum(pages)
        max_pages = max(pages)
        self.cache = random_latent_cache(torch, g, num_pages, page, case.fmt, device)
        perm = torch.randperm(num_pages, generator=g, device=device).to(torch.int32)
        bt = torch.zeros(case.batch, max_pages, dtype=torch.int32, device=device)
        off = 0
        for b, p in enumerate(pages):
            bt[b, :p] = perm[off:off + p]
            off += p
        self.block_table = bt
        self.pages = pages
        self.seqlens = torch.tensor(case.lengths, dtype=torch.int32, device=device)
        self.q = torch.randn(case.batch, case.s_q, case.h_q, 576, generator=g, device=device,
                             dtype=torch.bfloat16)


def preallocated(torch, q, workspace_size):
    """out [..., 512] (q's dtype) and lse (f32) for q [B, s_q, h_q, 576] (decode: lse
    [B, h_q, s_q]) or [s_q, h_q, 576] (prefill: lse [s_q, h_q]), and a workspace of
    workspace_size(out=out, lse=lse) bytes: a timed call then allocates nothing."""
    lse_shape = (q.shape[0], q.shape[2], q.shape[1]) if q.dim() == 4 else tuple(q.shape[:2])
    out = torch.empty(*q.shape[:-1], 512, dtype=q.dtype, device=q.device)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    n = workspace_size(out=out, lse=lse)
    return out, lse, torch.empty(max(n, 1), dtype=torch.uint8, device=q.device)


def build_mla(torch, x: DecodeInputs):
    import mla

    out, lse, ws = preallocated(torch, x.q, lambda **o: mla.decode_workspace_size(
        x.q, x.cache, x.block_table, x.seqlens, SCALE, True, **o))

    def run():
        mla.mla_decode(x.q, x.cache, x.block_table, x.seqlens, SCALE, True, out=out, lse=lse,
                       workspace=ws)

    return run, lambda: out


def build_torch(torch, x: DecodeInputs):
    """bmm + fp32 softmax + bmm over a dense copy of each request's keys (gathered
    outside the timing), with a -inf bias for causal and ragged lengths."""
    c = x.case
    if c.fmt != "bf16":
        raise NotApplicable("plain PyTorch reads bf16 keys only")
    Lmax = max(c.lengths)
    flat = x.cache.view(-1, 576)
    pos = torch.arange(Lmax, device=x.device)
    slot = x.block_table.long()[:, (pos // c.page).clamp(max=x.block_table.shape[1] - 1)] * \
        c.page + pos % c.page
    kv = flat[slot]  # [B, Lmax, 576]
    lim = x.seqlens.long()[:, None] - (c.s_q - 1 - torch.arange(c.s_q, device=x.device))[None]
    bias = torch.where(pos[None, None] < lim[..., None], 0.0, float("-inf"))  # [B, s_q, L]
    bias = bias[:, :, None, :].float()
    q = x.q.view(c.batch, c.s_q * c.h_q, 576)
    res = {}

    def run():
        s = torch.bmm(q, kv.transpose(1, 2)).view(c.batch, c.s_q, c.h_q, Lmax)
        p = torch.softmax(s.float() * SCALE + bias, dim=-1).to(torch.bfloat16)
        res["o"] = torch.bmm(p.view(c.batch, c.s_q * c.h_q, Lmax), kv[..., :512])

    return run, lambda: res["o"].view(c.batch, c.s_q, c.h_q, 512)


def build_flashinfer(torch, x: DecodeInputs):
    import flashinfer

    c = x.case
    if c.fmt != "bf16":
        raise NotApplicable("FlashInfer's MLA decode has no fp8_ds_mla cache")
    ws = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    w = flashinfer.mla.BatchMLAPagedAttentionWrapper(ws, backend="auto")
    qo_indptr = torch.arange(c.batch + 1, dtype=torch.int32, device="cuda") * c.s_q
    pages = torch.tensor(x.pages, dtype=torch.int32, device="cuda")
    kv_indptr = torch.cat([torch.zeros(1, dtype=torch.int32, device="cuda"),
                           pages.cumsum(0).to(torch.int32)])
    kv_indices = torch.cat([x.block_table[b, :p] for b, p in enumerate(x.pages)])
    w.plan(qo_indptr, kv_indptr, kv_indices, x.seqlens, c.h_q, 512, 64, c.page, True, SCALE,
           torch.bfloat16, torch.bfloat16)
    ckv = x.cache[:, :, 0, :512].contiguous()
    kpe = x.cache[:, :, 0, 512:].contiguous()
    q = x.q.view(c.batch * c.s_q, c.h_q, 576)
    q_nope, q_pe = q[..., :512].contiguous(), q[..., 512:].contiguous()
    res = {}

    def run():
        res["o"] = w.run(q_nope, q_pe, ckv, kpe)

    return run, lambda: res["o"].view(c.batch, c.s_q, c.h_q, 512)


def build_flashmla(torch, x: DecodeInputs):
    import flash_mla

    c = x.case
    if c.fmt != "bf16":
        raise NotApplicable("FlashMLA has no dense fp8 decode on Hopper")
    sched, splits = flash_mla.get_mla_metadata(x.seqlens, c.s_q * c.h_q, 1)
    res = {}

    def run():
        res["o"], _ = flash_mla.flash_mla_with_kvcache(x.q, x.cache, x.block_table, x.seqlens,
                                                       512, sched, splits, softmax_scale=SCALE,
                                                       causal=True)

    return run, lambda: res["o"]


BUILDERS = {"mla": build_mla, "torch": build_torch, "flashinfer": build_flashinfer,
            "flashmla": build_flashmla}
# What each peer runs, for the table's note column.
DESCRIPTIONS = {"torch": "bmm + fp32 softmax + bmm over gathered bf16 keys"}
MODULES = {"mla": "mla", "torch": "torch", "flashinfer": "flashinfer", "flashmla": "flash_mla"}
