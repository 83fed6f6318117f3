#!/usr/bin/env python3
"""Host model of the TMA + wgmma prefill indexer's barrier protocol
(src/cuda/indexer/indexer_prefill_wgmma.cu), run by a CPU ctest.

One CTA with n key tiles. Actors: the producer thread (the queries on q_full,
then each tile into ring stage i % STAGES after waiting for empty[s]), the copy
engine (copies land later, in random order and pieces, then complete the
barrier's transaction bytes), and the 8 consumer warps (warps 0-3: consumer 0,
4-7: consumer 1), each running the kernel's sequence: weights written, named
barrier kBarWeights + c (4 warps), wait q_full, consumer 1 opens consumer 0's
first turn, then per tile: wait full[s], bar.sync on its turn barrier, issue the
MMAs (reads of Q and stage s begin), bar.arrive on the other's turn barrier
(consumer 1 skips it after its last tile), MMAs complete (reads end), arrive on
empty[s], epilogue (reads its weights).

mbarriers: arrival counts and phase parity as PTX defines them (a fresh barrier
is in phase 0; waiting for parity 1 returns at once). Named barriers count warps
(32 threads each): bar.arrive counts and goes on, bar.sync counts and waits until
the generation completes (8 warps). Checked as the model runs: a stage is never
overwritten while a warp's MMAs read it and holds the expected tile when read;
the queries and weights are in place before they are read; each generation of a
turn barrier is made of the 4 warps of the consumer whose turn it is (sync) and
the 4 warps of the other (arrive), never of two generations' arrivals; no
deadlock; every named barrier is back at count 0 when the CTA ends (no arrival
left pending at exit).

With the candidate sink (the fused prefill select, indexer_prefill_candidates.cuh)
each consumer's epilogue of tile i also reads the 4 warps' counts of tile i - 1
(slot (i - 1) % 2; the entries of a tile are stored one tile late), reads its
4 rows' bounds, adds to their histograms (shared atomics) and writes its warp's
counts of tile i (slot i % 2); at refresh tiles (7, then every max(8, (i + 1) // 8))
it syncs on kBarCand + c (the consumer's 4 warps) and warp w rescans row
4c + w's histogram and writes its bound; after the last tile it syncs on
kBarCand + c and reads the last tile's counts. The constructor clears the
histograms and bounds before the weights barrier. Each shared word's
accesses are checked with vector clocks (a bar.sync joins the clocks of every
warp counted in its generation, a bar.arrive only gives its own): every
conflicting pair (a write or an atomic against a plain read or write, by two
warps) must be ordered by the barriers, as racecheck would demand.
"""
import random
import sys

STAGES = 8
EMPTY_ARRIVALS = 8  # one per consumer warp
REFRESH = 8  # kRefreshTiles
GROWTH = 8  # kRefreshGrowth


def refresh_tiles(n):
    """The tiles at which the bounds are rescanned (CandidateSink::tile)."""
    out, nxt = set(), REFRESH - 1
    for i in range(n):
        if i == nxt:
            out.add(i)
            nxt = i + max(REFRESH, (i + 1) // GROWTH)
    return out
WARPS = 8


class Memory:
    """Shared words with their accesses: (warp, epoch, kind), kind in read / write / atomic."""

    def __init__(self):
        self.log = {}

    def access(self, clock, warp, word, kind):
        for (u, epoch, k) in self.log.get(word, []):
            if u == warp or (k == "read" and kind == "read") or (k == "atomic" and kind == "atomic"):
                continue
            assert clock[u] >= epoch, (f"race on {word}: warp {warp} {kind} not ordered after warp "
                                      f"{u}'s {k} (epoch {epoch}, seen {clock[u]})")
        self.log.setdefault(word, []).append((warp, clock[warp], kind))


class MBar:
    def __init__(self, count):
        self.count, self.pending, self.phase = count, count, 0
        self.tx = 0

    def arrive(self, tx=0):
        self.tx += tx
        self.pending -= 1
        assert self.pending >= 0
        self._complete()

    def land(self, nbytes):
        self.tx -= nbytes
        assert self.tx >= 0
        self._complete()

    def _complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def passed(self, parity):
        return (self.phase & 1) != parity


class Named:
    """A named barrier over `warps` warps; remembers who made each generation."""

    def __init__(self, name, warps):
        self.name, self.warps, self.members, self.gen = name, warps, [], 0
        self.joined = {}  # generation -> the join of its members' clocks

    def add(self, warp, kind, clock):
        """Counts the warp in with its clock; returns the generation it joined."""
        gen = self.gen
        self.members.append((warp, kind, list(clock)))
        if len(self.members) == self.warps:
            self.check([(w, k) for w, k, _ in self.members])
            self.joined[gen] = [max(m[2][i] for m in self.members) for i in range(WARPS)]
            self.members, self.gen = [], self.gen + 1
        return gen

    def check(self, members):
        if not self.name.startswith("turn"):
            return
        c = int(self.name[-1])
        syncers = sorted(w for w, k in members if k == "sync")
        arrivers = sorted(w for w, k in members if k == "arrive")
        assert syncers == list(range(4 * c, 4 * c + 4)), f"{self.name}: syncers {syncers}"
        assert arrivers == list(range(4 * (1 - c), 4 * (1 - c) + 4)), \
            f"{self.name}: arrivals {arrivers} (two generations mixed?)"


def run(n, seed):
    rnd = random.Random(seed)
    full = [MBar(1) for _ in range(STAGES)]
    empty = [MBar(EMPTY_ARRIVALS) for _ in range(STAGES)]
    q_full = MBar(1)
    stage = [None] * STAGES  # tile tag held by each stage
    readers = [set() for _ in range(STAGES)]  # warps whose MMAs read the stage now
    q_ready = [False]
    weights = [False, False]
    # kBarWeights + c: the 4 warps of consumer c; kBarTurn + c: all 8 consumer warps
    named = {"w0": Named("w0", 4), "w1": Named("w1", 4), "turn0": Named("turn0", 8),
             "turn1": Named("turn1", 8), "cand0": Named("cand0", 4), "cand1": Named("cand1", 4)}
    mem = Memory()
    # clocks[w]: warp w's vector clock; its own entry is the epoch of its
    # accesses (from 1), raised after each of its barrier arrivals, so an access
    # is ordered before warp v's point when clocks[v][u] >= the access's epoch.
    clocks = [[int(u == w) for u in range(WARPS)] for w in range(WARPS)]
    in_flight = []  # [target, tag, bytes left]
    TILE = 4  # bytes of a tile / of the queries, in landing pieces

    # producer program
    prod = {"pc": 0}
    prog = [("q",)] + [("tile", i) for i in range(n)]

    def step_producer():
        if prod["pc"] >= len(prog):
            return False
        op = prog[prod["pc"]]
        if op[0] == "q":
            q_full.arrive(tx=TILE)
            in_flight.append(["q", None, TILE])
        else:
            i = op[1]
            s = i % STAGES
            if i >= STAGES and not empty[s].passed(((i // STAGES) - 1) & 1):
                return False
            assert not readers[s], f"tile {i} issued into stage {s} while read by {readers[s]}"
            full[s].arrive(tx=TILE)
            stage[s] = ("loading", i)
            in_flight.append(["stage", i, TILE])
        prod["pc"] += 1
        return True

    def land():
        """Part of one copy in flight lands (TMA writes a box in pieces)."""
        if not in_flight:
            return False
        copy = rnd.choice(in_flight)
        target, tag = copy[0], copy[1]
        piece = rnd.randint(1, copy[2])
        copy[2] -= piece
        landed = copy[2] == 0
        if landed:
            in_flight.remove(copy)
        if target == "q":
            q_ready[0] = q_ready[0] or landed
            q_full.land(piece)
            return True
        s = tag % STAGES
        assert not readers[s], f"stage {s} written while read by {readers[s]}"
        if landed:
            stage[s] = ("tile", tag)
        full[s].land(piece)
        return True

    def program(w):
        c = w // 4
        # The sink's constructor: the consumer's rows' histograms (each warp a
        # quarter of every row's words) and bounds (warp 0 of the consumer).
        setup = [("mem", ("hist", 4 * c + r, w % 4), "write") for r in range(4)]
        if w % 4 == 0:
            setup += [("mem", ("bound", 4 * c + r), "write") for r in range(4)]
        st = [("write_w",)] + setup + [("bar_sync", f"w{c}"), ("wait_q",)]
        if n == 0:
            return st + [("done",)]
        if c == 1:
            st.append(("bar_arrive", "turn0"))
        for i in range(n):
            st += [("wait_full", i), ("bar_sync", f"turn{c}"), ("mma_issue", i)]
            if c == 0 or i + 1 < n:
                st.append(("bar_arrive", f"turn{1 - c}"))
            st += [("mma_done", i), ("arrive_empty", i), ("epilogue",)]
            # The candidate sink's tile: lane t of every warp handles row 4c + t.
            if i > 0:
                st += [("mem", ("counts", (i - 1) % 2, c, v), "read") for v in range(4)]
            st += [("mem", ("bound", 4 * c + r), "read") for r in range(4)]
            st += [("mem", ("hist", 4 * c + r, part), "atomic") for r in range(4) for part in range(4)]
            st += [("mem", ("counts", i % 2, c, w % 4), "write")]
            if i in refreshes:
                st += [("bar_sync", f"cand{c}")]
                st += [("mem", ("hist", w, part), "read") for part in range(4)]
                st += [("mem", ("bound", w), "read"), ("mem", ("bound", w), "write")]
        if n > 0:
            st += [("bar_sync", f"cand{c}")]
            st += [("mem", ("counts", (n - 1) % 2, c, v), "read") for v in range(4)]
        return st + [("done",)]

    refreshes = refresh_tiles(n)
    progs = [program(w) for w in range(8)]
    pcs = [0] * 8
    waiting = [None] * 8  # generation a bar.sync waits for

    def step_warp(w):
        op = progs[w][pcs[w]]
        kind = op[0]
        c = w // 4
        if kind == "done":
            return False
        if kind == "write_w":
            pass
        elif kind == "bar_sync":
            bar = named[op[1]]
            if waiting[w] is None:
                waiting[w] = bar.add(w, "sync", clocks[w])
                clocks[w][w] += 1
                return True
            if bar.gen <= waiting[w]:
                return False
            clocks[w] = [max(a, b) for a, b in zip(clocks[w], bar.joined[waiting[w]])]
            waiting[w] = None
        elif kind == "bar_arrive":
            named[op[1]].add(w, "arrive", clocks[w])
            clocks[w][w] += 1
        elif kind == "mem":
            mem.access(clocks[w], w, op[1], op[2])
        elif kind == "wait_q":
            if not q_full.passed(0):
                return False
            assert q_ready[0], "q_full passed before the queries landed"
        elif kind == "wait_full":
            i = op[1]
            if not full[i % STAGES].passed((i // STAGES) & 1):
                return False
        elif kind == "mma_issue":
            i = op[1]
            s = i % STAGES
            assert q_ready[0], "MMA before the queries"
            assert stage[s] == ("tile", i), f"warp {w}: stage {s} holds {stage[s]}, want tile {i}"
            readers[s].add(w)
        elif kind == "mma_done":
            i = op[1]
            s = i % STAGES
            assert stage[s] == ("tile", i), f"warp {w}: stage {s} overwritten during its MMAs"
            readers[s].discard(w)
        elif kind == "arrive_empty":
            empty[op[1] % STAGES].arrive()
        elif kind == "epilogue":
            assert weights[c], "weights read before the consumer's barrier"
        pcs[w] += 1
        if kind == "bar_sync" and op[1].startswith("w"):
            weights[c] = True
        return True

    # Each round, the actors in a random order; the first that can move does
    # (any() stops there). No actor able to move: the end, or a deadlock.
    actors = [step_producer, land] + [lambda w=w: step_warp(w) for w in range(8)]
    for _ in range(10 ** 6):
        if any(act() for act in rnd.sample(actors, len(actors))):
            continue
        finished = prod["pc"] >= len(prog) and not in_flight and \
            all(progs[w][pcs[w]] == ("done",) for w in range(8))
        assert finished, (f"deadlock: n {n} seed {seed} producer at {prod['pc']} "
                          f"warps at {[progs[w][pcs[w]] for w in range(8)]}")
        for name, bar in named.items():
            assert not bar.members, f"{name}: {bar.members} left pending at exit"
        return
    raise AssertionError("no termination")


def main():
    runs = 0
    assert sorted(refresh_tiles(200))[:4] == [7, 15, 23, 31] and 199 not in refresh_tiles(200)
    for n in [1, 2, 3, 7, 8, 9, 16, 17, 25, 80]:
        for seed in range(60):
            run(n, seed)
            runs += 1
    print(f"indexer prefill barrier model: {runs} random schedules, no deadlock, no stage "
          "overwritten while read, turn barriers one generation at a time, none pending at exit, "
          "the candidate sink's shared words ordered by the barriers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
