"""mla: DeepSeek MLA / DSA attention (CPU reference and Hopper kernels) from Python.

A Python package over libmla.so's C ABI: the call machinery is mla._call and its
compiled half mla._ext (CPython's limited API, one build for Python 3.10+); no
framework is needed at import. Arrays come in from
NumPy (ml_dtypes for bf16/fp8), torch, CuPy or JAX; CPU arrays run the exact
CPU reference, CUDA arrays the kernels on the caller's current stream.

    import mla
    out, lse = mla.mla_decode(q, kv_cache, block_table, cache_seqlens, softmax_scale)

Drop-in for FlashMLA's call shapes: ``from mla import flash_mla_compat as flash_mla``.
torch.compile / CUDA graphs: torch.ops.mla.* (mla.torch_ops), used by the functions
above by themselves while torch.compile traces.
"""

from . import errors
from .errors import (AlignmentError, CudaError, DeviceError, DTypeError, InternalError,
                     InvalidValueError, LibraryNotFoundError, MlaError, OutOfRangeError,
                     ShapeError, StrideError, UnsupportedError, WorkspaceError)
from .ops import (append_indexer_keys, append_kv, built_with_cuda, decode,
                  decode_workspace_size, empty_indexer_cache, empty_kv_cache,
                  indexer_logits_decode, indexer_logits_prefill, merge_attn_partials, mla_decode,
                  mla_decode_partial, quantize_indexer_query, read_kv, validate_indexer_cache,
                  validate_kv_cache, version)
from .dsa import (decompress_kv, indexer_select_prefill, indexer_select_prefill_workspace_size,
                  mha_prefill, sparse_decode, sparse_decode_workspace_size, sparse_prefill,
                  sparse_prefill_workspace_size, topk_indices)
from .dsa_step import (DsaPolicy, dsa_decode, dsa_decode_path, dsa_decode_workspace_size,
                       dsa_default_policy, dsa_dense_threshold)
from .plans import DecodePlan, decode_plan, sparse_decode_plan
from .rope import RopeConfig, apply_rope, rope_attention_factor, rope_inv_freq
from .layer import LayerConfig, init_layer_weights, layer_forward, layer_weight_shapes
from .block_sparse import (BlockSparseParams, block_sparse_capacity, block_sparse_preset,
                           block_sparse_presets, block_sparse_select,
                           validate_block_sparse_params)
from .transfer import (CopyRun, LaunchInfo, TransferBuffers, TransferPlan, TransferRequest,
                       TransferSide, exchange_bytes_file, exchange_bytes_tcp, execute_copy_plan,
                       launch_info_from_env, layer_bases, plan_transfer, transfer_cache_name)
from .support import SupportReport, is_supported
from .selfcheck import SelfCheckItem, SelfCheckResult, self_check
from .checked import check_device_values, checked_device_values, set_check_device_values
from .kv_scale import kv_scale, set_kv_scale
from ._call import release_workspaces
from .planner import (default_workload, known_gpus, known_models, make_plan, plan_json,
                      plan_text, seed_check, seed_check_json, seed_check_text)

__version__ = "0.1.0"

import sys as _sys

if "torch" in _sys.modules:  # torch.ops.mla.* registered now, ready for torch.compile
    from . import _call as _c

    _c.torch_module()


def library_path() -> str:
    """Path of the libmla.so in use (loads it)."""
    from ._lib import lib

    return str(lib().path)
