#!/usr/bin/env python3
"""Host model of the sparse prefill kernel's barrier protocol
(src/cuda/sparse/sparse_prefill_kernel.cuh), run before the kernel's first GPU run.

One persistent CTA running a sequence of work items, each with its own tile count
(0, 1, 2, ... tiles). Actors: the producer warpgroup (one actor: its threads wait
and issue together; each thread's copies land at a random later step and then
arrive on the barrier they fill), the copy engine (lands copies), and the 8 math
warps (4 per warpgroup). mbarriers are modelled with their arrival count and phase
parity as PTX defines them (try_wait.parity(p) returns once the phase of parity p
has completed; a fresh barrier is in phase 0, so waiting on parity 1 returns at
once). Named barriers 1 and 2 release when all 8 math warps arrived.
Random schedules; checks: no deadlock; every wgmma read of a ring stage or of the
Q buffer sees the tile / item the reader expects (nothing is overwritten while
read); the P block and the row-max / row-sum slots are never written while a reader
may still read the previous contents.
"""
import random
import sys

STAGES = 2
PRODUCER_THREADS = 128
MATH_WARPS = 8


class MBar:
    def __init__(self, count):
        self.count, self.pending, self.phase = count, count, 0  # phase = completed phases

    def arrive(self):
        self.pending -= 1
        assert self.pending >= 0
        if self.pending == 0:
            self.phase += 1
            self.pending = self.count

    def passed(self, parity):
        return (self.phase & 1) != parity


def run(items, seed):
    rnd = random.Random(seed)
    full = [MBar(PRODUCER_THREADS) for _ in range(STAGES)]
    empty = [MBar(MATH_WARPS) for _ in range(STAGES)]
    q_full, q_empty = MBar(PRODUCER_THREADS), MBar(MATH_WARPS)
    stage_tile = [None] * STAGES  # (state, global tile) a stage holds
    q_item = [None]  # (state, item) the Q buffer holds
    in_flight = []  # [kind, stage or None, tag, threads remaining]
    named = {1: [0, 0], 2: [0, 0]}
    # Shared slots, per writing warp (warp i of warpgroup w writes rows 16 i .. 16 i + 15;
    # warp i of the other warpgroup reads them): what each holds.
    red_max = [None] * MATH_WARPS  # tile
    red_sum = [[None] * MATH_WARPS for _ in range(2)]  # item, by item parity
    p_block = [None] * MATH_WARPS  # tile whose P rows (this warp's keys) the block holds

    # producer: program over items: ("q", k) then ("tile", k, t, g) ...
    prog = []
    g = 0
    for k, n in enumerate(items):
        prog.append(("q", k))
        for t in range(n):
            prog.append(("tile", k, t, g))
            g += 1
    prod = {"pc": 0, "waited": False}

    def partner(w):  # the warp of the other warpgroup that reads w's rows
        return (w + 4) % 8

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
            q_item[0] = ("loading", k)
            in_flight.append(["q", None, k, PRODUCER_THREADS])
        else:
            _, k, t, gg = op
            s = gg % STAGES
            if not prod["waited"]:
                if not empty[s].passed(((gg // STAGES) & 1) ^ 1):
                    return False
                prod["waited"] = True
                return True
            stage_tile[s] = ("loading", gg)
            in_flight.append(["tile", s, gg, PRODUCER_THREADS])
        prod["pc"] += 1
        prod["waited"] = False
        return True

    def land_copies():
        if not in_flight:
            return False
        i = rnd.randrange(len(in_flight))
        item = in_flight[i]
        k = rnd.randint(1, item[3])
        for _ in range(k):
            item[3] -= 1
            if item[3] == 0:
                if item[0] == "q":
                    q_item[0] = ("ready", item[2])
                else:
                    stage_tile[item[1]] = ("ready", item[2])
            (q_full if item[0] == "q" else full[item[1]]).arrive()
        if item[3] == 0:
            in_flight.pop(i)
        return True

    def named_arrive(bar_id):
        st = named[bar_id]
        st[0] += 1
        gen = st[1]
        if st[0] == MATH_WARPS:
            st[0], st[1] = 0, st[1] + 1
        return gen

    def named_passed(bar_id, gen):
        return named[bar_id][1] > gen

    def read_stage(w, gg):
        s = gg % STAGES
        assert stage_tile[s] == ("ready", gg), f"warp {w} reads tile {gg}, stage holds {stage_tile[s]}"

    def read_q(w, k):
        assert q_item[0] == ("ready", k), f"warp {w} reads Q of item {k}, buffer holds {q_item[0]}"

    # math warp programs: a list of steps per warp, generated from the kernel's flow
    def math_program():
        steps = []
        gg = 0
        for k, n in enumerate(items):
            steps.append(("wait_qfull", k))
            if n > 0:
                steps.append(("wait_full", gg))
                steps.append(("s", k, gg))  # issue + wait<0>
            if n <= 1:
                steps.append(("arrive_qempty",))
            for t in range(n):
                steps.append(("write_max", gg))
                steps.append(("bar", 1))
                steps.append(("read_max", gg))
                steps.append(("write_p", gg))
                steps.append(("bar", 2))
                steps.append(("end_read_max", gg))
                steps.append(("pv_issue", gg))
                if t + 1 < n:
                    steps.append(("wait_full", gg + 1))
                    steps.append(("s", k, gg + 1))  # issued; completes at the wait<0> below
                    steps.append(("pv_done", gg))  # wait<1>
                    if t + 2 == n:
                        steps.append(("arrive_qempty",))
                else:
                    steps.append(("pv_done", gg))  # wait<0>
                gg += 1
            steps.append(("write_sum", k))
            steps.append(("bar", 1))
            steps.append(("read_sum", k))
        steps.append(("done",))
        return steps

    progs = [math_program() for _ in range(MATH_WARPS)]
    pcs = [0] * MATH_WARPS
    gens = [None] * MATH_WARPS

    def step_warp(w):
        st = progs[w][pcs[w]]
        kind = st[0]
        if kind == "done":
            return False
        if kind == "wait_qfull":
            if not q_full.passed(st[1] & 1):
                return False
        elif kind == "wait_full":
            gg = st[1]
            if not full[gg % STAGES].passed((gg // STAGES) & 1):
                return False
        elif kind == "s":
            read_q(w, st[1])
            read_stage(w, st[2])
        elif kind == "arrive_qempty":
            q_empty.arrive()
        elif kind == "write_max":
            red_max[w] = st[1]
        elif kind == "bar":
            if gens[w] is None:
                gens[w] = named_arrive(st[1])
                return True
            if not named_passed(st[1], gens[w]):
                return False
            gens[w] = None
        elif kind == "read_max":
            assert red_max[partner(w)] == st[1], f"row max of tile {st[1]} overwritten"
        elif kind == "end_read_max":
            pass
        elif kind == "write_p":
            p_block[w] = st[1]
        elif kind in ("pv_issue", "pv_done"):
            assert all(x == st[1] for x in p_block), f"P of tile {st[1]} changed: {p_block}"
            read_stage(w, st[1])
            if kind == "pv_done":
                empty[st[1] % STAGES].arrive()
        elif kind == "write_sum":
            red_sum[st[1] & 1][w] = st[1]
        elif kind == "read_sum":
            assert red_sum[st[1] & 1][partner(w)] == st[1], f"row sums of item {st[1]} overwritten"
        pcs[w] += 1
        return True

    actors = ["p", "land"] + list(range(MATH_WARPS))
    for _ in range(500000):
        order = actors[:]
        rnd.shuffle(order)
        progressed = False
        for a in order:
            if a == "p":
                progressed = step_producer()
            elif a == "land":
                progressed = land_copies()
            else:
                progressed = step_warp(a)
            if progressed:
                break
        if not progressed:
            done = all(progs[w][pcs[w]][0] == "done" for w in range(MATH_WARPS))
            if done and prod["pc"] >= len(prog) and not in_flight:
                return
            raise AssertionError(f"deadlock: items {items} seed {seed} producer {prod} "
                                 f"warps {[progs[w][pcs[w]] for w in range(MATH_WARPS)]}")
    raise AssertionError("no termination")


def main():
    runs = 0
    shapes = [[0], [1], [2], [3], [5], [0, 0, 0], [1, 1, 1, 1], [2, 0, 3], [0, 1, 0, 2, 1],
              [4, 4, 4], [3, 1, 0, 0, 2, 5], [8, 8]]
    for items in shapes:
        for seed in range(150):
            run(items, seed)
            runs += 1
    rnd = random.Random(7)
    for seed in range(300):
        run([rnd.choice([0, 1, 1, 2, 3, 4]) for _ in range(rnd.randint(1, 6))], 1000 + seed)
        runs += 1
    print(f"sparse prefill barrier model: {runs} random schedules, no deadlock, no hazard")


if __name__ == "__main__":
    sys.exit(main())
