"""Rotary position embedding as DeepSeek-V3/V3.2 apply it (mla/rope.hpp)."""

from __future__ import annotations

import ctypes
import dataclasses

from . import _call
from ._lib import MlaRopeConfig, c_struct, choice, expect_type, filled, lib
from ._call import Call, dtype_name

LAYOUTS = {"interleaved": 0, "half_split": 1}


@dataclasses.dataclass
class RopeConfig:
    """YaRN parameters, named as in the model configs; defaults: DeepSeek-V3/V3.2."""

    dim: int = 64
    theta: float = 10000.0
    factor: float = 40.0
    original_max_position: int = 4096
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 1.0
    mscale_all_dim: float = 1.0

    @classmethod
    def _from_c(cls, c: MlaRopeConfig) -> "RopeConfig":
        return cls(**{f.name: getattr(c, f.name) for f in dataclasses.fields(cls)})

    @classmethod
    def deepseek_v3(cls) -> "RopeConfig":
        return cls._from_c(filled(MlaRopeConfig, "mla_rope_default_config"))

    def _c(self, path: str = "config") -> MlaRopeConfig:
        return c_struct(MlaRopeConfig, path, dataclasses.asdict(self))


def _config(config) -> MlaRopeConfig:
    """The C struct of a rope function's `config` argument (None: the defaults)."""
    config = RopeConfig() if config is None else config
    expect_type(config, RopeConfig, "config")
    return config._c()


def rope_inv_freq(config: RopeConfig | None = None, *, dtype: str = "f64"):
    """inv_freq [dim/2] (NumPy, f64 or f32): YaRN-scaled inverse frequencies."""
    import numpy as np

    cfg = _config(config)
    out = np.empty(max(cfg.dim, 0) // 2, _call.numpy_dtype(dtype))
    c = Call(out)
    c.run("mla_rope_inv_freq", ctypes.byref(cfg), c.t(out, "inv_freq", True))
    return out


def rope_attention_factor(config: RopeConfig | None = None) -> float:
    """The factor cos/sin are multiplied by (1 for DeepSeek-V3)."""
    cfg = _config(config)
    v = ctypes.c_double(0)
    lib().call("mla_rope_attention_factor", ctypes.byref(cfg), ctypes.byref(v))
    return v.value


def apply_rope(x, positions, config: RopeConfig | None = None, layout: str = "interleaved", *,
               out=None, stream=None):
    """Rotates x [T, heads, dim] (f32; f64 on CPU) by positions [T] (int32/int64).
    layout 'interleaved' pairs (2i, 2i+1) (MLA's q_rope/k_rope), 'half_split' pairs
    (i, i + dim/2) (V3.2's indexer). out may be x (in place); allocated otherwise."""
    layout_code = choice(layout, LAYOUTS, "layout")
    cfg = _config(config)
    if out is None:
        out = _call.empty(x, tuple(getattr(x, "shape", ())), dtype_name(x))
    c = Call(x, stream)
    c.run("mla_apply_rope", c.t(x, "x"), c.t(positions, "positions"), c.t(out, "out", True),
          ctypes.byref(cfg), layout_code, c.stream_arg)
    return out
