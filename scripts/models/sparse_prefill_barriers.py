#!/usr/bin/env python3
"""Host model of the sparse prefill kernel's barrier protocol
(src/cuda/sparse/sparse_prefill_kernel.cuh), run before the kernel's first GPU run.

Actors: the producer warpgroup (one actor: its 128 threads wait and issue together,
each thread's copies land at a random later step and then arrive on the stage's
full barrier), and the math warps (8 actors, 4 per warpgroup; warps of one warpgroup
issue wgmma together, which the model reflects by making the named barriers and
wgmma completion per-warp events). mbarriers are modelled with their arrival count
and phase parity exactly as PTX defines them (try_wait.parity returns when the
phase with that parity has completed; a fresh barrier is in phase 0, so waiting on
parity 1 returns at once). Named barriers 1 and 2 release when all 8 math warps
arrived. Random schedules; checks: no deadlock, every read of a stage sees the
tile the reader expects (the producer never overwrites a stage still read), the P
block and the row-max slots are never written while a reader of the previous tile
may still read them, and the full barrier's phases never alias (a reader never
passes on a phase of an older round).
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
        # try_wait.parity(p) succeeds iff the current (incomplete) phase's parity != p,
        # i.e. the most recent completed phase had parity p.
        return (self.phase & 1) != parity


def run(n_tiles, seed):
    rnd = random.Random(seed)
    full = [MBar(PRODUCER_THREADS) for _ in range(STAGES)]
    empty = [MBar(MATH_WARPS) for _ in range(STAGES)]
    stage_tile = [None] * STAGES  # tile whose data a stage holds (landed copies)
    in_flight = []  # (stage, tile, threads remaining)
    named = {1: [0, 0], 2: [0, 0]}  # arrivals in the current generation, generation number
    p_block_tile = None  # tile whose P is in the shared block
    p_readers = set()  # warps whose P.V of p_block_tile has not completed
    # producer state
    prod = {"t": 0, "state": "wait_empty"}
    # per math warp: program counter over a list of steps per tile
    warps = [{"t": 0, "pc": "prologue", "gen": None} for _ in range(MATH_WARPS)]

    def wg_of(w):
        return w // 4

    def step_producer():
        t = prod["t"]
        if t >= n_tiles:
            return False
        s = t % STAGES
        if prod["state"] == "wait_empty":
            if not empty[s].passed(((t // STAGES) & 1) ^ 1):
                return False
            # overwriting stage s: nobody may still read the tile it held
            prod["state"] = "issue"
            return True
        # issue copies of tile t into stage s; they land later, thread by thread
        stage_tile[s] = ("loading", t)
        in_flight.append([s, t, PRODUCER_THREADS])
        prod["t"] += 1
        prod["state"] = "wait_empty"
        return True

    def land_copies():
        if not in_flight:
            return False
        i = rnd.randrange(len(in_flight))
        item = in_flight[i]
        k = rnd.randint(1, item[2])
        item[2] -= k
        for _ in range(k):
            if item[2] == 0 and _ == k - 1:
                stage_tile[item[0]] = ("ready", item[1])
            full[item[0]].arrive()
        if item[2] == 0:
            in_flight.pop(i)
        return True

    def named_arrive(w, bar_id):
        st = named[bar_id]
        st[0] += 1
        gen = st[1]
        if st[0] == MATH_WARPS:
            st[0], st[1] = 0, st[1] + 1
        return gen

    def named_passed(bar_id, gen):
        return named[bar_id][1] > gen

    def read_stage(w, t):
        s = t % STAGES
        assert stage_tile[s] == ("ready", t), f"warp {w} reads tile {t}, stage holds {stage_tile[s]}"

    def step_warp(w):
        nonlocal p_block_tile
        st = warps[w]
        t, pc = st["t"], st["pc"]
        if pc == "done":
            return False
        if pc == "prologue":
            if n_tiles == 0:
                st["pc"] = "epilogue"
                return True
            if not full[0].passed(0):
                return False
            read_stage(w, 0)  # S(0)
            st["pc"] = "bar1"
            return True
        if pc == "bar1":  # row maxima written (slot of this warp's warpgroup)
            st["gen"] = named_arrive(w, 1)
            st["pc"] = "bar1_wait"
            return True
        if pc == "bar1_wait":
            if not named_passed(1, st["gen"]):
                return False
            st["pc"] = "write_p"
            return True
        if pc == "write_p":
            # P block: no warp may still run P.V of an older tile
            assert not p_readers or p_block_tile == t, f"P overwritten while read ({p_readers})"
            p_block_tile = t
            st["gen"] = named_arrive(w, 2)
            st["pc"] = "bar2_wait"
            return True
        if pc == "bar2_wait":
            if not named_passed(2, st["gen"]):
                return False
            assert p_block_tile == t
            p_readers.add(w)
            read_stage(w, t)  # P.V issued (reads stage t until completed)
            st["pc"] = "next_s"
            return True
        if pc == "next_s":
            if t + 1 < n_tiles:
                if not full[(t + 1) % STAGES].passed(((t + 1) // STAGES) & 1):
                    return False
                read_stage(w, t + 1)  # S(t + 1) issued
            st["pc"] = "pv_done"
            return True
        if pc == "pv_done":  # wait<1>: P.V(t) complete, release the stage
            read_stage(w, t)
            p_readers.discard(w)
            empty[t % STAGES].arrive()
            st["t"] += 1
            st["pc"] = "bar1" if t + 1 < n_tiles else "epilogue"
            return True
        if pc == "epilogue":
            st["gen"] = named_arrive(w, 1)
            st["pc"] = "epi_wait"
            return True
        if pc == "epi_wait":
            if not named_passed(1, st["gen"]):
                return False
            st["pc"] = "done"
            return True
        raise AssertionError(pc)

    actors = ["p", "land"] + list(range(MATH_WARPS))
    for _ in range(200000):
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
            if all(wp["pc"] == "done" for wp in warps) and prod["t"] >= n_tiles and not in_flight:
                return
            raise AssertionError(
                f"deadlock: tiles {n_tiles} seed {seed} producer {prod} warps {warps}")
    raise AssertionError("no termination")


def main():
    runs = 0
    for n_tiles in [0, 1, 2, 3, 4, 5, 8, 33]:
        for seed in range(300 if n_tiles < 10 else 40):
            run(n_tiles, seed)
            runs += 1
    print(f"sparse prefill barrier model: {runs} random schedules, no deadlock, no hazard")


if __name__ == "__main__":
    sys.exit(main())
