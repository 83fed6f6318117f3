#!/usr/bin/env python3
"""Host model of the top-k rank finish (src/cuda/topk/topk_rank.cuh) and sieve
(src/cuda/topk/topk_sieve.cuh).

The CUDA arithmetic, run in order: the keys' range in kBins linear bins, the scan
from the top bin (first slot of each bin, the bin t of the k-th best, the largest
bin from t up), the gather of bins >= t (best first) or of t alone (by position)
with slots from atomics (their order inside a bin drawn at random here, as the
hardware may give any), the rank of each gathered entry inside its bin, and the
by-position predicate (key, pos) >= the k-th best's. Checked against a sort of
(key desc, position asc) on adversarial rows, both orders; a row whose bins are
too full must report the fallback (None) and nothing else. Also the rank cut
(the k-th best's key and its tie count, for compact()) and a cluster's gather
(each rank's own k best, concatenated in rank order, then the rank finish), and
the sieve's indexing: the sample, the bound, each warp's range, step and lane
order, each entry's slot (the lanes' per-vector counts packed one byte per
vector, one warp scan per step; a partial first or last vector appended by lane
0), the slices and the gather, on rows not 16-byte aligned: its entries must
be every logit at or above its bound, in position order, holding the k best. Standard library only.
"""
import math
import random
import struct
import sys

MAX_BIN = 64  # kRankMaxBin


def f2u(f):
    return struct.unpack("<I", struct.pack("<f", f))[0]


def topk_key(f):
    u = f2u(f)
    if u == 0x80000000:
        u = 0
    key = (~u & 0xFFFFFFFF) if (u & 0x80000000) else (u | 0x80000000)
    return 0 if (key <= 0x007FFFFF or key > 0xFF800000) else key


def clz(x):
    return 32 - x.bit_length()


def rank_finish(keys, poss, k, best, digit_bits, cap, rng):
    """keys/poss: the candidates in position order. Returns the k outputs
    (positions, -1 padded) or None for the fallback."""
    n = len(keys)
    bins = 1 << digit_bits
    kk = min(k, n)
    if n == 0:
        return [-1] * k
    lo, hi = min(keys), max(keys)
    shift = max(0, 32 - clz(hi - lo) - digit_bits)
    dig = lambda key: (key - lo) >> shift
    hist = [0] * bins
    for key in keys:
        d = dig(key)
        assert 0 <= d < bins
        hist[d] += 1
    # Scan from the top bin.
    acc, mx, found = 0, 0, None
    for d in range(bins - 1, -1, -1):
        c = hist[d]
        if acc < kk <= acc + c:
            found = (d, acc, c)
        if acc < kk:
            mx = max(mx, c)
        hist[d] = acc
        acc += c
    assert found is not None and acc == n
    tbin, above, tcount = found
    base = 0 if best else above
    gathered = above + tcount if best else tcount
    if (mx if best else tcount) > MAX_BIN or gathered > cap:
        return None
    # Gather, in an arbitrary order (atomics).
    order = list(range(n))
    rng.shuffle(order)
    tk, tp = [None] * gathered, [None] * gathered
    for i in order:
        d = dig(keys[i])
        if d == tbin or (best and d > tbin):
            slot = hist[d] - base
            hist[d] += 1
            tk[slot], tp[slot] = keys[i], poss[i]
    assert all(x is not None for x in tk)
    out = [None] * k
    kth = None
    for j in range(gathered):
        key, pos = tk[j], tp[j]
        d = dig(key)
        start = above if not best else (hist[d + 1] if d + 1 < bins else 0)
        end = hist[d]
        rank = sum(1 for m in range(start - base, end - base)
                   if tk[m] > key or (tk[m] == key and tp[m] < pos))
        slot = start + rank
        if best:
            if slot < k:
                assert out[slot] is None
                out[slot] = pos
        elif slot == kk - 1:
            assert kth is None
            kth = (key, pos)
    for j in range(kk, k):
        out[j] = -1
    if best:
        assert all(x is not None for x in out)
        return out
    assert kth is not None
    kept = [p for key, p in zip(keys, poss) if key > kth[0] or (key == kth[0] and p <= kth[1])]
    assert len(kept) == kk
    return kept + [-1] * (k - kk)


def rank_cut(keys, poss, kk, digit_bits, cap, rng):
    """The cut keeping the kk best (kk < n): (K, need) with need the ties at K up
    to the kk-th's position, as rank_cut computes it; None when the bins are too
    full."""
    n = len(keys)
    bins = 1 << digit_bits
    lo, hi = min(keys), max(keys)
    shift = max(0, 32 - clz(hi - lo) - digit_bits)
    dig = lambda key: (key - lo) >> shift
    hist = [0] * bins
    for key in keys:
        hist[dig(key)] += 1
    acc, found = 0, None
    for d in range(bins - 1, -1, -1):
        if acc < kk <= acc + hist[d]:
            found = (d, acc, hist[d])
        acc += hist[d]
    tbin, above, tcount = found
    if tcount > MAX_BIN or tcount > cap:
        return None
    members = [(keys[i], poss[i]) for i in range(n) if dig(keys[i]) == tbin]
    rng.shuffle(members)
    cut = None
    for key, pos in members:
        rank = sum(1 for mk, mp in members if mk > key or (mk == key and mp < pos))
        ties = sum(1 for mk, mp in members if mk == key and mp < pos)
        if above + rank == kk - 1:
            assert cut is None
            cut = (key, ties + 1)
    return cut


def compact(keys, poss, thr, need):
    """compact(): every key above thr, and the first `need` ties in buffer order."""
    out, seen = [], 0
    for key, pos in zip(keys, poss):
        if key > thr:
            out.append((key, pos))
        elif key == thr:
            if seen < need:
                out.append((key, pos))
            seen += 1
    return out


def isqrt32(x):
    r, bit = 0, 1 << 30
    while bit:
        if x >= r + bit:
            x -= r + bit
            r = (r >> 1) + bit
        else:
            r >>= 1
        bit >>= 2
    return r


def sieve_plan(threads, cap, cap2, n, k, sample_vecs=2):
    """topk_params.hpp's sieve_plan: (samples, m, takes)."""
    samples = 4 * sample_vecs * threads
    nn = max(n, 1)
    mean = k * samples // nn
    m = mean + 4 * isqrt32(mean) + 4
    expect = m * nn // samples
    warps = threads // 32
    slice_ = cap // warps
    takes = nn >= 8 * k and m <= samples // 4 and expect <= slice_ // 2 * warps and \
        5 * expect <= 4 * cap2
    return samples, m, takes


def sieve(logits, mis, k, threads, cap, cap2, U=4, D=2, bins_bits=11):
    """topk_sieve.cuh's sieve_stream on one segment (the whole row, cs = 1):
    the vectors from the row's 16-byte boundary `mis` floats before it, the
    sample, the bound, each warp's range and slice, the check and the gather.
    Returns the entries (key, position) in buffer order, or None (chunk loop)."""
    length = len(logits)
    nv = (length + mis + 3) // 4

    def vec(v):  # load_vec: positions outside [0, length) read as -inf (key 0)
        return [logits[4 * v - mis + e] if 0 <= 4 * v - mis + e < length else -math.inf
                for e in range(4)]

    samples, m, takes = sieve_plan(threads, cap, cap2, 4 * nv, k)
    if not takes:
        return None
    skeys = []
    for t in range(samples // 4):
        skeys += [topk_key(x) for x in vec(t * nv // (samples // 4))]
    nz = [x for x in skeys if x]
    if len(nz) < m:
        return None
    lo, hi = min(nz), max(nz)
    shift = max(0, 32 - clz(hi - lo) - bins_bits)
    hist = [0] * (1 << bins_bits)
    for x in nz:
        hist[(x - lo) >> shift] += 1
    acc, fbin = 0, None
    for d in range(len(hist) - 1, -1, -1):
        if acc < m <= acc + hist[d]:
            fbin = d
        acc += hist[d]
    low = lo + (fbin << shift)
    W = threads // 32
    slice_ = cap // W
    per = ((nv + W - 1) // W + 31) & ~31
    vf0, vf1 = (1 if mis > 0 else 0), (length + mis) // 4
    bound_ok = lambda x: topk_key(x) >= low and topk_key(x) > 0  # x > bound as a float
    slices = []
    for w in range(W):
        w0, w1 = min(nv, w * per), min(nv, (w + 1) * per)
        steps = (w1 - w0 + 32 * U - 1) // (32 * U)
        f0 = min(max(w0, vf0), w1)
        f1 = max(f0, min(w1, vf1))
        r_lo, r_n = f0 - w0, f1 - f0
        sl = [None] * slice_  # the warp's slice, written at the kernel's slots
        cnt = 0

        def edges(a, b):  # append_edges: the partial vectors, lane 0 writes
            nonlocal cnt
            for v in range(a, b):
                x = vec(v)
                ins = [e for e in range(4) if bound_ok(x[e])]
                if cnt + len(ins) > slice_:
                    return False
                for e in ins:
                    sl[cnt] = (topk_key(x[e]), 4 * v - mis + e)
                    cnt += 1
            return True

        if not edges(w0, f0):
            return None
        for j in range(steps):
            # enter bits 8u + q per lane; packed byte counts; the warp's scan
            enter, packed = [], []
            for lane in range(32):
                m = 0
                for u in range(U):
                    r = (j * U + u) * 32 + lane
                    ok = ((r - r_lo) & 0xffffffff) < r_n
                    x = vec(w0 + r) if ok else [-math.inf] * 4
                    for q in range(4):
                        if ok and bound_ok(x[q]):
                            m |= 1 << (8 * u + q)
                enter.append(m)
                c = m - ((m >> 1) & 0x55555555)
                packed.append((c & 0x33333333) + ((c >> 2) & 0x33333333))
            incl = [sum(packed[:lane + 1]) & 0xffffffff for lane in range(32)]
            tot = incl[31]
            pairs = (tot & 0x00ff00ff) + ((tot >> 8) & 0x00ff00ff)
            step_total = (pairs & 0xffff) + (pairs >> 16)
            if cnt + step_total > slice_:
                return None  # a slice overflows
            for lane in range(32):
                excl = (incl[lane] - packed[lane]) & 0xffffffff
                first = cnt
                for u in range(U):
                    o = first + ((excl >> (8 * u)) & 0xff)
                    first += (tot >> (8 * u)) & 0xff
                    v = w0 + (j * U + u) * 32 + lane
                    for q in range(4):
                        if enter[lane] >> (8 * u + q) & 1:
                            assert sl[o] is None, "two entries on one slot"
                            sl[o] = (topk_key(vec(v)[q]), 4 * v - mis + q)
                            o += 1
            cnt += step_total
        if not edges(f1, w1):
            return None
        assert all(e is not None for e in sl[:cnt]), "a slot left empty"
        slices.append(sl[:cnt])
    total = sum(len(x) for x in slices)
    if total < k or total > cap2:
        return None
    return [e for sl in slices for e in sl]


def reference(keys, poss, k, best):
    cand = [(key, p) for key, p in zip(keys, poss) if key > 0]
    cand.sort(key=lambda e: (-e[0], e[1]))
    top = cand[:k]
    if not best:
        top.sort(key=lambda e: e[1])
    return [p for _, p in top] + [-1] * (k - len(top))


def row(rng, n, fill):
    v = []
    for p in range(n):
        x = rng.uniform(-10, 10)
        if fill == "uniform":
            pass
        elif fill == "bench":  # mla_bench_dsa's fill: 24-bit steps in [-1, 1)
            x = rng.randrange(1 << 24) * (2.0 / 16777216.0) - 1.0
        elif fill == "gauss":
            x = rng.gauss(0, 1)
        elif fill == "ties":
            x = round(x)
        elif fill == "heavy_ties":
            x = round(x / 8)
        elif fill == "all_equal":
            x = 0.5
        elif fill == "one_bucket":
            x = 1.0 + rng.uniform(0, 1e-4)
        elif fill == "sorted_up":
            x = p * 1e-3 - 7
        elif fill == "sorted_down":
            x = 7 - p * 1e-3
        elif fill == "neg_inf_tail":
            x = -math.inf if p >= n // 2 else x
        elif fill == "nan_mix":
            m = rng.randrange(100)
            x = (math.nan if m < 30 else -math.inf if m < 40 else math.inf if m == 40 else
                 -0.0 if m == 41 else 0.0 if m == 42 else 1e-45 if m == 43 else
                 -1e-45 if m == 44 else x)
        elif fill == "one_huge":
            x = 1e30 if p == 7 else rng.uniform(-1e-3, 1e-3)
        elif fill == "two_scales":  # an outlier far above a dense threshold region
            x = 1e4 if p % 5000 == 3 else rng.gauss(0, 1)
        v.append(x)
    return v


def main():
    rng = random.Random(1907)
    fills = ["uniform", "bench", "gauss", "ties", "heavy_ties", "all_equal", "one_bucket",
             "sorted_up", "sorted_down", "neg_inf_tail", "nan_mix", "one_huge", "two_scales"]
    shapes = [(3000, 2048, 11, 2048 * 4), (20000, 2048, 11, 18432), (5000, 512, 10, 2048),
              (1500, 2048, 11, 8192), (40000, 8192, 11, 8192), (100, 64, 11, 2048)]
    runs = fast = 0
    for fill in fills:
        for n, k, bits, cap in shapes:
            logits = row(rng, n, fill)
            keys_all = [topk_key(x) for x in logits]
            # The candidates the stream or the resident cut leaves: every
            # candidate key at or above the m-th best's (m >= k), in position order.
            ranked = sorted((key for key in keys_all if key > 0), reverse=True)
            m = min(len(ranked), rng.randint(k, 2 * k))
            bound = ranked[m - 1] if m > 0 else 1
            keys = [key for key in keys_all if key >= bound and key > 0]
            poss = [p for p, key in enumerate(keys_all) if key >= bound and key > 0]
            for best in (True, False):
                got = rank_finish(keys, poss, k, best, bits, cap, rng)
                runs += 1
                if got is None:
                    continue  # the select path runs; it has its own tests
                fast += 1
                want = reference(keys_all, list(range(n)), k, best)
                if got != want:
                    print(f"MISMATCH {fill} n={n} k={k} best={best}")
                    return 1
    # The cluster's gather: each rank's own k best (rank_cut + compact, in place,
    # position order), concatenated in rank order, then the rank finish.
    for fill in fills:
        for n, k, cs in [(40000, 2048, 8), (30000, 512, 4), (9000, 2048, 2)]:
            logits = row(rng, n, fill)
            keys_all = [topk_key(x) for x in logits]
            per = (n + cs - 1) // cs
            gathered_k, gathered_p, ok = [], [], True
            for r in range(cs):
                seg = [(keys_all[p], p) for p in range(r * per, min(n, (r + 1) * per))
                       if keys_all[p] > 0]
                ks, ps = [e[0] for e in seg], [e[1] for e in seg]
                if len(ks) > k:
                    cut = rank_cut(ks, ps, k, 11, 8192, rng)
                    if cut is None:  # select_cut's path: the exact k best likewise
                        kept = sorted(seg, key=lambda e: (-e[0], e[1]))[:k]
                        kept.sort(key=lambda e: e[1])
                    else:
                        kept = compact(ks, ps, cut[0], cut[1])
                        want = sorted(sorted(seg, key=lambda e: (-e[0], e[1]))[:k],
                                      key=lambda e: e[1])
                        if kept != want:
                            print(f"RANK CUT MISMATCH {fill} n={n} k={k} cs={cs} rank={r}")
                            return 1
                    ks, ps = [e[0] for e in kept], [e[1] for e in kept]
                gathered_k += ks
                gathered_p += ps
            for best in (True, False):
                got = rank_finish(gathered_k, gathered_p, k, best, 11, 8192, rng)
                runs += 1
                if got is None:
                    continue
                fast += 1
                if got != reference(keys_all, list(range(n)), k, best):
                    print(f"GATHER MISMATCH {fill} n={n} k={k} cs={cs} best={best}")
                    return 1
    # The sieve: its entries are every logit at or above its bound, in position
    # order, and hold the k best (or it refuses).
    sieved = 0
    for fill in fills:
        for n, mis, k, threads, cap, cap2 in [(32768, 0, 2048, 512, 8192, 4096),
                                              (40001, 3, 256, 1024, 16384, 8192),
                                              (20003, 1, 512, 512, 8192, 4096),
                                              (32771, 0, 2048, 512, 8192, 4096),
                                              (40002, 1, 256, 1024, 16384, 8192)]:
            logits = row(rng, n, fill)
            got = sieve(logits, mis, k, threads, cap, cap2)
            if got is None:
                continue
            sieved += 1
            keys_all = [topk_key(x) for x in logits]
            if [p for _, p in got] != sorted(p for _, p in got):
                print(f"SIEVE ORDER {fill} n={n}")
                return 1
            low = min(kk for kk, _ in got)
            want = [(kk, p) for p, kk in enumerate(keys_all) if kk >= low and kk > 0]
            top = sorted(((kk, p) for p, kk in enumerate(keys_all) if kk > 0),
                         key=lambda e: (-e[0], e[1]))[:k]
            if got != want or not set(top) <= set(got):
                print(f"SIEVE MISMATCH {fill} n={n} mis={mis}")
                return 1
    if sieved < 6:
        print(f"the sieve took only {sieved} rows")
        return 1
    # Fills the rank finish must take (the benchmark's and smooth logits).
    for fill in ("uniform", "bench", "gauss"):
        logits = row(rng, 32768, fill)
        keys_all = [topk_key(x) for x in logits]
        ranked = sorted(keys_all, reverse=True)
        bound = ranked[3000]
        keys = [key for key in keys_all if key >= bound]
        poss = [p for p, key in enumerate(keys_all) if key >= bound]
        for best in (True, False):
            if rank_finish(keys, poss, 2048, best, 11, 18432, rng) is None:
                print(f"FALLBACK on {fill}: the rank finish should take it")
                return 1
    print(f"rank finish model: {runs} runs, {fast} by the rank finish, {sieved} rows sieved, "
          "all exact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
