"""KV transfer plans (mla.plan_transfer and friends) against an independent NumPy
oracle: coalescing of scattered pages, byte-exact round trips executed with NumPy
copies and read back with mla.read_kv, the memcpy executor, and the errors."""

import numpy as np
import pytest

import mla

from conftest import BF16  # noqa: F401  (skips the module without ml_dtypes)

POISON = 0xA5
ENTRY = {"bf16": 1152, "fp8_ds_mla": 656}
IDX_PAGE, IDX_CODES, IDX_SCALES = 8448, 8192, 8192  # 64 x 128 e4m3 codes, then 64 fp32


def oracle_runs(src_pages, src_ps, dst_pages, dst_ps, first, n, e):
    """Token by token byte ranges, merged when both sides continue: what coalescing means."""
    out = []
    for t in range(first, first + n):
        s = src_pages[t // src_ps] * src_ps * e + (t % src_ps) * e
        d = dst_pages[t // dst_ps] * dst_ps * e + (t % dst_ps) * e
        if out and out[-1][0] + out[-1][2] == s and out[-1][1] + out[-1][2] == d:
            out[-1][2] += e
        else:
            out.append([s, d, e])
    return [tuple(r) for r in out]


def numpy_execute(runs, src_pools, dst_pools):
    """The plan's runs as NumPy byte copies (independent of the C++ executor)."""
    for r in runs:
        s = src_pools[r.cache][r.layer].reshape(-1).view(np.uint8)
        d = dst_pools[r.cache][r.layer].reshape(-1).view(np.uint8)
        d[r.dst_offset:r.dst_offset + r.bytes] = s[r.src_offset:r.src_offset + r.bytes]


def filled_cache(rng, num_pages, page, fmt):
    cache = mla.empty_kv_cache(num_pages, page, fmt)
    T = num_pages * page
    c_kv = rng.standard_normal((T, 512)).astype(np.float32)
    k_rope = rng.standard_normal((T, 64)).astype(np.float32)
    mla.append_kv(c_kv, k_rope, np.arange(T, dtype=np.int64), cache)
    return cache


def poisoned_cache(num_pages, page, fmt):
    cache = mla.empty_kv_cache(num_pages, page, fmt)
    cache.view(np.uint8)[:] = POISON
    return cache


def slots_of(pages, page, first, n):
    t = np.arange(first, first + n)
    return (np.asarray(pages, np.int64)[t // page] * page + t % page).astype(np.int64)


def test_scattered_pages_coalesce_where_both_sides_continue():
    # src 3,4,5 | 9 ; dst 7,8 | 20 | 21: a run breaks wherever either side jumps.
    src, dst, e = [3, 4, 5, 9], [7, 8, 20, 21], 656
    plan = mla.plan_transfer(src_latent=mla.TransferSide(src, 1000, 16),
                             dst_latent=mla.TransferSide(dst, 1000, 16), num_tokens=60,
                             src_format="fp8_ds_mla")
    pg = 16 * e
    assert plan.runs == [mla.CopyRun(3 * pg, 7 * pg, 2 * pg), mla.CopyRun(5 * pg, 20 * pg, pg),
                         mla.CopyRun(9 * pg, 21 * pg, 12 * e)]
    assert plan.layer_begin == [0, 3] and plan.order == "by_layer"
    assert plan.total_bytes == 60 * e and plan.largest_run == 2 * pg


@pytest.mark.parametrize("src_ps,dst_ps,first,n", [(16, 16, 0, 60), (1, 64, 3, 70),
                                                   (64, 16, 17, 100), (8, 8, 5, 0)])
def test_plan_matches_a_token_by_token_oracle(rng, src_ps, dst_ps, first, n):
    end = first + n
    src = rng.permutation(200)[:max(1, -(-end // src_ps))]
    dst = rng.permutation(200)[:max(1, -(-end // dst_ps))]
    src[: len(src) // 2].sort()  # a sorted stretch: some pages coalesce
    dst[: len(dst) // 2].sort()
    plan = mla.plan_transfer(src_latent=mla.TransferSide(src, 200, src_ps),
                             dst_latent=mla.TransferSide(dst, 200, dst_ps), num_tokens=n,
                             first_token=first)
    got = [(r.src_offset, r.dst_offset, r.bytes) for r in plan.runs]
    assert got == oracle_runs(src, src_ps, dst, dst_ps, first, n, 1152)
    assert plan.total_bytes == n * 1152


@pytest.mark.parametrize("fmt", ["bf16", "fp8_ds_mla"])
def test_round_trip_is_byte_exact_and_reads_back(rng, fmt):
    src_ps, dst_ps, first, n = 16, 4, 5, 43  # partial first and last pages on both sides
    src_np, dst_np = 8, 20
    src_pages = rng.permutation(src_np)[:4].astype(np.int32)
    dst_pages = rng.permutation(dst_np)[:12].astype(np.int32)
    src = filled_cache(rng, src_np, src_ps, fmt)
    dst = poisoned_cache(dst_np, dst_ps, fmt)
    plan = mla.plan_transfer(src_latent=mla.TransferSide(src_pages, src_np, src_ps),
                             dst_latent=mla.TransferSide(dst_pages, dst_np, dst_ps),
                             num_tokens=n, first_token=first, src_format=fmt)
    numpy_execute(plan.runs, {"latent": [src]}, {"latent": [dst]})

    s_slots = slots_of(src_pages, src_ps, first, n)
    d_slots = slots_of(dst_pages, dst_ps, first, n)
    e = ENTRY[fmt]
    s_flat = src.reshape(-1).view(np.uint8).reshape(-1, e)
    d_flat = dst.reshape(-1).view(np.uint8).reshape(-1, e)
    assert np.array_equal(d_flat[d_slots], s_flat[s_slots])
    untouched = np.setdiff1d(np.arange(dst_np * dst_ps), d_slots)
    assert np.all(d_flat[untouched] == POISON)
    want_c, want_r = mla.read_kv(src, s_slots)
    got_c, got_r = mla.read_kv(dst, d_slots)
    assert np.array_equal(got_c, want_c) and np.array_equal(got_r, want_r)

    # The library's memcpy executor moves exactly the same bytes.
    dst2 = poisoned_cache(dst_np, dst_ps, fmt)
    mla.execute_copy_plan(plan, [src], [dst2])
    assert np.array_equal(dst2.view(np.uint8), dst.view(np.uint8))


def test_layers_in_one_allocation_and_the_indexer_cache(rng):
    # Two layers, layer-major in one allocation on each side, order "whole"; the
    # indexer cache (64-token pages) with a partial last page.
    L, ps, n = 2, 16, 100
    src_np, dst_np = 10, 12
    src_pages = np.array([1, 2, 3, 7, 8, 9, 0], np.int32)
    dst_pages = np.array([4, 5, 6, 0, 1, 2, 11], np.int32)
    e = 1152
    src = np.stack([filled_cache(rng, src_np, ps, "bf16") for _ in range(L)])
    dst = np.stack([poisoned_cache(dst_np, ps, "bf16") for _ in range(L)])
    s_idx = rng.integers(0, 256, (L, 4, IDX_PAGE), dtype=np.uint8)
    d_idx = np.full((L, 5, IDX_PAGE), POISON, np.uint8)
    s_ipages, d_ipages = np.array([3, 0], np.int32), np.array([1, 4], np.int32)
    plan = mla.plan_transfer(
        src_latent=mla.TransferSide(src_pages, src_np, ps, 0, src_np * ps * e),
        dst_latent=mla.TransferSide(dst_pages, dst_np, ps, 0, dst_np * ps * e),
        src_indexer=mla.TransferSide(s_ipages, 4, 64, 0, 4 * IDX_PAGE),
        dst_indexer=mla.TransferSide(d_ipages, 5, 64, 0, 5 * IDX_PAGE),
        num_tokens=n, num_layers=L, order="whole")
    assert plan.order == "whole" and plan.layer_begin == [0, len(plan.runs)]
    assert plan.total_bytes == L * n * (e + 132)
    pools = lambda lat, idx: {  # noqa: E731
        "latent": mla.layer_bases(lat, lat[0].nbytes, L),
        "indexer": mla.layer_bases(idx, idx[0].nbytes, L)}
    numpy_execute(plan.runs, pools(src, s_idx), pools(dst, d_idx))
    for l in range(L):
        s_slots, d_slots = slots_of(src_pages, ps, 0, n), slots_of(dst_pages, ps, 0, n)
        assert np.array_equal(mla.read_kv(dst[l], d_slots)[0], mla.read_kv(src[l], s_slots)[0])
        for t in range(n):
            sp, dp, o = s_idx[l, s_ipages[t // 64]], d_idx[l, d_ipages[t // 64]], t % 64
            assert np.array_equal(dp[o * 128:(o + 1) * 128], sp[o * 128:(o + 1) * 128])
            so = IDX_SCALES + o * 4
            assert np.array_equal(dp[so:so + 4], sp[so:so + 4])
        # The partial page's tail (tokens 100..127 of dst page 4) was not written.
        tail = d_idx[l, 4]
        assert np.all(tail[(n - 64) * 128:IDX_CODES] == POISON)
        assert np.all(tail[IDX_SCALES + (n - 64) * 4:] == POISON)
    # The same through the library's executor and layer_bases views.
    dst2 = np.stack([poisoned_cache(dst_np, ps, "bf16") for _ in range(L)])
    d_idx2 = np.full_like(d_idx, POISON)
    b = pools(dst2, d_idx2)
    mla.execute_copy_plan(plan, mla.TransferBuffers(**pools(src, s_idx)),
                          mla.TransferBuffers(b["latent"], b["indexer"]))
    assert np.array_equal(dst2.view(np.uint8), dst.view(np.uint8))
    assert np.array_equal(d_idx2, d_idx)


def test_errors_name_the_argument_and_value():
    src, dst = mla.TransferSide([3, 4, 5, 912], 900, 16), mla.TransferSide([0, 1, 2, 3], 900, 16)
    with pytest.raises(mla.OutOfRangeError, match=r"src_latent\.pages\[3\] = 912 is past "
                                                  r"num_pages = 900"):
        mla.plan_transfer(src_latent=src, dst_latent=dst, num_tokens=60)
    with pytest.raises(mla.OutOfRangeError, match=r"first_token \+ num_tokens = 70 is past the "
                                                  r"capacity of dst_latent: 4 pages \* 16 = 64"):
        mla.plan_transfer(src_latent=mla.TransferSide([0] * 5, 900, 16), dst_latent=dst,
                          num_tokens=70)
    with pytest.raises(mla.InvalidValueError, match="src_format = bf16 does not match "
                                                    "dst_format = fp8_ds_mla"):
        mla.plan_transfer(src_latent=dst, dst_latent=dst, num_tokens=1,
                          dst_format="fp8_ds_mla")
    with pytest.raises(mla.InvalidValueError, match=r"src_indexer\.page_size = 16"):
        mla.plan_transfer(src_latent=dst, dst_latent=dst, num_tokens=1, src_indexer=dst,
                          dst_indexer=dst)
    with pytest.raises(mla.InvalidValueError, match="order = 'sorted'"):
        mla.plan_transfer(src_latent=dst, dst_latent=dst, num_tokens=1, order="sorted")
    # The executor: a pool too small for a run, a missing layer.
    plan = mla.plan_transfer(src_latent=dst, dst_latent=dst, num_tokens=64)
    small = np.zeros(3 * 16 * 1152, np.uint8)
    with pytest.raises(mla.OutOfRangeError, match=r"runs\[0\]: dst bytes \[0, 73728\) are past "
                                                  r"dst\.latent\[0\], which holds 55296 bytes"):
        mla.execute_copy_plan(plan, [np.zeros(900 * 16 * 1152, np.uint8)], [small])
    with pytest.raises(mla.InvalidValueError, match=r"dst\.latent\[0\]: no base pointer for "
                                                    r"layer 0 \(0 given\)"):
        mla.execute_copy_plan(plan, [np.zeros(4 * 16 * 1152, np.uint8)], [])


def test_c_abi_buffer_convention():
    """mla_plan_transfer writes at most `capacity` runs and always the full count, so a
    caller retries with a larger array; NULL with a capacity is refused by name."""
    import ctypes

    from mla._lib import MlaCopyRun, MlaTransferPlanInfo, lib
    from mla.transfer import TransferRequest, _request

    keep: list = []
    req = _request(TransferRequest(mla.TransferSide([3, 4, 5, 9], 100, 16),
                                   mla.TransferSide([7, 8, 20, 21], 100, 16), 60), keep)
    info = MlaTransferPlanInfo()
    one = (MlaCopyRun * 1)()
    lib().call("mla_plan_transfer", ctypes.byref(req), one, 1, None, 0, ctypes.byref(info))
    assert (info.num_runs, info.num_layer_begin) == (3, 2)
    assert (one[0].src_offset, one[0].bytes) == (3 * 16 * 1152, 2 * 16 * 1152)
    with pytest.raises(mla.InvalidValueError, match="runs is NULL but runs_capacity = 5"):
        lib().call("mla_plan_transfer", ctypes.byref(req), None, 5, None, 0, ctypes.byref(info))
    assert mla.transfer_cache_name(0) == "latent" and mla.transfer_cache_name(1) == "indexer"


def test_launch_info_from_env_and_its_errors():
    env = {"RANK": "2", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29500"}
    li = mla.launch_info_from_env(env)
    assert li == mla.LaunchInfo(2, 4, 2, "10.0.0.7", 29500)  # LOCAL_RANK unset: RANK
    assert mla.launch_info_from_env({**env, "LOCAL_RANK": "1"}).local_rank == 1
    with pytest.raises(mla.OutOfRangeError, match=r"RANK = 4 is outside \[0, 3\]"):
        mla.launch_info_from_env({**env, "RANK": "4"})
    with pytest.raises(mla.InvalidValueError, match='MASTER_PORT = "29x" is not an integer'):
        mla.launch_info_from_env({**env, "MASTER_PORT": "29x"})


def test_exchange_bytes_file_between_two_threads(tmp_path):
    # ctypes releases the GIL during the call, so two "ranks" can meet in one process.
    import threading

    payload = bytes(range(128))
    path = tmp_path / "id"
    got = {}

    def rank(r, data):
        who = mla.LaunchInfo(r, 2, r, "127.0.0.1", 0)
        got[r] = mla.exchange_bytes_file(who, path, data, timeout_ms=10000)

    t = threading.Thread(target=rank, args=(1, bytes(128)))
    t.start()
    rank(0, payload)
    t.join(15)
    assert got[0] == payload and got[1] == payload


def test_exchange_bytes_tcp_between_two_threads():
    import socket
    import threading

    with socket.socket() as s:  # a free port (released just before rank 0 binds it)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    payload = bytes(range(255, 127, -1))
    got = {}

    def rank(r, data):
        who = mla.LaunchInfo(r, 2, r, "127.0.0.1", port)
        got[r] = mla.exchange_bytes_tcp(who, data, timeout_ms=10000)

    t = threading.Thread(target=rank, args=(1, bytes(128)))
    t.start()
    rank(0, payload)
    t.join(15)
    assert got[0] == payload and got[1] == payload
