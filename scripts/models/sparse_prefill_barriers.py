#!/usr/bin/env python3
"""Host model of the sparse prefill kernel's barrier protocol
(src/cuda/sparse/sparse_prefill_kernel.cuh), run before a protocol change's first
GPU run (ctest: model.sparse_prefill_barriers, label cpu).

One persistent CTA running a sequence of work items of 0, 1, 2, ... tile pairs.
Actors: the producer warpgroup (one actor: its threads wait and issue together;
the copies land later, at random, and then arrive on the barrier they fill), the
copy engine, and the 8 math warps (warps 0-3: warpgroup 0, 4-7: warpgroup 1), each
running the kernel's sequence of waits, arrivals, writes and product issues /
completions, interleaved at random. mbarriers: arrival count and phase parity as
PTX defines them (try_wait.parity(p) returns once the phase of parity p
completed; a fresh barrier is in phase 0, so parity 1 passes at once; a barrier
two phases ahead of a waiter would block it: a deadlock here). A warp arrives
once for its 32 threads (a count of 128 threads is 4 warps). Named barriers:
bar.sync counts and waits until the generation is complete.
Shared slots carry tags (which tile / pair / item wrote them); every read checks
the tag it expects, at the start and at the end of a product, so an overwrite
while a product runs, a read before the write, or a deadlock fails the model.

Buffer reuse (which phase writes / reads which shared region, and through which
proxy), checked as the model runs:
  Q, L0, R0 (with K0's rope block), L1, R1: written by the producer's cp.async
    only, read by wgmma only (S products, P.V products).
  sP: P0 written by warpgroup 0 (generic stores), handed over through the
    mbarrier p0_full, read by warpgroup 1's P0 V0_R; then P1 written by
    warpgroup 1 once that product completed in all 4 of its warps (kBarW1, a
    bar.sync of warpgroup 1 alone), handed over through p1_full, read by
    warpgroup 0's P1 V1_L.
  sm0 [row] (m0 of a pair, warpgroup 0 -> 1 through max0_full), sm1 [row] (m1,
    warpgroup 1 -> 0 through max1_full), red_sum [item & 1][warpgroup][row]
    (both ways through sum_full, which every math thread arrives on and waits
    on): generic stores and loads.
No region has both a cp.async and a generic writer ("wrote" below fails
otherwise): racecheck cannot follow an ordering that runs through
cp.async.mbarrier.arrive.

Racecheck view (vector clocks over the 8 math warps): every generic access to
sm0, sm1, red_sum and sP (and the wgmma reads of sP, at issue and at
completion) must come after every conflicting access of another warp through
a chain of mbarrier arrive -> wait edges (arrive releases, a wait that sees
the phase complete acquires what was released into it) and bar.sync
generations (kBarW1). A bar.arrive gives no edge: the tool reported 70 hazards
on the previous protocol, whose m0 / m1 / P hand-overs were bar.arrive ->
bar.sync on named barriers; that protocol ("named" below) must fail this check
(so the check can fail), the mbarrier one ("mbar", the kernel's) must pass it.
Without the second buffer of the row sums the check must fail too (an
item's write would race the partner's read of the item two back).
"""
import random
import sys

PRODUCER_THREADS = 128
MATH_WARPS = 8


class MBar:
    """An mbarrier with a vector clock per completed phase."""

    def __init__(self, count):
        self.count, self.pending, self.phase = count, count, 0
        self.acc = [0] * MATH_WARPS  # clocks released into the current phase
        self.done = {}  # completed phase -> its clock

    def arrive(self, clock=None):
        self.pending -= 1
        assert self.pending >= 0
        if clock is not None:
            self.acc = [max(a, b) for a, b in zip(self.acc, clock)]
        if self.pending == 0:
            self.done[self.phase] = self.acc
            self.phase += 1
            self.pending, self.acc = self.count, [0] * MATH_WARPS

    def passed(self, parity):
        return (self.phase & 1) != parity

    def acquired(self):
        """Clock a waiter joins: the phase whose completion it saw."""
        return self.done.get(self.phase - 1, [0] * MATH_WARPS)


HALVES = ["L0", "R0", "L1", "R1"]


def math_program(w, items, protocol, early=False):
    """The kernel's steps for math warp w over the items. early (the fp8-key
    instantiation): warpgroup 0 releases L0 once P0 V0_L completed (before it
    waits for m1) and L1 once P1 V1_L completed (before it issues the next
    S0); else (bf16 keys) after the P0 hand-over and after the next S0's L
    half."""
    wg = w // 4
    st = []
    g = 0
    mbar = protocol != "named"
    for k, pairs in enumerate(items):
        st.append(("wait_q", k))
        if wg == 0:
            if pairs > 0:
                st += [("wait_ready", "L0", g), ("s", k, ["L0"], g), ("wait_ready", "R0", g),
                       ("s", k, ["R0", "rope0"], g)]
            if pairs <= 1:
                st.append(("arrive_qe",))
            for i in range(pairs):
                gg = g + i
                if mbar and early:
                    st += [("write_max", "sm0", ("m0", gg)), ("mb_arrive", "max0"),
                           ("pv_issue", "l0", [("L0", gg)]),
                           ("pv_done", "l0", [("L0", gg)]), ("free", "L0"),
                           ("mb_wait", "max1", gg), ("read_max", "sm1", ("m1", gg)),
                           ("write_p", ("P0", gg)), ("mb_arrive", "p0"), ("mb_wait", "p1", gg)]
                elif mbar:
                    st += [("write_max", "sm0", ("m0", gg)), ("mb_arrive", "max0"),
                           ("pv_issue", "l0", [("L0", gg)]),
                           ("mb_wait", "max1", gg), ("read_max", "sm1", ("m1", gg)),
                           ("write_p", ("P0", gg)), ("mb_arrive", "p0"),
                           ("pv_done", "l0", [("L0", gg)]), ("free", "L0"),
                           ("mb_wait", "p1", gg)]
                else:
                    st += [("write_max", "s_max", ("m0", gg)), ("bar_arrive", "M0"),
                           ("pv_issue", "l0", [("L0", gg)]),
                           ("bar_sync", "M1"), ("read_max", "s_max", ("m1", gg)),
                           ("write_p", ("P0", gg)), ("bar_arrive", "P0"),
                           ("pv_done", "l0", [("L0", gg)]), ("free", "L0"),
                           ("bar_sync", "P1")]
                st += [("pv_issue", "r0", [("L1", gg), ("sP", ("P1", gg))])]
                if early:
                    st += [("pv_done", "r0", [("L1", gg), ("sP", ("P1", gg))]), ("free", "L1")]
                    if i + 1 < pairs:
                        st += [("wait_ready", "L0", gg + 1), ("s", k, ["L0"], gg + 1),
                               ("wait_ready", "R0", gg + 1), ("s", k, ["R0", "rope0"], gg + 1)]
                        if i + 2 == pairs:
                            st.append(("arrive_qe",))
                elif i + 1 < pairs:
                    st += [("wait_ready", "L0", gg + 1), ("s", k, ["L0"], gg + 1),
                           ("pv_done", "r0", [("L1", gg), ("sP", ("P1", gg))]), ("free", "L1"),
                           ("wait_ready", "R0", gg + 1), ("s", k, ["R0", "rope0"], gg + 1)]
                    if i + 2 == pairs:
                        st.append(("arrive_qe",))
                else:
                    st += [("pv_done", "r0", [("L1", gg), ("sP", ("P1", gg))]), ("free", "L1")]
        else:
            if pairs == 0:
                st.append(("arrive_qe",))
            for i in range(pairs):
                gg = g + i
                st += [("wait_ready", "R1", gg), ("s", k, ["R1"], gg), ("wait_ready", "L1", gg),
                       ("s", k, ["L1"], gg)]
                if i + 1 == pairs:
                    st.append(("arrive_qe",))
                if mbar:
                    st += [("mb_wait", "max0", gg), ("read_max", "sm0", ("m0", gg)),
                           ("write_max", "sm1", ("m1", gg)), ("mb_arrive", "max1"),
                           ("pv_issue", "l1", [("R1", gg)]), ("mb_wait", "p0", gg)]
                else:
                    st += [("bar_sync", "M0"), ("read_max", "s_max", ("m0", gg)),
                           ("write_max", "s_max", ("m1", gg)), ("bar_arrive", "M1"),
                           ("pv_issue", "l1", [("R1", gg)]), ("bar_sync", "P0")]
                st += [("pv_issue", "r1", [("R0", gg), ("sP", ("P0", gg))]),
                       ("pv_done", "l1", [("R1", gg)]), ("free", "R1"),
                       ("pv_done", "r1", [("R0", gg), ("sP", ("P0", gg))]),
                       ("bar_sync", "W1"), ("write_p", ("P1", gg)),
                       ("mb_arrive", "p1") if mbar else ("bar_arrive", "P1"), ("free", "R0")]
        g += pairs
        if mbar:
            st += [("write_sum", k), ("mb_arrive", "sum"), ("mb_wait", "sum", k), ("read_sum", k)]
        else:
            st += [("write_sum", k), ("bar_sync", "Sum"), ("read_sum", k)]
    st.append(("done",))
    return st


def run(items, seed, protocol="mbar", sum_buffers=2, early=False):
    """One random schedule; returns the accesses racecheck would see unordered."""
    rnd = random.Random(seed)
    ready = {h: MBar(PRODUCER_THREADS) for h in HALVES}
    # every half is released by the 4 warps of the warpgroup that reads it last
    free = {h: MBar(4) for h in HALVES}
    q_full, q_empty = MBar(PRODUCER_THREADS), MBar(MATH_WARPS)
    # math hand-overs: max0 / p0 by warpgroup 0's 4 warps, max1 / p1 by warpgroup
    # 1's, sum by all 8
    hand = {"max0": MBar(4), "max1": MBar(4), "p0": MBar(4), "p1": MBar(4),
            "sum": MBar(MATH_WARPS)}
    # slot contents
    half = {h: None for h in HALVES}  # tile tag of the K data (L0, R0 V part, L1, R1)
    rope0 = [None]  # R0's rope block: ("tile", t)
    q_slot = [None]
    maxima = {}  # (region, warp-row slot) -> tag
    s_p = [None] * 4  # sP rows by warp slot: ("P0", pair) or ("P1", pair)
    red_sum = {}  # (buffer, warp) -> item
    writers = {}

    def wrote(region, proxy):
        writers.setdefault(region, set()).add(proxy)
        assert len(writers[region]) == 1, f"{region} written by {writers[region]}"

    in_flight = []
    named = {}

    prog = []
    gp = 0
    for k, pairs in enumerate(items):
        prog.append(("q", k))
        for i in range(pairs):
            for h in ["L0", "R1", "R0", "L1"]:
                prog.append(("half", h, gp))
            gp += 1
    prod = {"pc": 0, "waited": False}

    def step_producer():
        if prod["pc"] >= len(prog):
            return False
        op = prog[prod["pc"]]
        if op[0] == "q":
            k = op[1]
            if not prod["waited"]:
                if not q_empty.passed((k & 1) ^ 1):
                    return False
                prod["waited"] = True
                return True
            q_slot[0] = ("loading", k)
            wrote("Q", "cp.async")
            in_flight.append(["q", k, PRODUCER_THREADS])
        else:
            _, h, g = op
            if not prod["waited"]:
                if not free[h].passed((g & 1) ^ 1):
                    return False
                prod["waited"] = True
                return True
            half[h] = ("loading", g)
            wrote(h, "cp.async")
            if h == "R0":
                rope0[0] = ("loading", g)
                wrote("rope0", "cp.async")
            in_flight.append([h, g, PRODUCER_THREADS])
        prod["pc"] += 1
        prod["waited"] = False
        return True

    def land():
        if not in_flight:
            return False
        i = rnd.randrange(len(in_flight))
        f = in_flight[i]
        n = rnd.randint(1, f[2])
        for _ in range(n):
            f[2] -= 1
            if f[2] == 0:
                if f[0] == "q":
                    q_slot[0] = ("ready", f[1])
                else:
                    half[f[0]] = ("ready", f[1])
                    if f[0] == "R0":
                        rope0[0] = ("tile", f[1])
            (q_full if f[0] == "q" else ready[f[0]]).arrive()
        if f[2] == 0:
            in_flight.pop(i)
        return True

    vc = [[0] * MATH_WARPS for _ in range(MATH_WARPS)]  # vector clock of each math warp
    gen_clock = {}  # (named barrier, generation) -> join of the clocks of its bar.sync warps

    def nb(bar_id):
        return named.setdefault(bar_id, [0, 0])

    def nb_arrive(bar_id, w, release):
        st = nb(bar_id)
        st[0] += 1
        gen = st[1]
        clk = gen_clock.setdefault((bar_id, gen), [0] * MATH_WARPS)
        if release:
            for i in range(MATH_WARPS):
                clk[i] = max(clk[i], vc[w][i])
        if st[0] == (4 if bar_id == "W1" else MATH_WARPS):  # W1: warpgroup 1 alone
            st[0], st[1] = 0, st[1] + 1
        return gen

    last_write = {}  # location -> (warp, its clock component)
    reads = {}  # location -> [(warp, clock component)] since the last write
    hazards = []

    def access(w, loc, write):
        vc[w][w] += 1
        prior = ([last_write[loc]] if loc in last_write else []) + (reads.get(loc, []) if write else [])
        for (pw, t) in prior:
            if pw != w and vc[w][pw] < t:
                hazards.append((loc, pw, w, "write" if write else "read"))
        if write:
            last_write[loc] = (w, vc[w][w])
            reads[loc] = []
        else:
            reads.setdefault(loc, []).append((w, vc[w][w]))

    progs = [math_program(w, items, protocol, early) for w in range(MATH_WARPS)]
    pcs = [0] * MATH_WARPS
    gens = [None] * MATH_WARPS

    def check_reads(w, reads_):
        for what, gg in reads_:
            if what in ("L0", "R0", "L1", "R1"):
                assert half[what] == ("ready", gg), f"warp {w}: {what} holds {half[what]}, want {gg}"
            elif what == "sP":
                assert all(x == gg for x in s_p), f"warp {w}: sP {s_p}, want {gg}"
                for row_slot in range(4):  # the warpgroup's product reads every row of sP
                    access(w, ("sP", row_slot), False)

    def step_warp(w):
        st = progs[w][pcs[w]]
        kind = st[0]
        slot = w % 4
        if kind == "done":
            return False
        if kind == "wait_q":
            if not q_full.passed(st[1] & 1):
                return False
        elif kind == "wait_ready":
            if not ready[st[1]].passed(st[2] & 1):
                return False
        elif kind == "s":
            _, k, parts, gg = st
            assert q_slot[0] == ("ready", k), f"warp {w}: Q holds {q_slot[0]}, want item {k}"
            for part in parts:
                if part == "rope0":
                    assert rope0[0] == ("tile", gg), f"warp {w}: rope0 {rope0[0]}, want tile {gg}"
                else:
                    assert half[part] == ("ready", gg), f"warp {w}: {part} {half[part]} want {gg}"
        elif kind == "arrive_qe":
            q_empty.arrive()
        elif kind == "write_max":
            _, region, tag = st
            maxima[(region, slot)] = tag
            wrote(region, "generic")
            access(w, (region, slot), True)
        elif kind == "read_max":
            _, region, tag = st
            got = maxima.get((region, slot))
            assert got == tag, f"warp {w}: {region} holds {got}, want {tag}"
            access(w, (region, slot), False)
        elif kind == "write_p":
            # a warp writes the 16 rows of sP its own accumulator holds
            s_p[slot] = st[1]
            wrote("sP", "generic")
            access(w, ("sP", slot), True)
        elif kind in ("pv_issue", "pv_done"):
            check_reads(w, st[2])
        elif kind == "free":
            free[st[1]].arrive()
        elif kind == "mb_arrive":
            vc[w][w] += 1
            hand[st[1]].arrive(vc[w])
        elif kind == "mb_wait":
            bar = hand[st[1]]
            if not bar.passed(st[2] & 1):
                return False
            vc[w] = [max(a, b) for a, b in zip(vc[w], bar.acquired())]
        elif kind == "bar_arrive":
            vc[w][w] += 1
            nb_arrive(st[1], w, release=False)  # racecheck's view: no edge
        elif kind == "bar_sync":
            if gens[w] is None:
                vc[w][w] += 1
                gens[w] = nb_arrive(st[1], w, release=True)
                return True
            if nb(st[1])[1] <= gens[w]:
                return False
            clk = gen_clock[(st[1], gens[w])]
            vc[w] = [max(a, b) for a, b in zip(vc[w], clk)]
            gens[w] = None
        elif kind == "write_sum":
            loc = ("red_sum", st[1] % sum_buffers, w)
            red_sum[loc] = st[1]
            wrote("red_sum", "generic")
            access(w, loc, True)
        elif kind == "read_sum":
            loc = ("red_sum", st[1] % sum_buffers, (w + 4) % MATH_WARPS)
            assert red_sum.get(loc) == st[1], f"warp {w}: row sums {red_sum.get(loc)}, want {st[1]}"
            access(w, loc, False)
        pcs[w] += 1
        return True

    actors = ["p", "land"] + list(range(MATH_WARPS))
    for _ in range(1000000):
        order = actors[:]
        rnd.shuffle(order)
        progressed = False
        for a in order:
            progressed = step_producer() if a == "p" else land() if a == "land" else step_warp(a)
            if progressed:
                break
        if not progressed:
            if all(progs[w][pcs[w]][0] == "done" for w in range(MATH_WARPS)) and \
                    prod["pc"] >= len(prog) and not in_flight:
                return hazards
            raise AssertionError(f"deadlock: items {items} seed {seed} producer {prod} "
                                 f"warps {[progs[w][pcs[w]] for w in range(MATH_WARPS)]}")
    raise AssertionError("no termination")


def main():
    runs = 0
    shapes = [[0], [1], [2], [3], [0, 0, 0], [1, 1, 1], [2, 0, 3], [0, 1, 0, 2, 1], [4, 4],
              [3, 1, 0, 0, 2], [1, 0, 1, 0, 1, 0]]
    rnd = random.Random(7)
    cases = [(items, seed) for items in shapes for seed in range(120)]
    cases += [([rnd.choice([0, 1, 1, 2, 3]) for _ in range(rnd.randint(1, 6))], 1000 + seed)
              for seed in range(400)]
    for early in (False, True):  # the bf16- and fp8-key instantiations' release points
        for items, seed in cases:
            hz = run(items, seed, "mbar", early=early)
            assert not hz, f"mbarrier protocol, early {early}, items {items} seed {seed}: {hz[:4]}"
            runs += 1
    # The check can fail: the previous protocol (bar.arrive -> bar.sync hand-
    # overs; its data are right, its orderings run through bar.arrive) and the
    # row sums in one buffer are flagged.
    flagged = set()
    for items, seed in cases[::4]:
        flagged |= {h[0][0] for h in run(items, seed, "named")}
    assert "s_max" in flagged, f"the check missed the bar.arrive hand-overs: {flagged}"
    one_buffer = set()
    for items, seed in cases[::4]:
        if len(items) >= 2:
            try:
                one_buffer |= {h[0][0] for h in run(items, seed, "mbar", sum_buffers=1)}
            except AssertionError as e:  # the overwrite happened in this schedule
                assert "row sums" in str(e), e
                one_buffer.add("red_sum")
    assert one_buffer == {"red_sum"}, f"one row-sum buffer: flagged {one_buffer}"
    print(f"sparse prefill barrier model: {runs} random schedules of the mbarrier hand-overs "
          "(both release schedules, bf16 and fp8 keys): "
          "no deadlock, no read before its write, no overwrite before its read, no region "
          "written by both cp.async and generic stores, every generic access of sm0 / sm1 / "
          "red_sum / sP ordered by mbarrier and bar.sync edges alone; the check flags "
          f"{sorted(flagged)} in the bar.arrive protocol and the row sums in one buffer")


if __name__ == "__main__":
    sys.exit(main())
