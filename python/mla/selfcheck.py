"""The self check (mla/self_check.hpp, mla_self_check): each kernel family on GPU 0 against
the CPU reference on small random inputs, as `mla check` and `python -m mla check` run it.

    import mla
    r = mla.self_check(seed=1)
    print(r.text, end="")     # what `mla check` prints
    r.status                  # 0 every check passed, 1 a check failed, 77 no CUDA GPU
"""

from __future__ import annotations

import ctypes
import dataclasses
import json

from . import errors
from ._lib import lib

PASSED, FAILED, NO_GPU = 0, 1, 77  # SelfCheckResult.status, the exit codes of `mla check`


@dataclasses.dataclass
class SelfCheckItem:
    """One kernel family's check: ok, and what was compared (or what differed)."""

    name: str
    shape: str
    ok: bool
    detail: str
    line: str  # the report line


@dataclasses.dataclass
class SelfCheckResult:
    status: int        # PASSED, FAILED or NO_GPU
    header: str        # the GPU and seed, or why nothing runs
    checks: list       # SelfCheckItem, in the order they ran (empty when nothing ran)
    summary: str       # the verdict ("" when nothing ran)
    text: str          # the whole report, as `mla check` prints it

    def __bool__(self) -> bool:
        return self.status == PASSED


def self_check(seed: int = 1) -> SelfCheckResult:
    """Runs the checks with inputs drawn from `seed` (0 <= seed < 2**64) on GPU 0; the
    verdict is the result's status, never an exception (a bad seed is InvalidValueError)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 64:
        raise errors.InvalidValueError(
            f"seed = {seed!r}: expected an integer in [0, 2**64)")
    result = ctypes.c_int32(-1)
    report = json.loads(lib().call_text("mla_self_check", seed, ctypes.byref(result)))
    checks = [SelfCheckItem(c["name"], c["shape"], c["ok"], c["detail"], c["line"])
              for c in report["checks"]]
    return SelfCheckResult(result.value, report["header"], checks, report["summary"],
                           report["text"])
