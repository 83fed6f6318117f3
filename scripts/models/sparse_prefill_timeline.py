#!/usr/bin/env python3
"""Timeline estimate of the sparse prefill kernel's pair loop
(src/cuda/sparse/sparse_prefill_kernel.cuh): steady-state cycles per tile pair
of one CTA for its schedules, against the latency of a gathered half tile.

Not a test (the barrier protocol is checked by sparse_prefill_barriers.py): a
deterministic event model used to predict what a schedule change does before
the GPU measures it. Actors: warpgroup 0, warpgroup 1 (each a sequence of
waits, CUDA-core work, signals and product issues) and the producer (one half
after another, each after its free barrier, landing `gather` cycles after its
issue). The tensor pipe runs products one at a time in the order they were
issued (m64n64k16: 32 cycles, m64n256k16: 128 cycles at 4096 flop / cycle / SM).
The costs of the CUDA-core phases are estimates (softmax of a 64 x 64 tile:
4096 exp2 at 16 / cycle plus the max, the FFMAs and the shuffles, ~400 cycles).

Schedules: prefill (the kernel's default), prefill_early (Kernel::prefill_early:
warpgroup 0 releases L0 / L1 as soon as their last product completed),
flashmla (FlashMLA's sm90 order: P1 in a block of its own, handed over at P0
V0_R's issue), and two variants the model found no better than prefill_early
(early_r0: R0 also released before the P1 hand-over; early_reorder: P0 V0_R
issued before P1 V1_R). Calibration (2026-12-06): the measured 8K rates, ours
~8,100 and FlashMLA's ~6,900 cycles per pair at ~1.98 GHz, sit at a gather of
~3,300-3,400 cycles on the prefill and flashmla rows.

Usage: sparse_prefill_timeline.py [--trace SCHEDULE GATHER]
"""
import sys

S_L, S_R, PV = 16 * 32, 20 * 32, 4 * 128  # S over blocks 0-3 / 4-8, one P.V (m64n256, 64 keys)
ISSUE = 20  # cycles to issue a product's wgmmas


def programs(schedule, pairs, softmax=400, store_p=80, hop=40, mask=60, producer_issue=80,
             gather=2000):
    """Op lists per actor. Ops: ("wait", signal), ("done", product) (its
    completion), ("cpu", cycles), ("sig", signal, delay), ("mma", product,
    cycles), ("land", signal, delay)."""
    early = schedule in ("prefill_early", "flashmla", "early_r0", "early_reorder")
    w0, w1, prod = [], [], []
    for g in range(pairs):
        if g == 0:
            w0 += [("wait", "rL0_0"), ("mma", "S0L_0", S_L), ("wait", "rR0_0"), ("mma", "S0R_0", S_R),
                   ("done", "S0R_0")]
        w0 += [("cpu", softmax), ("sig", f"m0_{g}", hop), ("mma", f"P0V0L_{g}", PV)]
        if early:
            w0 += [("done", f"P0V0L_{g}"), ("sig", f"fL0_{g}", 0), ("wait", f"m1_{g}"),
                   ("cpu", store_p), ("sig", f"p0_{g}", hop)]
        else:
            w0 += [("wait", f"m1_{g}"), ("cpu", store_p), ("sig", f"p0_{g}", hop),
                   ("done", f"P0V0L_{g}"), ("sig", f"fL0_{g}", 0)]
        w0 += [("wait", f"p1_{g}"), ("mma", f"P1V1L_{g}", PV)]
        nxt = [("wait", f"rL0_{g + 1}"), ("mma", f"S0L_{g + 1}", S_L)]
        rest = [("wait", f"rR0_{g + 1}"), ("mma", f"S0R_{g + 1}", S_R), ("done", f"S0R_{g + 1}")]
        if schedule in ("prefill_early", "early_r0", "early_reorder"):  # L1 before the next S0
            w0 += [("done", f"P1V1L_{g}"), ("sig", f"fL1_{g}", 0)]
            if g + 1 < pairs:
                w0 += nxt + rest
        elif g + 1 < pairs:  # prefill, flashmla: L1 released after the next S0's L half is issued
            w0 += nxt + [("done", f"P1V1L_{g}"), ("sig", f"fL1_{g}", 0)] + rest
        else:
            w0 += [("done", f"P1V1L_{g}"), ("sig", f"fL1_{g}", 0)]

        w1 += [("wait", f"rR1_{g}"), ("mma", f"S1R_{g}", S_R), ("wait", f"rL1_{g}"),
               ("mma", f"S1L_{g}", S_L), ("done", f"S1L_{g}"), ("cpu", mask), ("wait", f"m0_{g}"),
               ("cpu", softmax), ("sig", f"m1_{g}", hop), ("mma", f"P1V1R_{g}", PV)]
        if schedule == "flashmla":  # P1 into a block of its own, handed over at P0 V0_R's issue
            w1 += [("cpu", store_p), ("wait", f"p0_{g}"), ("mma", f"P0V0R_{g}", PV),
                   ("sig", f"p1_{g}", hop), ("done", f"P1V1R_{g}"), ("sig", f"fR1_{g}", 0),
                   ("done", f"P0V0R_{g}"), ("sig", f"fR0_{g}", 0)]
        elif schedule == "early_r0":  # R0 released before the P1 hand-over
            w1 += [("wait", f"p0_{g}"), ("mma", f"P0V0R_{g}", PV), ("done", f"P1V1R_{g}"),
                   ("sig", f"fR1_{g}", 0), ("done", f"P0V0R_{g}"), ("sig", f"fR0_{g}", 0),
                   ("cpu", 30 + store_p), ("sig", f"p1_{g}", hop)]
        elif schedule == "early_reorder":  # P0 V0_R before P1 V1_R; P1 into sP under P1 V1_R
            w1 = w1[:-1] + [("wait", f"p0_{g}"), ("mma", f"P0V0R_{g}", PV), ("mma", f"P1V1R_{g}", PV),
                            ("done", f"P0V0R_{g}"), ("sig", f"fR0_{g}", 0), ("cpu", 30 + store_p),
                            ("sig", f"p1_{g}", hop), ("done", f"P1V1R_{g}"), ("sig", f"fR1_{g}", 0)]
        else:  # P1 into sP once P0 V0_R (its last reader) completed
            w1 += [("wait", f"p0_{g}"), ("mma", f"P0V0R_{g}", PV), ("done", f"P1V1R_{g}"),
                   ("sig", f"fR1_{g}", 0), ("done", f"P0V0R_{g}"), ("cpu", 30 + store_p),
                   ("sig", f"p1_{g}", hop), ("sig", f"fR0_{g}", 0)]
        for h in (("L0", "R0", "R1", "L1") if schedule == "early_reorder" else ("L0", "R1", "R0", "L1")):
            if g > 0:
                prod.append(("wait", f"f{h}_{g - 1}"))
            prod += [("cpu", producer_issue), ("land", f"r{h}_{g}", gather)]
    return {"wg0": w0, "wg1": w1, "producer": prod}


def simulate(schedule, gather, pairs=40, **costs):
    actors = programs(schedule, pairs, gather=gather, **costs)
    pc = {a: 0 for a in actors}
    t = {a: 0.0 for a in actors}
    sig, done = {}, {}
    tensor_free = 0.0
    while True:
        ready = []
        for a, ops in actors.items():
            if pc[a] >= len(ops):
                continue
            op = ops[pc[a]]
            at = t[a]
            if op[0] == "wait":
                if op[1] not in sig:
                    continue
                at = max(at, sig[op[1]])
            elif op[0] == "done":
                if op[1] not in done:
                    continue
                at = max(at, done[op[1]])
            ready.append((at, a, op))
        if not ready:
            break
        at, a, op = min(ready)
        t[a] = at
        if op[0] == "cpu":
            t[a] += op[1]
        elif op[0] == "mma":
            start = max(at + ISSUE, tensor_free)
            tensor_free = done[op[1]] = start + op[2]
            t[a] += ISSUE
        elif op[0] in ("sig", "land"):
            sig[op[1]] = at + op[2]
        pc[a] += 1
    stuck = [a for a in actors if pc[a] < len(actors[a])]
    assert not stuck, f"{schedule}: stuck at {[(a, actors[a][pc[a]]) for a in stuck]}"
    lo, hi = pairs // 4, 3 * pairs // 4
    return (done[f"P1V1L_{hi}"] - done[f"P1V1L_{lo}"]) / (hi - lo), sig, done


SCHEDULES = ("prefill", "prefill_early", "flashmla", "early_r0", "early_reorder")


def main(argv):
    if len(argv) == 3 and argv[0] == "--trace":
        _, sig, done = simulate(argv[1], float(argv[2]))
        base = done["P1V1L_19"]
        events = sorted((v - base, k) for k, v in list(sig.items()) + list(done.items())
                        if k.rsplit("_", 1)[1] in ("20", "21"))
        for when, what in events:
            print(f"{when:8.0f}  {what}")
        return 0
    tensor = 2 * (S_L + S_R) + 4 * PV
    print(f"cycles per tile pair (tensor work alone: {tensor}); gather = cycles from a half's "
          "free barrier to its copies landing")
    print("gather " + "".join(f"{s:>15}" for s in SCHEDULES))
    for gather in (1000, 1500, 2000, 2500, 3000, 3500):
        row = [simulate(s, gather)[0] for s in SCHEDULES]
        print(f"{gather:6d} " + "".join(f"{x:15.0f}" for x in row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
