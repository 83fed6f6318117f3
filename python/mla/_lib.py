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
import numbers
import os
import threading
from pathlib import Path

from . import errors

ABI_VERSION = 3  # MLA_C_ABI_VERSION this package was written against

# Status, dtype, device and cache-format codes (c_api.h enums).
OK = 0
DTYPE_CODES = {"f32": 0, "f64": 1, "bf16": 2, "f16": 3, "e4m3": 4, "u8": 5, "i32": 6, "i64": 7}
DTYPE_NAMES = {v: k for k, v in DTYPE_CODES.items()}
DTYPE_SIZES = {"f32": 4, "f64": 8, "bf16": 2, "f16": 2, "e4m3": 1, "u8": 1, "i32": 4, "i64": 8}
DEVICE_CPU, DEVICE_CUDA = 1, 2
KV_FORMATS = {"bf16": 0, "fp8_ds_mla": 1, "fp8_e4m3": 2}


# ---- mirrors of the C ABI's structs (c_api.h), field by field in C order ---------------
# A field is "name:type"; type: i32, i64, u64, f64 (double), ptr (void*), cstr (char*),
# another mirror's name, "*T" (a pointer to T) or "T[N]" (an array of N).

_CTYPES = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "u64": ctypes.c_uint64,
           "f64": ctypes.c_double, "ptr": ctypes.c_void_p, "cstr": ctypes.c_char_p,
           "char": ctypes.c_char}


def _ctype(spec: str):
    if spec.startswith("*"):
        return ctypes.POINTER(_ctype(spec[1:]))
    if spec.endswith("]"):
        base, n = spec[:-1].split("[")
        return _ctype(base) * int(n)
    return _CTYPES[spec]


def _mirror(name: str, c_name: str, fields: str) -> type:
    """A ctypes Structure `name` mirroring the C struct `c_name` (registered, so a later
    mirror may hold it as a field type)."""
    cls = type(name, (ctypes.Structure,), {
        "__doc__": f"Mirror of ``{c_name}``.",
        "_fields_": [(f, _ctype(t)) for f, t in (x.split(":") for x in fields.split())]})
    _CTYPES[name] = cls
    return cls


MAX_DIMS = 6
MASTER_ADDR_MAX = 256
MlaTensor = _mirror("MlaTensor", "mla_tensor (mla::TensorView)",
                    "data:ptr dtype:i32 device_type:i32 device_id:i32 ndim:i32 "
                    f"shape:i64[{MAX_DIMS}] strides:i64[{MAX_DIMS}]")
MlaRopeConfig = _mirror("MlaRopeConfig", "mla_rope_config (mla::RopeConfig)",
                        "dim:i32 reserved:i32 theta:f64 factor:f64 original_max_position:i64 "
                        "beta_fast:f64 beta_slow:f64 mscale:f64 mscale_all_dim:f64")
MlaLayerConfig = _mirror("MlaLayerConfig", "mla_layer_config (mla::LayerConfig)",
                         "hidden:i64 q_lora_rank:i32 kv_lora_rank:i32 heads:i32 d_nope:i32 "
                         "d_rope:i32 d_v:i32 index_topk:i32 reserved:i32 norm_eps:f64 "
                         "softmax_scale:f64 rope:MlaRopeConfig")
MlaBlockSparseParams = _mirror("MlaBlockSparseParams",
                               "mla_block_sparse_params (mla::BlockSparseParams)",
                               "block_size:i32 stride:i32 selected_block_size:i32 "
                               "num_selected_blocks:i32 initial_blocks:i32 local_blocks:i32 "
                               "sliding_window:i32")
MlaPlanWorkload = _mirror("MlaPlanWorkload", "mla_plan_workload (mla::plan::Workload)",
                          "model:cstr gpu:cstr phase:cstr kv:cstr batch:i64 context:i64 "
                          "new_tokens:i32 tp:i32 weight_shards:i32 topk:i32 mem_util:f64")
MlaTransferSide = _mirror("MlaTransferSide", "mla_transfer_side (mla::TransferSide)",
                          "pages:*i32 num_page_ids:i64 num_pages:i64 page_size:i64 "
                          "page_stride:i64 layer_stride:i64")
MlaTransferRequest = _mirror("MlaTransferRequest", "mla_transfer_request (mla::TransferRequest)",
                             "first_token:i64 num_tokens:i64 num_layers:i32 src_format:i32 "
                             "dst_format:i32 with_indexer:i32 order:i32 reserved:i32 "
                             "src_latent:MlaTransferSide dst_latent:MlaTransferSide "
                             "src_indexer:MlaTransferSide dst_indexer:MlaTransferSide")
MlaCopyRun = _mirror("MlaCopyRun", "mla_copy_run (mla::CopyRun)",
                     "src_offset:i64 dst_offset:i64 bytes:i64 layer:i32 cache:i32")
MlaTransferPlanInfo = _mirror("MlaTransferPlanInfo",
                              "mla_transfer_plan_info (the scalars of mla::TransferPlan)",
                              "num_runs:i64 num_layer_begin:i64 total_bytes:i64 largest_run:i64 "
                              "order:i32 reserved:i32")
MlaTransferBuffers = _mirror("MlaTransferBuffers", "mla_transfer_buffers (mla::TransferBuffers)",
                             "latent:*ptr num_latent:i64 indexer:*ptr num_indexer:i64")
MlaLaunchInfo = _mirror("MlaLaunchInfo", "mla_launch_info (mla::LaunchInfo)",
                        "rank:i32 world_size:i32 local_rank:i32 master_port:i32 "
                        f"master_addr:char[{MASTER_ADDR_MAX}]")
MlaDsaPolicy = _mirror("MlaDsaPolicy", "mla_dsa_policy (mla::DsaPolicy)",
                       "topk:i32 path:i32 dense_below:i64 batch_invariant:i32")

def filled(struct_cls, fn: str):
    """A `struct_cls` as the C function `fn` fills it in (the library's defaults)."""
    c = struct_cls()
    lib().fn(fn)(ctypes.byref(c))
    return c


# mla_env_lookup_fn: the value's address (c_void_p: a c_char_p result would point into a
# Python bytes object freed on return), or None for an unset variable.
GETENV_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)


# ---- Python values into C types --------------------------------------------------
# A ctypes field or argument wraps an int silently (2**64 + 16 becomes 16) and a wrong
# type gives a TypeError naming no argument: every value a caller gives goes through
# c_value first, whose errors name the argument's full path and the value as given
# (the same words as mla._ext's checks of the array calls' scalars).

_INT_TYPES = (ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_size_t)
_REAL_TYPES = (ctypes.c_float, ctypes.c_double)


def _int_range(ctype) -> tuple[int, int]:
    bits = 8 * ctypes.sizeof(ctype)
    return (0, 2**bits - 1) if ctype(-1).value > 0 else (-2**(bits - 1), 2**(bits - 1) - 1)


def c_value(ctype, value, path: str):
    """`value` as the Python value of the C type `ctype` (an integer type, float, double
    or char*), or raise the mla error naming `path` and the value."""
    if ctype in _INT_TYPES:
        if isinstance(value, float) or not hasattr(value, "__index__"):
            raise errors.InvalidValueError(f"{path} = {value!r} is not an integer")
        v = value.__index__()
        lo, hi = _int_range(ctype)
        if not lo <= v <= hi:
            raise errors.OutOfRangeError(f"{path} = {value!r} does not fit in [{lo}, {hi}]")
        return v
    if ctype in _REAL_TYPES:
        if not isinstance(value, numbers.Real):
            raise errors.InvalidValueError(f"{path} = {value!r} is not a number")
        return float(value)
    if ctype is ctypes.c_char_p:
        if not isinstance(value, str):
            raise errors.InvalidValueError(f"{path} = {value!r} is not a string")
        return value.encode()
    return value  # a nested struct, a pointer: built (and checked) by the caller


def c_struct(cls, path: str, values: dict):
    """cls (a ctypes Structure) with the fields named in `values`, each through c_value
    (`path`.field names it: "" for keyword arguments); fields not given stay zero."""
    types = dict(cls._fields_)
    prefix = f"{path}." if path else ""
    return cls(**{n: c_value(types[n], v, prefix + n) for n, v in values.items()})


def choice(value, table: dict, path: str):
    """table[value] for one of the names of `table`, or raise InvalidValueError naming
    `path`, the value as given and the names."""
    if isinstance(value, str) and value in table:
        return table[value]
    raise errors.InvalidValueError(
        f"{path} = {value!r} is not one of {sorted(table, key=table.get)}")


def flag(value, path: str) -> bool:
    """A bool argument: True, False (NumPy's too) or the ints 0 and 1; nothing else
    (a string such as 'no' would read as True)."""
    if value is True or value is False:
        return value
    if type(value).__name__ in ("bool", "bool_") or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise errors.InvalidValueError(f"{path} = {value!r} is not a bool")


def expect_type(value, cls, path: str) -> None:
    """Raises InvalidValueError naming `path` unless value is a `cls`."""
    if not isinstance(value, cls):
        raise errors.InvalidValueError(
            f"{path} = {value!r} is a {type(value).__name__}, not a {cls.__name__}")


class MlaDecodePlanInfo(ctypes.Structure):
    """Mirror of ``mla_decode_plan_info`` (mla::DecodePlan)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("bytes", ctypes.c_size_t),
        ("device", ctypes.c_int32),
        ("num_workers", ctypes.c_int32),
        ("batch", ctypes.c_int64),
        ("s_q", ctypes.c_int64),
        ("h_q", ctypes.c_int64),
        ("batch_invariant", ctypes.c_int32),
        ("sparse", ctypes.c_int32),
        ("topk", ctypes.c_int64),
        ("capacity", ctypes.c_int64),
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
    "mla_set_check_device_values": [_i32],
    "mla_check_device_values": [],
    "mla_validate_kv_cache": [_T, _i32],
    "mla_set_kv_scale": [_T],
    "mla_append_kv": [_T, _T, _T, _T, _i32, _vp],
    "mla_read_kv": [_T, _i32, _T, _T, _T, _vp],
    "mla_decode_workspace_size": [_T, _T, _i32, _T, _T, _f32, _i32, _T, _T, _i32,
                                  ctypes.POINTER(_sz)],
    "mla_decode": [_T, _T, _i32, _T, _T, _f32, _i32, _T, _T, _i32, _vp, _sz, _vp],
    "mla_decode_partial": [_T, _T, _i32, _T, _T, _f32, _i32, _T, _T, _T, _T, _vp],
    "mla_decode_plan": [_T, _T, _i32, _T, _T, _f32, _i32, _T, _T, _i32, _vp, _sz, _vp,
                        ctypes.POINTER(MlaDecodePlanInfo)],
    "mla_decode_planned": [_T, _T, _i32, _T, _T, _f32, _i32, _T, _T, _i32,
                           ctypes.POINTER(MlaDecodePlanInfo), _vp, _sz, _vp],
    "mla_sparse_decode_plan": [_T, _T, _i32, _T, _T, _f32, _T, _T, _vp, _sz, _vp,
                               ctypes.POINTER(MlaDecodePlanInfo)],
    "mla_sparse_decode_planned": [_T, _T, _i32, _T, _T, _f32, _T, _T,
                                  ctypes.POINTER(MlaDecodePlanInfo), _vp, _sz, _vp],
    "mla_merge_attn_partials": [_T, _T, _T, _T, _vp],
    "mla_validate_indexer_cache": [_T],
    "mla_append_indexer_keys": [_T, _T, _T, _vp],
    "mla_quantize_indexer_query": [_T, _T, _T, _T, _vp],
    "mla_indexer_logits_decode": [_T, _T, _T, _T, _T, _T, _vp],
    "mla_indexer_logits_prefill": [_T, _T, _T, _T, _T, _T, _T, _vp],
    "mla_indexer_select_prefill_workspace_size": [_T, _T, _T, _T, _T, _T, _i32, _i32, _i32,
                                                  ctypes.c_int64, _T, ctypes.POINTER(_sz)],
    "mla_indexer_select_prefill": [_T, _T, _T, _T, _T, _T, _i32, _i32, _i32, ctypes.c_int64, _T,
                                   _vp, _sz, _vp],
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
    "mla_rope_default_config": [_R],
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
    "mla_self_check": [ctypes.c_uint64, ctypes.POINTER(_i32), ctypes.c_char_p, _sz,
                       ctypes.POINTER(_sz)],
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
RESTYPES = {"mla_dsa_default_policy": None, "mla_rope_default_config": None,
            "mla_layer_default_config": None, "mla_layer_small_test_config": None,
            "mla_block_sparse_default_params": None, "mla_plan_default_workload": None,
            "mla_block_sparse_num_presets": _i32, "mla_transfer_cache_name": ctypes.c_char_p,
            "mla_family_name": ctypes.c_char_p, "mla_set_check_device_values": None,
            "mla_check_device_values": _i32}


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
