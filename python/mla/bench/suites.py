"""PERF.md's benchmark suites as shapes (/work/shared/PERF.md, 'The suite')."""

from __future__ import annotations

import dataclasses
import random

D_QK, D_V = 576, 512
ENTRY_BYTES = {"bf16": 1152, "fp8_ds_mla": 656}


@dataclasses.dataclass(frozen=True)
class DecodeCase:
    suite: str
    batch: int
    h_q: int
    s_q: int
    lengths: tuple  # per request
    fmt: str = "bf16"
    page: int = 64

    @property
    def label(self) -> str:
        L = self.lengths
        ctx = f"L{L[0] // 1024}K" if len(set(L)) == 1 and L[0] % 1024 == 0 else \
            (f"L{L[0]}" if len(set(L)) == 1 else f"L~{sum(L) // len(L)}")
        return f"b{self.batch} h{self.h_q} s_q{self.s_q} {ctx} {self.fmt}"

    @property
    def group(self) -> str:
        """Cases of one group differ only in context length (one line per plot)."""
        return f"b{self.batch} h{self.h_q} s_q{self.s_q} {self.fmt}"

    @property
    def context(self) -> float:
        return sum(self.lengths) / len(self.lengths)

    def flops(self) -> float:
        """2 * h_q * keys * (576 + 512) per query token; causal among the s_q new tokens."""
        keys = sum(max(L - (self.s_q - 1 - i), 0) for L in self.lengths for i in range(self.s_q))
        return 2.0 * self.h_q * keys * (D_QK + D_V)

    def bytes(self) -> float:
        """Each cache entry read once per request, q read, out (bf16) and lse written."""
        kv = sum(self.lengths) * ENTRY_BYTES[self.fmt]
        rows = self.batch * self.s_q * self.h_q
        return kv + rows * (D_QK * 2 + D_V * 2 + 4)


def _uniform(suite, b, h, s_q, Ls, fmts):
    return [DecodeCase(suite, b, h, s_q, (L,) * b, f) for f in fmts for L in Ls]


def decode_cases(quick: bool) -> dict[str, list[DecodeCase]]:
    K = 1024
    fmts = ["bf16", "fp8_ds_mla"]
    rnd = random.Random(0)
    if quick:
        return {
            "decode-128": _uniform("decode-128", 64, 128, 1, [4 * K, 16 * K], ["bf16"]),
            "decode-tp": _uniform("decode-tp", 128, 16, 1, [4 * K, 16 * K], ["bf16"]),
            "decode-varlen": [DecodeCase("decode-varlen", 4, 16, 4, (4641, 45118, 1730, 1696))],
        }
    out = {"decode-128": [], "decode-tp": [], "decode-varlen": [], "decode-long": []}
    for b in (128, 64):
        for s_q in (1, 2):
            out["decode-128"] += _uniform("decode-128", b, 128, s_q, [4 * K, 8 * K, 16 * K, 32 * K],
                                          fmts)
    for h in (16, 32):
        out["decode-tp"] += _uniform("decode-tp", 128, h, 1, [4 * K, 8 * K, 16 * K, 32 * K], fmts)
    out["decode-varlen"] = [
        DecodeCase("decode-varlen", 4, 16, 4, (4641, 45118, 1730, 1696)),
        DecodeCase("decode-varlen", 64, 16, 4, tuple(rnd.randint(256, 1024) for _ in range(64))),
        DecodeCase("decode-varlen", 1, 16, 1, (64 * K,)),
        DecodeCase("decode-varlen", 132, 16, 4, (4 * K,) * 132),
    ]
    for b in (1, 8):
        out["decode-long"] += _uniform("decode-long", b, 128, 1, [128 * K, 256 * K], ["bf16"])
    return out
