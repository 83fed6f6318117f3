"""The planner (mla/plan.hpp; docs/planner.md): KV bytes, capacity, roofline and the
recommended MLA/DSA configuration for a GPU, a model and a workload. Plain arithmetic
in the C++ library: no GPU is touched.

    import mla
    p = mla.make_plan(model="deepseek-v3", gpu="h200", context=32768)
    p["formats"][0]["kv_bytes_per_token"]      # 61 layers x 1152 B = 70272
"""

from __future__ import annotations

import ctypes
import json
import os

from . import errors
from ._lib import MlaPlanWorkload, c_struct, filled, lib

_STR_FIELDS = ("model", "gpu", "phase", "kv")
_FIELDS = [name for name, _ in MlaPlanWorkload._fields_]


def default_workload() -> dict:
    """plan::Workload's defaults as a dict (batch 0 = the largest that fits)."""
    w = filled(MlaPlanWorkload, "mla_plan_default_workload")
    return {f: (getattr(w, f).decode() if f in _STR_FIELDS else getattr(w, f)) for f in _FIELDS}


def _workload(fields: dict) -> MlaPlanWorkload:
    unknown = set(fields) - set(_FIELDS)
    if unknown:
        raise errors.InvalidValueError(
            f"unknown workload field(s) {sorted(unknown)}; known: {_FIELDS}")
    d = default_workload()
    d.update({k: v for k, v in fields.items() if v is not None})
    return c_struct(MlaPlanWorkload, "", d)


def _calibration_text(calibration) -> bytes | None:
    """None; a dict (the docs/planner.md schema); JSON text; or a path to a JSON file."""
    if calibration is None:
        return None
    if isinstance(calibration, dict):
        return json.dumps(calibration).encode()
    if isinstance(calibration, (str, os.PathLike)) and not str(calibration).lstrip().startswith("{"):
        with open(calibration, encoding="utf-8") as f:
            return f.read().encode()
    return str(calibration).encode()


def plan_json(*, calibration=None, **workload) -> str:
    """The plan as pretty-printed JSON (plan::render_json). Keyword arguments are the
    fields of plan::Workload (model, gpu, phase, kv, batch, context, new_tokens, tp,
    weight_shards, topk, mem_util); the rest keep their defaults. A bad value raises
    InvalidValueError naming it."""
    w = _workload(workload)
    return lib().call_text("mla_plan", ctypes.byref(w), _calibration_text(calibration), 0)


def plan_text(*, calibration=None, **workload) -> str:
    """The plan as the readable table of `mla plan` (plan::render_text)."""
    w = _workload(workload)
    return lib().call_text("mla_plan", ctypes.byref(w), _calibration_text(calibration), 1)


def make_plan(*, calibration=None, **workload) -> dict:
    """plan_json, parsed."""
    return json.loads(plan_json(calibration=calibration, **workload))


def seed_check_json() -> str:
    return lib().call_text("mla_plan_seed_check", 0)


def seed_check_text() -> str:
    return lib().call_text("mla_plan_seed_check", 1)


def seed_check() -> list:
    """The seeds' claims checked against our numbers: dicts with seed, where, claim,
    ours, verdict ("right", "plausible", "approx", "wrong", "impossible"), reason."""
    return json.loads(seed_check_json())


def _catalog() -> dict:
    return json.loads(lib().call_text("mla_plan_catalog"))


def known_gpus() -> list:
    """Every GPU the planner knows: datasheet numbers, our measurements where present."""
    return _catalog()["gpus"]


def known_models() -> list:
    """Every model the planner knows, with its dimensions and sources."""
    return _catalog()["models"]
