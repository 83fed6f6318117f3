"""FlashInfer's MLA paged-attention interface over mla's decode.

    from mla.flashinfer_compat import BatchMLAPagedAttentionWrapper
    w = BatchMLAPagedAttentionWrapper(float_workspace_buffer)
    w.plan(qo_indptr, kv_indptr, kv_indices, kv_len, num_heads, 512, 64, page_size,
           causal, sm_scale, q_dtype, kv_dtype)          # once per batch, on the host
    out = w.run(q_nope, q_pe, ckv_cache, kpe_cache)      # per layer
    out, lse = w.run(q_nope, q_pe, ckv_cache, kpe_cache, return_lse=True)

Shapes as FlashInfer's: q_nope [N, h, 512], q_pe [N, h, 64]; ckv_cache
[num_pages, page_size, 512], kpe_cache [num_pages, page_size, 64]; a CSR page table
(kv_indptr [B + 1], kv_indices [kv_indptr[B]]) and kv_len [B]; qo_indptr [B + 1]
with the same number of query tokens for every request (mla's decode takes s_q per
batch). out [N, h, 512], lse [N, h] in base 2 (FlashInfer's) or e (lse_base).

Differences (docs/python.md):
  * mla reads one 576-wide cache entry: ckv_cache and kpe_cache must be two views of
    one [.., 576] buffer (kpe right after ckv in each entry), as SGLang's and vLLM's
    MLA caches are; two separate allocations raise InvalidValueError.
  * q_nope and q_pe may be separate tensors (they are joined, a small copy) or views
    of one [N, h, 576] buffer (no copy).
  * plan() turns the CSR page table into mla's block table (one host copy of the
    indptr, as FlashInfer's plan makes); run() is one mla decode call.
"""

from __future__ import annotations

import math

from . import _call, errors
from .ops import mla_decode

_LN2 = math.log(2.0)


def _host(x):
    """A NumPy copy of a small index array (torch tensors come to the host)."""
    import numpy as np

    if _call.framework_of(x) == "torch":
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _ptr_strides(x):
    """(data address, strides in elements, element bytes) of a torch or NumPy array."""
    if _call.framework_of(x) == "torch":
        return x.data_ptr(), tuple(x.stride()), x.element_size()
    ai = x.__array_interface__
    item = x.itemsize
    strides = x.strides
    return ai["data"][0], tuple(s // item for s in strides), item


def _as_strided(x, shape, strides):
    if _call.framework_of(x) == "torch":
        return x.as_strided(shape, strides)
    import numpy as np

    return np.lib.stride_tricks.as_strided(x, shape, tuple(s * x.itemsize for s in strides))


def _joined(a, b, name_a: str, name_b: str, lead: int):
    """A [.., 576] view over two arrays [.., 512] and [.., 64] that are views of one
    buffer (b's entry right after a's), or None when they are not."""
    pa, sa, ea = _ptr_strides(a)
    pb, sb, eb = _ptr_strides(b)
    da, db = int(a.shape[-1]), int(b.shape[-1])
    if ea != eb or sa != sb or sa[-1] != 1 or pb != pa + da * ea or \
            tuple(a.shape[:lead]) != tuple(b.shape[:lead]):
        return None
    return _as_strided(a, tuple(a.shape[:-1]) + (da + db,), sa)


class BatchMLAPagedAttentionWrapper:
    """FlashInfer's MLA decode wrapper (plan once per batch, run per layer) on mla."""

    def __init__(self, float_workspace_buffer=None, use_cuda_graph=False, qo_indptr=None,
                 kv_indptr=None, kv_indices=None, kv_len_arr=None, backend="auto",
                 lse_base: float = 2.0):
        if lse_base not in (2.0, math.e):
            raise errors.InvalidValueError(f"lse_base = {lse_base}: 2 (FlashInfer's) or e")
        self._workspace = float_workspace_buffer
        self._lse_base = lse_base
        self._plan = None

    def plan(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads, head_dim_ckv,
             head_dim_kpe, page_size, causal, sm_scale, q_data_type=None, kv_data_type=None,
             use_profiler=False):
        """Builds mla's block table [B, max_pages] and cache_seqlens [B] from the CSR page
        table, on kv_indices' device."""
        import numpy as np

        if (head_dim_ckv, head_dim_kpe) != (512, 64):
            raise errors.InvalidValueError(
                f"head_dim_ckv, head_dim_kpe = {head_dim_ckv}, {head_dim_kpe}: MLA's are 512, 64")
        qo = _host(qo_indptr).astype(np.int64)
        kvp = _host(kv_indptr).astype(np.int64)
        lens = _host(kv_len_arr).astype(np.int64)
        idx = _host(kv_indices).astype(np.int64)
        B = len(qo) - 1
        if B < 0 or len(kvp) != B + 1 or len(lens) != B:
            raise errors.ShapeError(
                f"qo_indptr [{len(qo)}], kv_indptr [{len(kvp)}], kv_len [{len(lens)}]: expected "
                "[B + 1], [B + 1], [B]")
        s_q = np.diff(qo)
        if B and not (s_q == s_q[0]).all():
            raise errors.UnsupportedError(
                f"qo_indptr: query tokens per request {s_q.tolist()} differ; mla's decode takes "
                "the same number for every request")
        pages = np.diff(kvp)
        need = -(-lens // int(page_size))
        bad = np.nonzero(pages < need)[0]
        if len(bad):
            b = int(bad[0])
            raise errors.OutOfRangeError(
                f"kv_len[{b}] = {int(lens[b])} needs {int(need[b])} pages of {page_size}, "
                f"kv_indptr gives {int(pages[b])}")
        max_pages = max(1, int(pages.max()) if B else 1)
        bt = np.zeros((B, max_pages), np.int32)
        for b in range(B):
            bt[b, :pages[b]] = idx[kvp[b]:kvp[b + 1]]
        like = kv_indices
        if _call.framework_of(like) == "torch":
            torch = _call.torch_module()
            bt = torch.from_numpy(bt).to(like.device, non_blocking=True)
            sl = torch.from_numpy(lens.astype(np.int32)).to(like.device, non_blocking=True)
        else:
            sl = lens.astype(np.int32)
        self._plan = dict(B=B, s_q=int(s_q[0]) if B else 1, heads=int(num_heads),
                          page_size=int(page_size), causal=bool(causal),
                          scale=float(sm_scale), block_table=bt, cache_seqlens=sl)

    def run(self, q_nope, q_pe, ckv_cache, kpe_cache, out=None, lse=None, return_lse=False,
            profiler_buffer=None, kv_len=None, page_table=None, return_lse_base_on_e=None):
        """out [N, h, 512] (and lse [N, h] with return_lse) of the planned batch."""
        p = self._plan
        if p is None:
            raise errors.InvalidValueError("run() before plan()")
        B, s_q, h = p["B"], p["s_q"], p["heads"]
        q = _joined(q_nope, q_pe, "q_nope", "q_pe", 2)
        if q is None:
            fw = _call.framework_of(q_nope)
            if fw == "torch":
                q = _call.torch_module().cat([q_nope, q_pe], dim=-1)
            else:
                import numpy as np

                q = np.concatenate([q_nope, q_pe], axis=-1)
        kv = _joined(ckv_cache, kpe_cache, "ckv_cache", "kpe_cache", 2)
        if kv is None:
            raise errors.InvalidValueError(
                "ckv_cache / kpe_cache: mla reads each cache entry as 576 contiguous values, so "
                "kpe_cache must be the view of the last 64 of a [num_pages, page_size, 576] "
                "buffer whose first 512 are ckv_cache (buffer[..., :512], buffer[..., 512:])")
        P, page = int(kv.shape[0]), int(kv.shape[1])
        _, ks, _ = _ptr_strides(kv)
        kv4 = _as_strided(kv, (P, page, 1, 576), (ks[0], ks[1], 576, 1))
        q4 = q.reshape(B, s_q, h, 576)
        out4 = out.reshape(B, s_q, h, 512) if out is not None else None
        if _call.torch_compiling():
            o, l = mla_decode(q4, kv4, p["block_table"], p["cache_seqlens"], p["scale"],
                              p["causal"], out=out4)
        else:  # FlashInfer's workspace buffer serves as ours while it is large enough
            o, l = _call.decode_outputs(q4, out4, None, None)
            st = _call.stream_handle(q4, None)
            _call.run_with_workspace("mla_decode", q4, st, self._workspace_for(q4), q4, kv4, -1,
                                     p["block_table"], p["cache_seqlens"], p["scale"],
                                     p["causal"], o, l, False, grow=True)
        o = o.reshape(B * s_q, h, 512) if out is None else out
        if not return_lse:
            return o
        base_e = self._lse_base != 2.0 if return_lse_base_on_e is None else return_lse_base_on_e
        lt = l.transpose(0, 2, 1) if _call.framework_of(l) != "torch" else l.transpose(1, 2)
        lt = lt.reshape(B * s_q, h)
        if not base_e:
            lt = lt / _LN2  # log2(sum exp(x)) = ln(sum exp(x)) / ln 2
        if lse is not None:
            lse[...] = lt
            return o, lse
        return o, lt

    def _workspace_for(self, q):
        """The float workspace buffer when it is on q's device and byte-typed, else None
        (mla then allocates per call)."""
        ws = self._workspace
        if ws is None or _call.device_of(ws) != _call.device_of(q):
            return None
        try:
            if _call.dtype_name(ws) != "u8":
                return None
        except errors.DTypeError:
            return None
        return ws
