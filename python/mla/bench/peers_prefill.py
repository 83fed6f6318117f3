"""Non-absorbed causal prefill under test: ours (mla.mha_prefill) and PyTorch's
scaled_dot_product_attention on its cuDNN backend (docs/benchmarks.md's peer), built as in
peers.py."""

from __future__ import annotations

from .peers import NotApplicable


class PrefillInputs:
    """One sequence: q [new, h, 192], k [prefix + new, h, 192], v [.., h, 128] bf16."""

    def __init__(self, torch, case, seed: int = 0, device="cuda"):
        g = torch.Generator(device=device).manual_seed(seed)
        self.case, self.device = case, device
        T, Tk, h = case.new, case.prefix + case.new, case.heads

        def rnd(*shape):
            return torch.randn(*shape, generator=g, device=device, dtype=torch.bfloat16)

        self.q, self.k, self.v = rnd(T, h, case.d_qk), rnd(Tk, h, case.d_qk), rnd(Tk, h, case.d_v)
        self.cu_q = torch.tensor([0, T], dtype=torch.int32, device=device)
        self.cu_k = torch.tensor([0, Tk], dtype=torch.int32, device=device)
        self.scale = case.d_qk ** -0.5


def build_mla_prefill(torch, x: PrefillInputs):
    import mla

    c = x.case
    out = torch.empty(c.new, c.heads, c.d_v, dtype=torch.bfloat16, device=x.device)
    lse = torch.empty(c.heads, c.new, dtype=torch.float32, device=x.device)

    def run():
        mla.mha_prefill(x.q, x.k, x.v, x.cu_q, x.cu_k, x.scale, True, out=out, lse=lse)

    return run, lambda: out


def build_torch_prefill(torch, x: PrefillInputs):
    """F.scaled_dot_product_attention, is_causal, cuDNN backend on CUDA (the default
    backends on the CPU, where only the smoke test runs it). [T, h, d] tensors are
    passed as [1, h, T, d] views, the layout SDPA's fused kernels expect."""
    c = x.case
    if c.prefix:
        raise NotApplicable("SDPA's is_causal is top-left aligned when queries < keys")
    F = torch.nn.functional
    q, k, v = (t.transpose(0, 1).unsqueeze(0) for t in (x.q, x.k, x.v))
    res = {}
    if str(x.device).startswith("cpu"):
        def run():
            res["o"] = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=x.scale)
    else:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def run():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                res["o"] = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                          scale=x.scale)

    return run, lambda: res["o"][0].transpose(0, 1)


PREFILL = {"mla": build_mla_prefill, "torch": build_torch_prefill}
DESCRIPTIONS = {("prefill", "torch"): "F.scaled_dot_product_attention, cuDNN backend"}
