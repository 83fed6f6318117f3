"""The whole DeepSeek-V3.2 attention layer forward (mla/layer.hpp): projections,
norms, YaRN RoPE, the lightning indexer, cache append, attention (absorbed,
non-absorbed or sparse), W_UV and the output projection, with seeded synthetic
weights. CPU arrays run the fp64 reference; CUDA arrays the GPU composition
(cuBLAS projections + our kernels; absorbed and sparse paths; not yet run on a GPU)."""

from __future__ import annotations

import ctypes
import dataclasses

from . import _call, errors
from ._call import Call, dtype_name
from ._lib import MlaLayerConfig, MlaTensor, c_struct, c_value, choice, expect_type, filled, lib
from .rope import RopeConfig

ATTENTION = {"absorbed": 0, "non_absorbed": 1, "sparse": 2}
WEIGHT_COUNT = 13


@dataclasses.dataclass
class LayerConfig:
    """Mirror of mla::LayerConfig; defaults: DeepSeek-V3.2's layer."""

    hidden: int = 7168
    q_lora_rank: int = 1536
    kv_lora_rank: int = 512
    heads: int = 128
    d_nope: int = 128
    d_rope: int = 64
    d_v: int = 128
    index_topk: int = 2048
    norm_eps: float = 1e-6
    softmax_scale: float = 0.0  # 0: V3.2's rule, see softmax_scale_value()
    rope: RopeConfig = dataclasses.field(default_factory=RopeConfig)

    @classmethod
    def _from_c(cls, c: MlaLayerConfig) -> "LayerConfig":
        names = [f.name for f in dataclasses.fields(cls) if f.name != "rope"]
        return cls(**{n: getattr(c, n) for n in names}, rope=RopeConfig._from_c(c.rope))

    @classmethod
    def deepseek_v32(cls) -> "LayerConfig":
        return cls._from_c(filled(MlaLayerConfig, "mla_layer_default_config"))

    @classmethod
    def small_test(cls) -> "LayerConfig":
        """hidden 256, 8 heads, q latent 64, d_nope = d_v = 32, top-k 64."""
        return cls._from_c(filled(MlaLayerConfig, "mla_layer_small_test_config"))

    def _c(self, path: str = "config") -> MlaLayerConfig:
        expect_type(self.rope, RopeConfig, f"{path}.rope")
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["rope"] = self.rope._c(f"{path}.rope")
        return c_struct(MlaLayerConfig, path, fields)

    def softmax_scale_value(self) -> float:
        v = ctypes.c_double(0)
        cfg = self._c()
        lib().call("mla_layer_softmax_scale", ctypes.byref(cfg), ctypes.byref(v))
        return v.value


def _config(config) -> MlaLayerConfig:
    """The C struct of a layer function's `config` argument (None: V3.2's layer)."""
    config = LayerConfig() if config is None else config
    expect_type(config, LayerConfig, "config")
    return config._c()


def layer_weight_shapes(config: LayerConfig | None = None) -> dict[str, tuple]:
    """name -> shape of each weight, in the C ABI's order (Linear weights [out, in])."""
    return _weight_shapes(_config(config))


def _weight_shapes(cfg: MlaLayerConfig) -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    for i in range(WEIGHT_COUNT):
        name = ctypes.c_char_p()
        ndim = ctypes.c_int32(0)
        shape = (ctypes.c_int64 * 3)()
        lib().call("mla_layer_weight_shape", ctypes.byref(cfg), i, ctypes.byref(name),
                   ctypes.byref(ndim), shape)
        out[name.value.decode()] = tuple(shape[d] for d in range(ndim.value))
    return out


def _weight_array(c: Call, cfg: MlaLayerConfig, weights, writable: bool):
    """The C array of WEIGHT_COUNT tensor pointers (NULL for a weight not given); the
    weights are written (init_layer_weights) or only read (layer_forward)."""
    expect_type(weights, dict, "weights")
    names = list(_weight_shapes(cfg))
    unknown = set(weights) - set(names)
    if unknown:
        raise errors.InvalidValueError(
            f"weights: unknown names {sorted(unknown)}; expected some of {names}")
    arr = (ctypes.POINTER(MlaTensor) * WEIGHT_COUNT)()
    for i, n in enumerate(names):
        ref = c.t(weights.get(n), f"weights.{n}", writable)
        if ref is not None:
            arr[i] = ctypes.pointer(ref._obj)
    return arr


def init_layer_weights(config: LayerConfig | None = None, seed: int = 0, dtype: str = "f64",
                       indexer: bool = True) -> dict:
    """Seeded synthetic weights (NumPy, f64 or f32): Linear [out, in] uniform in
    +-sqrt(3 / in), norm weights 1 + U(-0.1, 0.1), LayerNorm bias U(-0.1, 0.1).
    Without `indexer`, the indexer's five weights are left out (dense paths only)."""
    import numpy as np

    cfg = _config(config)
    weights = {n: np.empty(s, _call.numpy_dtype(dtype)) for n, s in _weight_shapes(cfg).items()
               if indexer or not n.startswith("idx_")}
    c = Call(next(iter(weights.values())))
    arr = _weight_array(c, cfg, weights, writable=True)
    c.run("mla_layer_init_weights", ctypes.byref(cfg), c_value(ctypes.c_uint64, seed, "seed"),
          arr)
    return weights


def layer_forward(config: LayerConfig, weights: dict, hidden, kv_cache, block_table,
                  cache_seqlens, attention: str = "absorbed", *, index_cache=None,
                  kv_format=None, out=None, workspace=None, stream=None):
    """One step of B requests with s_q new tokens each: hidden [B, s_q, hidden]
    (f32/f64) -> out [B, s_q, hidden]. The new tokens' latent (and, when
    index_cache is given, indexer) entries are written into the caches at
    positions cache_seqlens[b] - s_q ... cache_seqlens[b] - 1. attention:
    'absorbed' (decode), 'non_absorbed' (prefill) or 'sparse' (DSA: needs
    index_cache and page size 64). CPU: f32/f64 (bf16 too) arrays, exact reference.
    CUDA: hidden bf16, matrix weights bf16, norm weights f32; `workspace` (bytes on
    hidden's device) is allocated with hidden's framework when not given."""
    attention_code = choice(attention, ATTENTION, "attention")
    fmt = _call.kv_format_of(kv_cache, kv_format)
    if out is None:
        shape = tuple(getattr(hidden, "shape", ()))
        out = _call.empty(hidden, shape, dtype_name(hidden))
    cfg = _config(config)
    c = Call(hidden, stream)
    arr = _weight_array(c, cfg, weights, writable=False)
    common = (ctypes.byref(cfg), arr, c.t(hidden, "hidden"),
              c.cache(kv_cache, "kv", fmt, writable=True), fmt,
              c.t(index_cache, "index_cache", True), c.t(block_table, "block_table"),
              c.t(cache_seqlens, "cache_seqlens"), attention_code, c.t(out, "out", True))
    if workspace is None:
        n = ctypes.c_size_t(0)
        c.run("mla_layer_workspace_size", *common, ctypes.byref(n))
        if n.value:
            workspace = _call.empty(hidden, (n.value,), "u8")
    ws_ptr, ws_bytes = c.workspace(workspace)
    c.run("mla_layer_forward", *common, ws_ptr, ws_bytes, c.stream_arg)
    return out
