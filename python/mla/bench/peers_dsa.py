"""DSA kernels under test (sparse decode, top-k, indexer decode): ours and plain
PyTorch, built for one case each as in peers.py (a no-argument run callable and a
function returning the output to cross-check)."""

from __future__ import annotations

import math

from .peers import SCALE, NotApplicable, preallocated, random_latent_cache

INDEXER_PAGE = 64


# ---- sparse decode -----------------------------------------------------------------


class SparseDecodeInputs:
    """Each request owns s_k cached entries (pages of 64 in order); each query token
    lists `topk` distinct random positions of its request as global slots."""

    def __init__(self, torch, case, seed: int = 0, device="cuda"):
        g = torch.Generator(device=device).manual_seed(seed)
        self.case, self.device = case, device
        page = 64
        pages_per_request = math.ceil(case.s_k / page)
        self.cache = random_latent_cache(torch, g, case.batch * pages_per_request, page,
                                         case.fmt, device)
        rows = case.batch * case.s_q
        pos = torch.rand(rows, case.s_k, generator=g, device=device).topk(case.topk).indices
        base = (torch.arange(case.batch, device=device) * pages_per_request * page)
        base = base.repeat_interleave(case.s_q)[:, None]
        self.indices = (pos + base).to(torch.int32).view(case.batch, case.s_q, case.topk)
        self.q = torch.randn(case.batch, case.s_q, case.h_q, 576, generator=g, device=device,
                             dtype=torch.bfloat16)


def build_mla_sparse_decode(torch, x: SparseDecodeInputs):
    import mla

    out, lse, ws = preallocated(torch, x.q, lambda **o: mla.sparse_decode_workspace_size(
        x.q, x.cache, x.indices, SCALE, **o))

    def run():
        mla.sparse_decode(x.q, x.cache, x.indices, SCALE, out=out, lse=lse, workspace=ws)

    return run, lambda: out


def build_flashmla_sparse_decode(torch, x: SparseDecodeInputs):
    """FlashMLA's sparse decode: fp8_ds_mla entries only on Hopper (its 656-byte layout is
    ours), 64 or 128 query heads; the schedule is made on the first call and reused."""
    import flash_mla

    c = x.case
    if c.fmt != "fp8_ds_mla":
        raise NotApplicable("FlashMLA's sparse decode reads fp8_ds_mla entries only on Hopper")
    if c.h_q not in (64, 128):
        raise NotApplicable(f"FlashMLA's sparse fp8 decode takes 64 or 128 heads, not {c.h_q}")
    meta, _ = flash_mla.get_mla_metadata()
    cache = x.cache.view(torch.float8_e4m3fn)
    res = {}

    def run():
        res["o"], _ = flash_mla.flash_mla_with_kvcache(x.q, cache, None, None, 512, meta, None,
                                                       softmax_scale=SCALE, causal=False,
                                                       is_fp8_kvcache=True, indices=x.indices)

    return run, lambda: res["o"]


def build_torch_sparse_decode(torch, x: SparseDecodeInputs):
    """Gather the listed keys (timed: it is the sparse part), bmm, fp32 softmax, bmm."""
    c = x.case
    if c.fmt != "bf16":
        raise NotApplicable("plain PyTorch reads bf16 keys only")
    flat = x.cache.view(-1, 576)
    rows = c.batch * c.s_q
    idx = x.indices.view(rows, c.topk).long()
    bias = torch.where(idx >= 0, 0.0, float("-inf"))[:, None, :]  # [rows, 1, topk]
    idx = idx.clamp(min=0)
    q = x.q.view(rows, c.h_q, 576)
    res = {}

    def run():
        kv = flat[idx]  # [rows, topk, 576]
        s = torch.bmm(q, kv.transpose(1, 2))  # [rows, h, topk]
        p = torch.softmax(s.float() * SCALE + bias, dim=-1).to(torch.bfloat16)
        res["o"] = torch.bmm(p, kv[..., :512])

    return run, lambda: res["o"].view(c.batch, c.s_q, c.h_q, 512)


# ---- top-k ---------------------------------------------------------------------------


class TopkInputs:
    def __init__(self, torch, case, seed: int = 0, device="cuda"):
        g = torch.Generator(device=device).manual_seed(seed)
        self.case, self.device = case, device
        self.logits = torch.randn(case.rows, case.n, generator=g, device=device)


def build_mla_topk(torch, x: TopkInputs):
    import mla

    c = x.case
    out = torch.empty(c.rows, c.k, dtype=torch.int32, device=x.device)

    def run():
        mla.topk_indices(x.logits, c.k, indices=out)

    # Compared as sets: ours is best-first, ties to the lower position.
    return run, lambda: out.sort(dim=-1).values


def build_torch_topk(torch, x: TopkInputs):
    c = x.case
    res = {}

    def run():
        res["i"] = torch.topk(x.logits, c.k, dim=-1, sorted=True).indices

    return run, lambda: res["i"].sort(dim=-1).values


# ---- indexer decode -------------------------------------------------------------------


class IndexerDecodeInputs:
    """A paged indexer cache of random e4m3 codes and power-of-two scales (pages
    shuffled), quantised queries and folded weights (mla.quantize_indexer_query,
    outside the timing)."""

    def __init__(self, torch, case, seed: int = 0, device="cuda"):
        import mla

        g = torch.Generator(device=device).manual_seed(seed)
        self.case, self.device = case, device
        per = math.ceil(case.length / INDEXER_PAGE)
        P = case.batch * per
        codes = (torch.randn(P * INDEXER_PAGE, 128, generator=g, device=device) * 64).to(
            torch.float8_e4m3fn)
        scales = torch.exp2(torch.randint(-10, -6, (P * INDEXER_PAGE,), generator=g,
                                          device=device).float())
        self.codes, self.scales = codes, scales  # token-major, slot = page * 64 + offset
        self.cache = torch.cat([codes.view(torch.uint8).view(P, INDEXER_PAGE * 128),
                                scales.view(torch.uint8).view(P, INDEXER_PAGE * 4)], dim=1)
        perm = torch.randperm(P, generator=g, device=device).to(torch.int32)
        self.block_table = perm.view(case.batch, per)
        self.seqlens = torch.full((case.batch,), case.length, dtype=torch.int32, device=device)
        q = torch.randn(case.batch, case.s_q, 64, 128, generator=g, device=device,
                        dtype=torch.bfloat16)
        w = torch.randn(case.batch, case.s_q, 64, generator=g, device=device)
        self.q8, self.w_folded = mla.quantize_indexer_query(q, w)
        self.max_len = per * INDEXER_PAGE


def build_mla_indexer_decode(torch, x: IndexerDecodeInputs):
    import mla

    c = x.case
    logits = torch.empty(c.batch, c.s_q, x.max_len, dtype=torch.float32, device=x.device)

    def run():
        mla.indexer_logits_decode(x.q8, x.w_folded, x.cache, x.block_table, x.seqlens,
                                  logits=logits)

    return run, lambda: logits[..., :c.length]


def build_torch_indexer_decode(torch, x: IndexerDecodeInputs):
    """bf16 bmm + ReLU + weighted sum over heads (docs/benchmarks.md's PyTorch peer), over keys
    dequantised to bf16 and gathered into a dense array outside the timing:
    I[t, s] = k_scale[s] * sum_h w'[t, h] * ReLU(q8[t, h] . k8[s])."""
    c = x.case
    pos = torch.arange(c.length, device=x.device)
    slot = x.block_table.long()[:, pos // INDEXER_PAGE] * INDEXER_PAGE + pos % INDEXER_PAGE
    k = x.codes.to(torch.bfloat16)[slot]  # [B, L, 128]
    k_scale = x.scales[slot][:, None, :]  # [B, 1, L]
    q = x.q8.to(torch.bfloat16).view(c.batch, c.s_q * 64, 128)
    w = x.w_folded[..., None]  # [B, s_q, 64, 1]
    lim = c.length - (c.s_q - 1 - torch.arange(c.s_q, device=x.device))  # [s_q]
    mask = torch.where(pos[None, :] < lim[:, None], 0.0, float("-inf"))  # [s_q, L]
    res = {}

    def run():
        s = torch.relu(torch.bmm(q, k.transpose(1, 2))).view(c.batch, c.s_q, 64, c.length)
        res["l"] = (s.float() * w).sum(dim=2) * k_scale + mask

    return run, lambda: res["l"]


# ---- sparse prefill ----------------------------------------------------------------


class SparsePrefillInputs:
    """q [s_q, h_q, 576], kv [s_kv, 576] bf16; each token lists `topk` distinct
    uniform rows of kv (FlashMLA's test draws its lists the same way)."""

    def __init__(self, torch, case, seed: int = 0, device="cuda"):
        g = torch.Generator(device=device).manual_seed(seed)
        self.case, self.device = case, device
        self.q = torch.randn(case.s_q, case.h_q, 576, generator=g, device=device,
                             dtype=torch.bfloat16)
        self.kv = torch.randn(case.s_kv, 576, generator=g, device=device, dtype=torch.bfloat16)
        rows = []
        for start in range(0, case.s_q, 1024):  # argsort of random keys, in slices (memory)
            n = min(1024, case.s_q - start)
            r = torch.rand(n, case.s_kv, generator=g, device=device)
            rows.append(r.topk(case.topk, dim=1).indices.to(torch.int32))
        self.indices = torch.cat(rows)
        self.scale = 576 ** -0.5


def build_mla_sparse_prefill(torch, x: SparsePrefillInputs):
    import mla

    out, lse, ws = preallocated(torch, x.q, lambda **o: mla.sparse_prefill_workspace_size(
        x.q, x.kv, x.indices, x.scale, **o))

    def run():
        mla.sparse_prefill(x.q, x.kv, x.indices, x.scale, out=out, lse=lse, workspace=ws)

    return run, lambda: out


def build_torch_sparse_prefill(torch, x: SparsePrefillInputs):
    """Gather the listed rows (timed), bmm, fp32 softmax, bmm: [s_q, topk, 576]
    gathered keys and [s_q, h_q, topk] scores in memory at once."""
    idx = x.indices.long()
    res = {}

    def run():
        kv = x.kv[idx]  # [s_q, topk, 576]
        s = torch.bmm(x.q, kv.transpose(1, 2))  # [s_q, h, topk]
        p = torch.softmax(s.float() * x.scale, dim=-1).to(torch.bfloat16)
        res["o"] = torch.bmm(p, kv[..., :512])

    return run, lambda: res["o"]


def build_flashmla_sparse_prefill(torch, x: SparsePrefillInputs):
    import flash_mla

    if not hasattr(flash_mla, "flash_mla_sparse_fwd"):
        raise NotApplicable("this FlashMLA has no flash_mla_sparse_fwd")
    kv = x.kv.unsqueeze(1)  # [s_kv, h_kv = 1, 576]
    idx = x.indices.unsqueeze(1)  # [s_q, h_kv = 1, topk]
    res = {}

    def run():
        res["o"] = flash_mla.flash_mla_sparse_fwd(x.q, kv, idx, x.scale, d_v=512)[0]

    return run, lambda: res["o"]


SPARSE_DECODE = {"mla": build_mla_sparse_decode, "torch": build_torch_sparse_decode,
                 "flashmla": build_flashmla_sparse_decode}
SPARSE_PREFILL = {"mla": build_mla_sparse_prefill, "torch": build_torch_sparse_prefill,
                  "flashmla": build_flashmla_sparse_prefill}
TOPK = {"mla": build_mla_topk, "torch": build_torch_topk}
INDEXER_DECODE = {"mla": build_mla_indexer_decode, "torch": build_torch_indexer_decode}
DESCRIPTIONS = {
    ("sparse-decode", "torch"): "gather + bmm + fp32 softmax + bmm (gather timed)",
    ("sparse-prefill", "torch"): "gather + bmm + fp32 softmax + bmm (gather timed)",
    ("topk", "torch"): "torch.topk(sorted=True)",
    ("indexer-decode", "torch"): "bf16 bmm + ReLU + weighted head sum over dense keys",
}
