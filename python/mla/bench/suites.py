"""The benchmark suites of docs/benchmarks.md as shapes."""

from __future__ import annotations

import dataclasses
import random
import string

D_QK, D_V = 576, 512
ENTRY_BYTES = {"bf16": 1152, "fp8_ds_mla": 656}
INDEXER_HEADS, INDEXER_DIM, INDEXER_TOKEN_BYTES = 64, 128, 132
K = 1024
# What each kind's throughput plot puts on its x axis (the case's `x`).
X_LABELS = {"decode": "context length (keys per request, mean)",
            "sparse-decode": "query heads (top-k keys each, cache of s_k per request)",
            "topk": "logits per row", "indexer-decode": "context length (keys per request)",
            "prefill": "keys per sequence (prefix + new)",
            "sparse-prefill": "keys the lists select from (s_kv)"}


def _k(n: int) -> str:
    """4096 -> '4K'; sizes that are not whole K stay as they are."""
    return f"{n // K}K" if n % K == 0 else str(n)


class _Names(string.Formatter):
    """str.format with one more spec: "{n:k}" writes n as _k does (4096 -> 4K)."""

    def format_field(self, value, spec):
        return _k(value) if spec == "k" else super().format_field(value, spec)


_NAMES = _Names()


class _Case:
    """What every case gives the comparison: suite, kind, label (one shape), group
    (shapes that differ only in x: one line per plot), x, flops(), bytes(). A case
    class may give label and group as templates of its fields (label_format,
    group_format) and x as the name of a field (x_field)."""

    label_format = group_format = x_field = ""

    @property
    def label(self) -> str:
        return _NAMES.format(self.label_format, **dataclasses.asdict(self))

    @property
    def group(self) -> str:
        return _NAMES.format(self.group_format, **dataclasses.asdict(self))

    @property
    def x(self):
        return getattr(self, self.x_field)

    def fields(self) -> dict:
        d = dataclasses.asdict(self)
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}

    @property
    def context(self) -> float:
        return float(self.x)


@dataclasses.dataclass(frozen=True)
class DecodeCase(_Case):
    kind = "decode"
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
    def x(self) -> float:
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


@dataclasses.dataclass(frozen=True)
class SparseDecodeCase(_Case):
    """Sparse absorbed decode: each query token attends `topk` distinct keys of its
    request's s_k cached ones."""
    kind = "sparse-decode"
    suite: str
    batch: int
    h_q: int
    s_q: int
    s_k: int
    topk: int
    fmt: str = "bf16"
    label_format = "b{batch} h{h_q} s_q{s_q} s_k{s_k:k} top{topk} {fmt}"
    group_format = "b{batch} s_q{s_q} top{topk} {fmt}"
    x_field = "h_q"

    def flops(self) -> float:
        """2 * h_q * keys * (576 + 512) per query token, keys = topk."""
        return 2.0 * self.h_q * self.topk * (D_QK + D_V) * self.batch * self.s_q

    def bytes(self) -> float:
        """Each listed entry read once per query token (the lists of a request's s_q
        tokens are drawn independently), the index lists, q, out (bf16) and lse."""
        lists = self.batch * self.s_q * self.topk
        rows = self.batch * self.s_q * self.h_q
        return lists * (ENTRY_BYTES[self.fmt] + 4) + rows * (D_QK * 2 + D_V * 2 + 4)


@dataclasses.dataclass(frozen=True)
class SparsePrefillCase(_Case):
    """Sparse prefill over a flat key array: each of s_q query tokens attends the
    `topk` rows of kv [s_kv, 576] its own list names (bf16)."""
    kind = "sparse-prefill"
    suite: str
    s_q: int
    h_q: int
    s_kv: int
    topk: int
    label_format = "s_q{s_q:k} h{h_q} s_kv{s_kv:k} top{topk}"
    group_format = "s_q{s_q:k} h{h_q} top{topk}"
    x_field = "s_kv"

    def flops(self) -> float:
        """2 * h_q * topk * (576 + 512) per query token."""
        return 2.0 * self.h_q * self.topk * (D_QK + D_V) * self.s_q

    def bytes(self) -> float:
        """Each listed row once per query token, the lists, q, out (bf16) and lse."""
        rows = self.s_q * self.h_q
        return self.s_q * self.topk * (ENTRY_BYTES["bf16"] + 4) + \
            rows * (D_QK * 2 + D_V * 2 + 4)


@dataclasses.dataclass(frozen=True)
class TopkCase(_Case):
    """Top-k of fp32 logits rows."""
    kind = "topk"
    suite: str
    rows: int
    n: int
    k: int = 2048
    label_format = "{rows} x {n:k} k{k}"
    group_format = "{rows} rows k{k}"
    x_field = "n"

    def flops(self) -> float:
        return 0.0  # no tensor-core work: memory-bound

    def bytes(self) -> float:
        """Logits read once, int32 indices written."""
        return self.rows * (self.n + self.k) * 4.0


@dataclasses.dataclass(frozen=True)
class IndexerDecodeCase(_Case):
    """Lightning-indexer logits of s_q new tokens over a paged fp8 key cache."""
    kind = "indexer-decode"
    suite: str
    batch: int
    s_q: int
    length: int  # cached keys per request, the s_q new tokens included
    label_format = "b{batch} s_q{s_q} L{length:k}"
    group_format = "b{batch} s_q{s_q}"
    x_field = "length"

    def keys_seen(self) -> int:
        return self.batch * sum(self.length - (self.s_q - 1 - i) for i in range(self.s_q))

    def flops(self) -> float:
        """2 * 64 * 128 per (query, key) pair the causal limit lets through."""
        return 2.0 * INDEXER_HEADS * INDEXER_DIM * self.keys_seen()

    def bytes(self) -> float:
        """Keys (132 B/token) once per request, fp8 q and fp32 weights, fp32 logits out."""
        q = self.batch * self.s_q * INDEXER_HEADS * (INDEXER_DIM + 4)
        return self.batch * self.length * INDEXER_TOKEN_BYTES + q + \
            self.batch * self.s_q * self.length * 4.0


@dataclasses.dataclass(frozen=True)
class PrefillCase(_Case):
    """Non-absorbed causal prefill (bottom-right aligned): `new` queries over
    prefix + new keys, h heads, d_qk 192, d_v 128."""
    kind = "prefill"
    suite: str
    new: int
    prefix: int = 0
    heads: int = 128
    d_qk: int = 192
    d_v: int = 128

    @property
    def label(self) -> str:
        if self.prefix == 0:
            return f"b1 h{self.heads} L{_k(self.new)} causal"
        return f"b1 h{self.heads} {_k(self.new)} new over {_k(self.prefix)}"

    @property
    def group(self) -> str:
        return "causal" if self.prefix == 0 else f"chunked, {_k(self.new)} new"

    @property
    def x(self) -> int:
        return self.prefix + self.new

    def pairs(self) -> int:
        """(query, key) pairs under the causal mask: query i sees prefix + i + 1 keys."""
        return self.new * self.prefix + self.new * (self.new + 1) // 2

    def flops(self) -> float:
        return 2.0 * self.heads * (self.d_qk + self.d_v) * self.pairs()

    def bytes(self) -> float:
        """q and out, k and v (bf16) once, lse (f32) out."""
        per = self.heads * (self.d_qk + self.d_v) * 2
        return per * (self.new + self.prefix + self.new) + self.heads * self.new * 4.0


def dsa_and_prefill_cases(quick: bool) -> dict[str, list]:
    """The sparse-decode, topk, indexer (decode) and prefill suites."""
    fmts = ["bf16", "fp8_ds_mla"]
    if quick:
        return {
            "sparse-decode": [SparseDecodeCase("sparse-decode", 128, h, 1, 32 * K, 2048, f)
                              for f in fmts for h in (32, 128)],
            "topk": [TopkCase("topk", 128, 128 * K), TopkCase("topk", 4096, 32 * K)],
            "indexer-decode": [IndexerDecodeCase("indexer-decode", 128, 1, 32 * K)],
            "prefill": [PrefillCase("prefill", L) for L in (8 * K, 16 * K)],
            "sparse-prefill": [SparsePrefillCase("sparse-prefill", 4 * K, 128, L, 2048)
                               for L in (8 * K, 128 * K)],
        }
    out = {"sparse-decode": [], "topk": [], "indexer-decode": [], "prefill": []}
    for f in fmts:
        for b in (128, 64):
            for s_q in (1, 2):
                out["sparse-decode"] += [SparseDecodeCase("sparse-decode", b, h, s_q, 32 * K,
                                                          2048, f) for h in (16, 32, 64, 128)]
        # Issue 15's long list: FlashMLA reports 460 TF/s for its fp8 kernel at top-k 32768.
        out["sparse-decode"].append(SparseDecodeCase("sparse-decode", 128, 128, 1, 64 * K,
                                                     16 * K, f))
    out["topk"] = [TopkCase("topk", 128, 128 * K), TopkCase("topk", 4096, 32 * K),
                   TopkCase("topk", 1, 1024 * K)]
    out["indexer-decode"] = [IndexerDecodeCase("indexer-decode", 128, s_q, L)
                             for s_q in (1, 2) for L in (32 * K, 128 * K)]
    out["prefill"] = [PrefillCase("prefill", L) for L in (8 * K, 16 * K, 32 * K)] + \
        [PrefillCase("prefill", 4 * K, p) for p in (0, 16 * K, 64 * K)]
    # FlashMLA's sparse prefill shapes (top-2048), h_q 64, and a longer prompt.
    out["sparse-prefill"] = [SparsePrefillCase("sparse-prefill", s_q, h, L, 2048)
                             for (s_q, h) in ((4 * K, 128), (4 * K, 64), (16 * K, 128))
                             for L in (8 * K, 32 * K, 128 * K)]
    return out


def all_cases(quick: bool) -> dict[str, list]:
    """Every suite the comparison runs, in order."""
    return {**decode_cases(quick), **dsa_and_prefill_cases(quick)}
