"""Can this machine and build run mla? (mla/support.hpp, mla_is_supported)

    import mla
    report = mla.is_supported()          # the current CUDA device (or cuda:0)
    if not report:                       # False unless every family is supported
        print(report.reasons["decode"])  # e.g. "no CUDA GPU: no NVIDIA driver is installed"
    mla.is_supported("cuda:1", "sparse_decode")  # -> bool
"""

from __future__ import annotations

import ctypes
import dataclasses
import sys

from . import errors
from ._lib import lib

FAMILIES = ("decode", "sparse_decode", "sparse_prefill", "indexer", "topk", "prefill",
            "kv_cache")


@dataclasses.dataclass
class SupportReport:
    """Per family: runs here (bool) and, where not, why."""

    device: str
    families: dict
    reasons: dict

    def __bool__(self) -> bool:
        return all(self.families.values())

    def __getitem__(self, family: str) -> bool:
        return self.families[family]


def _device_id(device) -> tuple[str, int]:
    """('cpu', -1) or ('cuda:N', N) for None, an int, 'cpu', 'cuda', 'cuda:N' or a
    torch.device."""
    if device is None:
        idx = 0
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            idx = torch.cuda.current_device()
        return f"cuda:{idx}", idx
    if isinstance(device, int):
        return (f"cuda:{device}", device) if device >= 0 else ("cpu", -1)
    text = str(device)
    if text == "cpu":
        return "cpu", -1
    if text == "cuda":
        return _device_id(None)
    if text.startswith("cuda:") and text[5:].isdigit():
        return text, int(text[5:])
    raise errors.InvalidValueError(
        f"device = {device!r}: expected None, an index, 'cpu', 'cuda' or 'cuda:N'")


def is_supported(device=None, family: str | None = None):
    """Whether mla's kernels run on `device` (the current CUDA device when None) in
    this build: a SupportReport over every family, or a bool for one `family`. The
    CPU ('cpu') runs everything on the exact reference."""
    name, idx = _device_id(device)
    L = lib()
    wanted = FAMILIES if family is None else (family,)
    fams, reasons = {}, {}
    for f in wanted:
        if f not in FAMILIES:
            raise errors.InvalidValueError(f"family = {f!r}: one of {', '.join(FAMILIES)}")
        ok = ctypes.c_int32(0)
        if not L.has("mla_is_supported"):
            raise errors.UnsupportedError(f"{L.path} predates mla_is_supported: rebuild it")
        text = L.call_text("mla_is_supported", FAMILIES.index(f), idx, ctypes.byref(ok))
        fams[f], reasons[f] = bool(ok.value), text
    if family is not None:
        return fams[family]
    return SupportReport(device=name, families=fams, reasons=reasons)
