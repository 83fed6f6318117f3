"""Loads libmla.so and declares the C ABI (include/mla/c_api.h) for ctypes.

Search order for the library:
  1. the file named by the environment variable MLA_LIBRARY (when set, only that);
  2. the package directory (``mla/libmla.so`` or ``mla/_lib/libmla.so``: where
     ``pip install .`` puts it);
  3. the build trees of the source checkout: ``<repo>/build/libmla.so``, then
     ``<repo>/build*/libmla.so``, newest first.

Nothing here imports a framework: ctypes and the standard library only.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from pathlib import Path

from . import errors

ABI_VERSION = 3  # MLA_C_ABI_VERSION this package was written against
MAX_DIMS = 6

# Status, dtype, device and cache-format codes (c_api.h enums).
OK = 0
DTYPE_CODES = {"f32": 0, "f64": 1, "bf16": 2, "f16": 3, "e4m3": 4, "u8": 5, "i32": 6, "i64": 7}
DTYPE_NAMES = {v: k for k, v in DTYPE_CODES.items()}
DTYPE_SIZES = {"f32": 4, "f64": 8, "bf16": 2, "f16": 2, "e4m3": 1, "u8": 1, "i32": 4, "i64": 8}
DEVICE_CPU, DEVICE_CUDA = 1, 2
KV_FORMATS = {"bf16": 0, "fp8_ds_mla": 1}


class MlaTensor(ctypes.Structure):
    """Mirror of ``mla_tensor`` (and so of ``mla::TensorView``)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("strides", ctypes.c_int64 * MAX_DIMS),
    ]


class MlaRopeConfig(ctypes.Structure):
    """Mirror of ``mla_rope_config`` (mla::RopeConfig)."""

    _fields_ = [
        ("dim", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("theta", ctypes.c_double),
        ("factor", ctypes.c_double),
        ("original_max_position", ctypes.c_int64),
        ("beta_fast", ctypes.c_double),
        ("beta_slow", ctypes.c_double),
        ("mscale", ctypes.c_double),
        ("mscale_all_dim", ctypes.c_double),
    ]


class MlaLayerConfig(ctypes.Structure):
    """Mirror of ``mla_layer_config`` (mla::LayerConfig)."""

    _fields_ = [
        ("hidden", ctypes.c_int64),
        ("q_lora_rank", ctypes.c_int32),
        ("kv_lora_rank", ctypes.c_int32),
        ("heads", ctypes.c_int32),
        ("d_nope", ctypes.c_int32),
        ("d_rope", ctypes.c_int32),
        ("d_v", ctypes.c_int32),
        ("index_topk", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("norm_eps", ctypes.c_double),
        ("softmax_scale", ctypes.c_double),
        ("rope", MlaRopeConfig),
    ]


class MlaBlockSparseParams(ctypes.Structure):
    """Mirror of ``mla_block_sparse_params`` (mla::BlockSparseParams)."""

    _fields_ = [(name, ctypes.c_int32) for name in (
        "block_size", "stride", "selected_block_size", "num_selected_blocks", "initial_blocks",
        "local_blocks", "sliding_window")]


class MlaPlanWorkload(ctypes.Structure):
    """Mirror of ``mla_plan_workload`` (mla::plan::Workload)."""

    _fields_ = [
        ("model", ctypes.c_char_p),
        ("gpu", ctypes.c_char_p),
        ("phase", ctypes.c_char_p),
        ("kv", ctypes.c_char_p),
        ("batch", ctypes.c_int64),
        ("context", ctypes.c_int64),
        ("new_tokens", ctypes.c_int32),
        ("tp", ctypes.c_int32),
        ("weight_shards", ctypes.c_int32),
        ("topk", ctypes.c_int32),
        ("mem_util", ctypes.c_double),
    ]


class MlaTransferSide(ctypes.Structure):
    """Mirror of ``mla_transfer_side`` (mla::TransferSide)."""

    _fields_ = [
        ("pages", ctypes.POINTER(ctypes.c_int32)),
        ("num_page_ids", ctypes.c_int64),
        ("num_pages", ctypes.c_int64),
        ("page_size", ctypes.c_int64),
        ("page_stride", ctypes.c_int64),
        ("layer_stride", ctypes.c_int64),
    ]


class MlaTransferRequest(ctypes.Structure):
    """Mirror of ``mla_transfer_request`` (mla::TransferRequest)."""

    _fields_ = [
        ("first_token", ctypes.c_int64),
        ("num_tokens", ctypes.c_int64),
        ("num_layers", ctypes.c_int32),
        ("src_format", ctypes.c_int32),
        ("dst_format", ctypes.c_int32),
        ("with_indexer", ctypes.c_int32),
        ("order", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("src_latent", MlaTransferSide),
        ("dst_latent", MlaTransferSide),
        ("src_indexer", MlaTransferSide),
        ("dst_indexer", MlaTransferSide),
    ]


class MlaCopyRun(ctypes.Structure):
    """Mirror of ``mla_copy_run`` (mla::CopyRun)."""

    _fields_ = [
        ("src_offset", ctypes.c_int64),
        ("dst_offset", ctypes.c_int64),
        ("bytes", ctypes.c_int64),
        ("layer", ctypes.c_int32),
        ("cache", ctypes.c_int32),
    ]


class MlaTransferPlanInfo(ctypes.Structure):
    """Mirror of ``mla_transfer_plan_info`` (the scalars of mla::TransferPlan)."""

    _fields_ = [
        ("num_runs", ctypes.c_int64),
        ("num_layer_begin", ctypes.c_int64),
        ("total_bytes", ctypes.c_int64),
        ("largest_run", ctypes.c_int64),
        ("order", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


class MlaTransferBuffers(ctypes.Structure):
    """Mirror of ``mla_transfer_buffers`` (mla::TransferBuffers)."""

    _fields_ = [
        ("latent", ctypes.POINTER(ctypes.c_void_p)),
        ("num_latent", ctypes.c_int64),
        ("indexer", ctypes.POINTER(ctypes.c_void_p)),
        ("num_indexer", ctypes.c_int64),
    ]


MASTER_ADDR_MAX = 256


class MlaLaunchInfo(ctypes.Structure):
    """Mirror of ``mla_launch_info`` (mla::LaunchInfo)."""

    _fields_ = [
        ("rank", ctypes.c_int32),
        ("world_size", ctypes.c_int32),
        ("local_rank", ctypes.c_int32),
        ("master_port", ctypes.c_int32),
        ("master_addr", ctypes.c_char * MASTER_ADDR_MAX),
    ]


# mla_getenv_fn: the value's address (c_void_p: a c_char_p result would point into a
# Python bytes object freed on return), or None for an unset variable.
GETENV_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)

class MlaDsaPolicy(ctypes.Structure):
    """Mirror of ``mla_dsa_policy`` (mla::DsaPolicy)."""

    _fields_ = [
        ("topk", ctypes.c_int32),
        ("path", ctypes.c_int32),
        ("dense_below", ctypes.c_int64),
        ("batch_invariant", ctypes.c_int32),
    ]


_T = ctypes.POINTER(MlaTensor)
_R = ctypes.POINTER(MlaRopeConfig)
_BSP = ctypes.POINTER(MlaBlockSparseParams)
_W = ctypes.POINTER(MlaPlanWorkload)
_cp = ctypes.c_char_p
_i32, _f32, _vp, _sz = ctypes.c_int32, ctypes.c_float, ctypes.c_void_p, ctypes.c_size_t

# name -> argtypes; every operation returns int32 status. Functions missing from
# the loaded library (an older build) raise UnsupportedError when called.
SIGNATURES: dict[str, list] = {
    "mla_is_supported": [_i32, _i32, ctypes.POINTER(_i32), ctypes.c_char_p, _sz,
                         ctypes.POINTER(_sz)],
    "mla_family_name": [_i32],
    "mla_validate_kv_cache": [_T, _i32],
    "mla_append_kv": [_T, _T, _T, _T, _i32, _vp],
    "mla_read_kv": [_T, _i32, _T, _T, _T, _vp],
    "mla_decode_workspace_size": [_T, _T, _i32, _T, _T, _f32, _i32, _T, _T, _i32,
                                  ctypes.POINTER(_sz)],
    "mla_decode": [_T, _T, _i32, _T, _T, _f32, _i32, _T, _T, _i32, _vp, _sz, _vp],
    "mla_decode_partial": [_T, _T, _i32, _T, _T, _f32, _i32, _T, _T, _T, _T, _vp],
    "mla_merge_attn_partials": [_T, _T, _T, _T, _vp],
    "mla_validate_indexer_cache": [_T],
    "mla_append_indexer_keys": [_T, _T, _T, _vp],
    "mla_quantize_indexer_query": [_T, _T, _T, _T, _vp],
    "mla_indexer_logits_decode": [_T, _T, _T, _T, _T, _T, _vp],
    "mla_indexer_logits_prefill": [_T, _T, _T, _T, _T, _T, _T, _vp],
    "mla_topk_indices": [_T, _T, _i32, _T, _T, _i32, _i32, ctypes.c_int64, _vp],
    "mla_sparse_decode": [_T, _T, _i32, _T, _T, _f32, _T, _T, _vp],
    "mla_sparse_prefill": [_T, _T, _i32, _T, _T, _f32, _T, _T, _vp],
    "mla_sparse_decode_workspace_size": [_T, _T, _i32, _T, _T, _f32, _T, _T, ctypes.POINTER(_sz)],
    "mla_sparse_decode_ws": [_T, _T, _i32, _T, _T, _f32, _T, _T, _vp, _sz, _vp],
    "mla_sparse_prefill_workspace_size": [_T, _T, _i32, _T, _T, _f32, _T, _T,
                                          ctypes.POINTER(_sz)],
    "mla_sparse_prefill_ws": [_T, _T, _i32, _T, _T, _f32, _T, _T, _vp, _sz, _vp],
    "mla_decompress_kv": [_T, _T, _T, _T, _T, _vp],
    "mla_mha_prefill": [_T, _T, _T, _T, _T, _f32, _i32, _T, _T, _vp],
    "mla_rope_inv_freq": [_R, _T],
    "mla_rope_attention_factor": [_R, ctypes.POINTER(ctypes.c_double)],
    "mla_apply_rope": [_T, _T, _T, _R, _i32, _vp],
    "mla_dsa_default_policy": [ctypes.POINTER(MlaDsaPolicy)],
    "mla_dsa_decode_path": [ctypes.c_int64, _i32, ctypes.POINTER(MlaDsaPolicy),
                            ctypes.POINTER(_i32)],
    "mla_dsa_decode_workspace_size": [_T, _T, _i32, _T, _T, ctypes.c_int64, _T, _T, _T, _T, _f32,
                                      _T, _T, ctypes.POINTER(MlaDsaPolicy), ctypes.POINTER(_sz)],
    "mla_dsa_decode": [_T, _T, _i32, _T, _T, ctypes.c_int64, _T, _T, _T, _T, _f32, _T, _T,
                       ctypes.POINTER(MlaDsaPolicy), _vp, _sz, _vp],
    "mla_dsa_dense_threshold": [_cp, _cp, _cp, _cp, _i32, _i32, _i32, _i32,
                                ctypes.POINTER(ctypes.c_int64)],
    "mla_block_sparse_default_params": [_BSP],
    "mla_layer_default_config": [ctypes.POINTER(MlaLayerConfig)],
    "mla_layer_small_test_config": [ctypes.POINTER(MlaLayerConfig)],
    "mla_layer_softmax_scale": [ctypes.POINTER(MlaLayerConfig), ctypes.POINTER(ctypes.c_double)],
    "mla_layer_weight_shape": [ctypes.POINTER(MlaLayerConfig), _i32, ctypes.POINTER(_cp),
                               ctypes.POINTER(_i32), ctypes.POINTER(ctypes.c_int64)],
    "mla_layer_init_weights": [ctypes.POINTER(MlaLayerConfig), ctypes.c_uint64, _vp],
    "mla_layer_workspace_size": [ctypes.POINTER(MlaLayerConfig), _vp, _T, _T, _i32, _T, _T, _T,
                                 _i32, _T, ctypes.POINTER(_sz)],
    "mla_layer_forward": [ctypes.POINTER(MlaLayerConfig), _vp, _T, _T, _i32, _T, _T, _T, _i32,
                          _T, _vp, _sz, _vp],
    "mla_validate_block_sparse_params": [_BSP],
    "mla_block_sparse_capacity": [_BSP, ctypes.POINTER(ctypes.c_int64)],
    "mla_block_sparse_num_presets": [],
    "mla_block_sparse_preset_at": [_i32, ctypes.POINTER(_cp), _BSP, ctypes.POINTER(_cp)],
    "mla_block_sparse_preset": [_cp, _BSP],
    "mla_block_sparse_select": [_T, _T, _i32, _T, _T, _BSP, _T, _T, _vp],
    "mla_plan_default_workload": [_W],
    "mla_plan": [_W, _cp, _i32, ctypes.c_char_p, _sz, ctypes.POINTER(_sz)],
    "mla_plan_seed_check": [_i32, ctypes.c_char_p, _sz, ctypes.POINTER(_sz)],
    "mla_plan_catalog": [ctypes.c_char_p, _sz, ctypes.POINTER(_sz)],
    "mla_transfer_cache_name": [_i32],
    "mla_plan_transfer": [ctypes.POINTER(MlaTransferRequest), ctypes.POINTER(MlaCopyRun), _sz,
                          ctypes.POINTER(ctypes.c_int64), _sz,
                          ctypes.POINTER(MlaTransferPlanInfo)],
    "mla_layer_bases": [_vp, ctypes.c_int64, _i32, ctypes.POINTER(_vp), _sz],
    "mla_execute_copy_plan": [ctypes.POINTER(MlaCopyRun), _sz,
                              ctypes.POINTER(MlaTransferBuffers),
                              ctypes.POINTER(MlaTransferBuffers)],
    "mla_launch_info_from_env": [ctypes.POINTER(MlaLaunchInfo), GETENV_FN, _vp],
    "mla_exchange_bytes_tcp": [ctypes.POINTER(MlaLaunchInfo), _vp, _sz, _i32],
    "mla_exchange_bytes_file": [ctypes.POINTER(MlaLaunchInfo), _cp, _vp, _sz, _i32],
}
# Functions that do not return a status (the rest return int32 MLA_OK / MLA_ERR_*).
RESTYPES = {"mla_dsa_default_policy": None, "mla_layer_default_config": None,
            "mla_layer_small_test_config": None,
            "mla_block_sparse_default_params": None, "mla_plan_default_workload": None,
            "mla_block_sparse_num_presets": _i32, "mla_transfer_cache_name": ctypes.c_char_p,
            "mla_family_name": ctypes.c_char_p}


def _source_root() -> Path:
    return Path(__file__).resolve().parent.parent.parent  # python/mla/_lib.py -> repo


def candidate_paths() -> list[Path]:
    """Where libmla.so is looked for, in order."""
    env = os.environ.get("MLA_LIBRARY")
    if env:  # explicit: that file and no other, so a stale build is never picked by accident
        return [Path(env)]
    out: list[Path] = []
    here = Path(__file__).resolve().parent
    out += [here / "libmla.so", here / "_lib" / "libmla.so"]
    root = _source_root()
    out.append(root / "build" / "libmla.so")
    others = [Path(p) for p in glob.glob(str(root / "build*" / "libmla.so"))]
    others = [p for p in others if p.parent.name != "build"]
    others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return out + others


class Library:
    """The loaded libmla.so with typed entry points."""

    def __init__(self, path: Path):
        self.path = path
        self._dll = ctypes.CDLL(str(path))
        d = self._dll
        d.mla_abi_version.restype = _i32
        d.mla_version.restype = ctypes.c_char_p
        d.mla_built_with_cuda.restype = _i32
        d.mla_last_error_message.restype = ctypes.c_char_p
        d.mla_status_name.restype = ctypes.c_char_p
        d.mla_status_name.argtypes = [_i32]
        d.mla_kv_entry_bytes.restype = _i32
        d.mla_kv_entry_bytes.argtypes = [_i32]
        if hasattr(d, "mla_rope_default_config"):
            d.mla_rope_default_config.restype = None
            d.mla_rope_default_config.argtypes = [_R]
        abi = d.mla_abi_version()
        if abi != ABI_VERSION:
            raise errors.LibraryNotFoundError(
                f"{path}: C ABI version {abi}, this mla package needs {ABI_VERSION}; "
                "rebuild the library or reinstall the package")
        self.version = d.mla_version().decode()
        self.built_with_cuda = bool(d.mla_built_with_cuda())
        self._fns: dict[str, object] = {}

    def fn(self, name: str):
        f = self._fns.get(name)
        if f is None:
            try:
                f = getattr(self._dll, name)
            except AttributeError:
                raise errors.UnsupportedError(
                    f"{name}: not in {self.path} (built from an older source tree?)") from None
            f.argtypes = SIGNATURES[name]
            f.restype = RESTYPES.get(name, _i32)
            self._fns[name] = f
        return f

    def has(self, name: str) -> bool:
        try:
            self.fn(name)
            return True
        except errors.UnsupportedError:
            return False

    def call(self, name: str, *args) -> None:
        """Calls a C function; a non-zero status raises the matching MlaError."""
        status = self.fn(name)(*args)
        if status != OK:
            msg = self._dll.mla_last_error_message().decode(errors="replace")
            raise errors.error_for(status, msg)

    def call_text(self, name: str, *args) -> str:
        """Calls a C function that writes text snprintf-style into (buf, buf_size,
        &length), the last three arguments; grows the buffer when it was too small."""
        size = 1 << 16
        while True:
            buf = ctypes.create_string_buffer(size)
            n = ctypes.c_size_t(0)
            self.call(name, *args, buf, size, ctypes.byref(n))
            if n.value < size:
                return buf.value.decode()
            size = n.value + 1

    def kv_entry_bytes(self, fmt: int) -> int:
        return self._dll.mla_kv_entry_bytes(fmt)


_lock = threading.Lock()
_library: Library | None = None


def lib() -> Library:
    """The library, loaded on first use."""
    global _library
    if _library is None:
        with _lock:
            if _library is None:
                _library = _load()
    return _library


def _load() -> Library:
    tried = []
    for p in candidate_paths():
        if not p.is_file():
            tried.append(f"{p} (absent)")
            continue
        try:
            return Library(p)
        except OSError as e:
            tried.append(f"{p} ({e})")
    raise errors.LibraryNotFoundError(
        "libmla.so not found; set MLA_LIBRARY to its path, or build the source tree "
        "(cmake -S . -B build && cmake --build build). Tried:\n  " + "\n  ".join(tried))
