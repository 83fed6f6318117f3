#!/usr/bin/env python3
"""Host-side model of the v9 / v9b decode kernel's synchronisation protocol
(src/cuda/decode/decode_pair_kernel.cuh), explored over random interleavings.

Why: v9 and v9b hung on the H200 (every run). The cause found by reading was a
warp vote inside a lane-0 branch (not a protocol question, see
docs/perf-log.md "v9: the hang"); this model checks that the barrier protocol
itself has no deadlock and no stage overwrite, for pieces of 0, 1, 2, 3 and
many tiles, partial last tiles, bad pages and several pieces per worker.

What is modelled, one step per barrier operation:
  * mbarriers exactly as PTX has them: arrival count, pending arrivals,
    transaction bytes, completed-phase counter; try_wait.parity(P) returns
    true iff P differs from the parity of the phase in progress (so a fresh
    barrier passes parity 1, and a wait that comes two phases late blocks).
  * named barriers (bar.sync / bar.arrive with a thread count, by id).
  * the producer warpgroup as two actors, thread 0 (issues TMA, arrives) and
    the other 127 threads (one actor: they may lag behind thread 0 or run
    ahead of it, which is what the parity hazards are about).
  * each math warpgroup as one actor (its threads move together).
  * every TMA block copy as a separate event that lands at a random later
    time; cp.async copies land before the producer's named barrier.
Checked: no deadlock (no actor can move, no copy in flight, someone not
done); every read of a stage part (S, P.V, flags, P_a) sees the tile of its
pair, landed, and every read of sP the P_b of its pair; no copy or P store
into a part (or sP) that a math warpgroup still reads; named-barrier counts never overflow; the empty barriers never complete
a phase before the producer waited for the previous one.

--old-producer runs the producer as first committed (thread 0 issued a TMA
part right after its own wait, one producer barrier per pair) to show the
hang it could have when a producer thread was late to a wait.

Usage: decode9_protocol_sim.py [--runs N] [--seed S] [--old-producer]
"""
import argparse
import random
import sys

TILE = 64
LO, HI = 0, 1
BLOCK = 8192
PART_BLOCKS = {LO: 4, HI: 5}
BAR_Q, BAR_MAX, BAR_P, BAR_PROD = 1, 2, 3, 6
BAR_MA, BAR_MB, BAR_PB, BAR_PA, BAR_OWNP = 7, 8, 9, 10, 11


class ModelError(Exception):
    pass


class MBar:
    def __init__(self, name, count):
        self.name, self.count, self.pending, self.tx, self.phase = name, count, count, 0, 0

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def arrive(self, n=1, tx=0):
        if n > self.pending:
            raise ModelError(f"{self.name}: {n} arrivals with {self.pending} pending")
        self.tx += tx
        self.pending -= n
        self._maybe_complete()

    def complete_tx(self, b):
        self.tx -= b
        self._maybe_complete()

    def try_wait(self, parity):
        return parity != (self.phase & 1)


class NamedBar:
    def __init__(self):
        self.count, self.arrived, self.gen = None, 0, 0

    def arrive(self, bid, count, n):
        if self.count is None:
            self.count = count
        elif self.count != count:
            raise ModelError(f"bar {bid}: count {count} vs {self.count}")
        self.arrived += n
        if self.arrived > count:
            raise ModelError(f"bar {bid}: {self.arrived} arrivals for {count}")
        gen = self.gen
        if self.arrived == count:
            self.arrived, self.count, self.gen = 0, None, self.gen + 1
        return gen


class Part:
    """One (stage, part): what it holds and who still reads it."""

    def __init__(self, name):
        self.name = name
        self.tile = None  # (piece id, tile) of the last write
        self.landed = True
        self.inflight = 0  # TMA blocks not landed
        self.readers = set()
        self.pa = None  # (pair, version) of P_a (stage 0 Hi only)

    def write(self, tag, who):
        if self.readers:
            raise ModelError(f"{who} writes {self.name} while {sorted(self.readers)} read it")
        self.tile, self.landed = tag, False
        self.pa = None


class Sim:
    def __init__(self, pieces, chained, old_producer, rng, bad_tiles):
        self.pieces, self.chained, self.old, self.rng = pieces, chained, old_producer, rng
        self.bad_tiles = bad_tiles
        self.full = {(s, q): MBar(f"full[{s}][{q}]", 1) for s in (0, 1) for q in (LO, HI)}
        self.empty = {(s, q): MBar(f"empty[{s}][{q}]", 256 if (s, q) == (0, HI) else 128)
                      for s in (0, 1) for q in (LO, HI)}
        self.named = {}
        self.parts = {(s, q): Part(f"stage{s}.{'Lo' if q == LO else 'Hi'}")
                      for s in (0, 1) for q in (LO, HI)}
        self.flags = {0: None, 1: None}  # stage -> tag of the tile whose flags it holds
        self.sp = None  # pair whose P_b sP holds
        self.sp_readers = set()
        self.tma = []  # [(part key, full key, tag)]
        self.actors = {}
        self.empty_waited = {k: -1 for k in self.empty}  # highest phase the producer waited for

    # ---- primitives used by the actors (generators yield a readiness test) ----
    def nb(self, bid):
        return self.named.setdefault(bid, NamedBar())

    def bar_sync(self, bid, count, n):
        b = self.nb(bid)
        gen = b.arrive(bid, count, n)
        return lambda: b.gen > gen

    def bar_arrive(self, bid, count, n):
        self.nb(bid).arrive(bid, count, n)

    def tile_tag(self, piece, tile):
        return (piece, tile)

    def check_read(self, key, tag, who, need_pa=None):
        p = self.parts[key]
        if p.tile != tag or not p.landed:
            raise ModelError(f"{who} reads {p.name}: holds {p.tile} landed={p.landed}, wants {tag}")
        if need_pa is not None and p.pa != need_pa:
            raise ModelError(f"{who} reads P_a {p.pa}, wants {need_pa}")

    # ---- producer ----
    def producer(self, t0):
        who = "prod.t0" if t0 else "prod.rest"
        n = 1 if t0 else 127
        pair = 0
        for pid, (tb, te, key_end) in enumerate(self.pieces):
            for it in range(0, te - tb, 2):
                parity = (pair & 1) ^ 1
                for k in range(4):
                    st, part = k & 1, (k & 1) ^ (k >> 1)
                    tile = tb + it + st
                    tag = self.tile_tag(pid, tile)
                    if (tile + 1) * TILE <= key_end:
                        e = self.empty[(st, part)]
                        yield lambda e=e: e.try_wait(parity)
                        if t0 or not self.old:
                            self.note_empty_wait(st, part, pair)
                        if not self.old:  # all 128 waits before the issue
                            yield self.bar_sync(BAR_PROD, 128, n)
                        if t0:
                            yield None  # issue
                            if k < 2:
                                self.flags[st] = tag
                            f = self.full[(st, part)]
                            if (pid, tile) in self.bad_tiles:
                                f.arrive(1)  # bad page: no copy, stale bytes (rows NaN anyway)
                                pp = self.parts[(st, part)]
                                pp.write(tag, who)
                                pp.landed = True
                            else:
                                pp = self.parts[(st, part)]
                                pp.write(tag, who)
                                f.arrive(1, PART_BLOCKS[part] * BLOCK)
                                pp.inflight = PART_BLOCKS[part]
                                for _ in range(PART_BLOCKS[part]):
                                    self.tma.append(((st, part), (st, part)))
                    elif k >= 2:
                        for q in (LO, HI):
                            e = self.empty[(st, q)]
                            yield lambda e=e: e.try_wait(parity)
                            self.note_empty_wait(st, q, pair)  # every thread writes here
                        yield None
                        # cp.async of this actor's share of both parts (zero fill past key_end)
                        for q in (LO, HI):
                            pp = self.parts[(st, q)]
                            if pp.readers:
                                raise ModelError(f"{who} cp.async into {pp.name} read by "
                                                 f"{sorted(pp.readers)}")
                            pp.tile, pp.landed, pp.pa = tag, False, None
                        self.flags[st] = tag
                        yield self.bar_sync(BAR_PROD, 128, n)
                        for q in (LO, HI):
                            self.parts[(st, q)].landed = True
                        if t0:
                            self.full[(st, LO)].arrive(1)
                            self.full[(st, HI)].arrive(1)
                if self.old:  # the first version's one barrier per pair
                    yield self.bar_sync(BAR_PROD, 128, n)
                pair += 1

    def note_empty_wait(self, st, part, pair):
        # The wait for pair `pair` is for the end of phase pair - 1: when it
        # passes, exactly `pair` phases have completed (fewer: it passed on
        # an older phase of the same parity and overwrites a stage in use;
        # more: a fill was consumed that was never issued).
        e = self.empty[(st, part)]
        if e.phase != pair:
            raise ModelError(f"{e.name}: wait for pair {pair} passed at phase {e.phase}")

    # ---- math warpgroups ----
    def math(self, wg):
        who = f"wg{wg}"
        pair = 0
        own, other = wg, 1 - wg
        first, second = (LO, HI) if wg == 0 else (HI, LO)
        for pid, (tb, te, key_end) in enumerate(self.pieces):
            yield self.bar_sync(BAR_Q, 256, 128)  # load_q_rows
            for it in range(0, te - tb, 2):
                parity = pair & 1
                tag_a, tag_b = self.tile_tag(pid, tb + it), self.tile_tag(pid, tb + it + 1)
                tag_own = tag_a if wg == 0 else tag_b
                # S over its own stage, first part then second
                f1, f2 = self.full[(own, first)], self.full[(own, second)]
                yield lambda: f1.try_wait(parity)
                self.check_read((own, first), tag_own, who)
                self.parts[(own, first)].readers.add(who)
                yield None
                yield lambda: f2.try_wait(parity)
                self.check_read((own, second), tag_own, who)
                self.parts[(own, second)].readers.add(who)
                yield None  # S done (wait<0>)
                if wg == 1:  # WG 1's S was its only read of stage 1 Lo
                    self.parts[(1, LO)].readers.discard(who)
                else:  # P_a into stage 0's rope block (WG 0 holds stage 0 Hi)
                    self.write_pa(pair, 0, who)
                if not self.chained:
                    yield from self.math_v9(wg, who, pair, tag_a, tag_b)
                elif wg == 0:
                    yield from self.math_v9b_wg0(who, pair, tag_a, tag_b)
                else:
                    yield from self.math_v9b_wg1(who, pair, tag_a, tag_b)
                pair += 1
            if self.chained:
                yield self.bar_sync(BAR_MAX, 256, 128)
            yield self.bar_sync(BAR_Q, 256, 128)  # finish_piece
        self.pairs_done = pair

    def write_pa(self, pair, version, who):
        p = self.parts[(0, HI)]
        if p.readers - {"wg0"}:
            raise ModelError(f"{who} writes P_a of pair {pair} while {sorted(p.readers)} read it")
        p.pa = (pair, version)

    def write_sp(self, pair, who):
        if self.sp_readers:
            raise ModelError(f"{who} writes P_b of pair {pair} while {sorted(self.sp_readers)} "
                             f"read sP")
        self.sp = pair

    def read_sp(self, pair, who):
        if self.sp != pair:
            raise ModelError(f"{who} reads P_b of pair {self.sp}, wants {pair}")
        self.sp_readers.add(who)

    def read_flags(self, st, tag, who):
        if self.flags[st] != tag:
            raise ModelError(f"{who} reads flags of stage {st}: {self.flags[st]}, wants {tag}")

    def math_v9(self, wg, who, pair, tag_a, tag_b):
        yield self.bar_sync(BAR_MAX, 256, 128)
        self.read_flags(0, tag_a, who)
        self.read_flags(1, tag_b, who)
        if wg == 1:
            self.write_sp(pair, who)
        yield None
        yield self.bar_sync(BAR_P, 256, 128)
        self.read_sp(pair, who)
        # P.V own then other (both issued, then wait<1>, wait<0>)
        if wg == 0:
            self.check_read((0, LO), tag_a, who)
            self.check_read((0, HI), tag_a, who, need_pa=(pair, 0))
            self.check_read((1, LO), tag_b, who)
            self.parts[(1, LO)].readers.add(who)
            yield None
            self.parts[(0, LO)].readers.discard(who)
            self.parts[(0, HI)].readers.discard(who)
            self.empty[(0, LO)].arrive(128)
            self.empty[(0, HI)].arrive(128)
            yield None
            self.parts[(1, LO)].readers.discard(who)
            self.sp_readers.discard(who)
            self.empty[(1, LO)].arrive(128)
        else:
            self.check_read((1, HI), tag_b, who)
            self.check_read((0, HI), tag_a, who, need_pa=(pair, 0))
            self.parts[(0, HI)].readers.add(who)
            yield None
            self.parts[(1, HI)].readers.discard(who)
            self.sp_readers.discard(who)
            self.empty[(1, HI)].arrive(128)
            yield None
            self.parts[(0, HI)].readers.discard(who)
            self.empty[(0, HI)].arrive(128)

    def math_v9b_wg0(self, who, pair, tag_a, tag_b):
        self.read_flags(0, tag_a, who)
        self.bar_arrive(BAR_MA, 256, 128)
        yield None
        yield self.bar_sync(BAR_OWNP + 0, 128, 128)
        self.check_read((0, LO), tag_a, who)
        self.check_read((0, HI), tag_a, who, need_pa=(pair, 0))
        yield None  # own P.V issued
        yield self.bar_sync(BAR_MB, 256, 128)
        yield None  # wait<0>
        self.parts[(0, LO)].readers.discard(who)
        self.parts[(0, HI)].readers.discard(who)
        self.empty[(0, LO)].arrive(128)
        self.empty[(0, HI)].arrive(128)
        # P_a relative to m_b, over the used P_a: stage 0 Hi must still hold tile a
        p = self.parts[(0, HI)]
        if p.tile != tag_a or not p.landed or p.pa != (pair, 0):
            raise ModelError(f"{who} rewrites P_a into {p.name} holding {p.tile} pa={p.pa}")
        self.write_pa(pair, 1, who)
        self.bar_arrive(BAR_PA, 256, 128)
        yield self.bar_sync(BAR_PB, 256, 128)
        self.check_read((1, LO), tag_b, who)
        self.parts[(1, LO)].readers.add(who)
        self.read_sp(pair, who)
        yield None
        self.parts[(1, LO)].readers.discard(who)
        self.sp_readers.discard(who)
        self.empty[(1, LO)].arrive(128)

    def math_v9b_wg1(self, who, pair, tag_a, tag_b):
        self.read_flags(1, tag_b, who)
        yield self.bar_sync(BAR_MA, 256, 128)
        self.bar_arrive(BAR_MB, 256, 128)
        yield None
        self.write_sp(pair, who)
        yield self.bar_sync(BAR_OWNP + 1, 128, 128)
        self.bar_arrive(BAR_PB, 256, 128)
        self.check_read((1, HI), tag_b, who)
        self.read_sp(pair, who)
        yield None
        self.parts[(1, HI)].readers.discard(who)
        self.sp_readers.discard(who)
        self.empty[(1, HI)].arrive(128)
        yield self.bar_sync(BAR_PA, 256, 128)
        self.check_read((0, HI), tag_a, who, need_pa=(pair, 1))
        self.parts[(0, HI)].readers.add(who)
        yield None
        self.parts[(0, HI)].readers.discard(who)
        self.empty[(0, HI)].arrive(128)

    # ---- scheduler ----
    def run(self, max_steps=200000):
        gens = {"prod.t0": self.producer(True), "prod.rest": self.producer(False),
                "wg0": self.math(0), "wg1": self.math(1)}
        waits = {}
        for name, g in gens.items():
            waits[name] = next(g, "done")
        steps = 0
        while True:
            steps += 1
            if steps > max_steps:
                raise ModelError("step limit (livelock?)")
            ready = [n for n, w in waits.items() if w != "done" and (w is None or w())]
            choices = [("actor", n) for n in ready] + [("tma", i) for i in range(len(self.tma))]
            if not choices:
                live = {n: w for n, w in waits.items() if w != "done"}
                if not live:
                    return steps
                state = ", ".join(f"{m.name} ph{m.phase} pend{m.pending} tx{m.tx}"
                                  for m in list(self.full.values()) + list(self.empty.values()))
                raise ModelError(f"DEADLOCK: blocked {sorted(live)}; {state}")
            kind, x = self.rng.choice(choices)
            if kind == "tma":
                key, fkey = self.tma.pop(x)
                pp = self.parts[key]
                pp.inflight -= 1
                if pp.inflight == 0:
                    pp.landed = True
                self.full[fkey].complete_tx(BLOCK)
            else:
                waits[x] = next(gens[x], "done")


def random_pieces(rng):
    """A worker's pieces: (tile_begin, tile_end, key_end) like the scheduler's."""
    pieces = []
    for _ in range(rng.randint(1, 4)):
        n = rng.choice([0, 1, 2, 3, 4, 5, 7, 8, rng.randint(9, 40)])
        tb = rng.randint(0, 6)
        te = tb + n
        # key_end: the piece's end, or a request ending inside its last tile
        if n > 0 and rng.random() < 0.5:
            key_end = (te - 1) * TILE + rng.randint(1, TILE)
        else:
            key_end = te * TILE
        pieces.append((tb, te, key_end))
    return pieces


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--old-producer", action="store_true")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    fixed = [
        ("1 tile (full)", [(0, 1, 64)]),
        ("1 tile (partial)", [(0, 1, 5)]),
        ("2 tiles", [(0, 2, 128)]),
        ("2 tiles, last partial", [(0, 2, 65)]),
        ("3 tiles", [(0, 3, 192)]),
        ("3 tiles, last partial", [(3, 6, 5 * 64 + 7)]),
        ("long (64 tiles)", [(0, 64, 64 * 64)]),
        ("long odd (33 tiles)", [(7, 40, 40 * 64)]),
        ("pieces 0,1,2,3,5", [(0, 0, 0), (0, 1, 1), (0, 2, 70), (0, 3, 129), (0, 5, 300)]),
    ]
    failures = 0
    total = 0
    for chained in (False, True):
        label = "v9b" if chained else "v9"
        for name, pieces in fixed:
            for r in range(max(1, a.runs // 30)):
                total += 1
                sim = Sim(pieces, chained, a.old_producer, random.Random(rng.random()), set())
                try:
                    sim.run()
                except ModelError as e:
                    failures += 1
                    if failures <= 5:
                        print(f"{label} {name} run {r}: {e}")
                    break
            else:
                print(f"{label} {name}: ok ({max(1, a.runs // 30)} interleavings)")
        for r in range(a.runs):
            total += 1
            pieces = random_pieces(rng)
            bad = {(i, t) for i, (tb, te, _) in enumerate(pieces) for t in range(tb, te)
                   if rng.random() < 0.05}
            sim = Sim(pieces, chained, a.old_producer, random.Random(rng.random()), bad)
            try:
                sim.run()
            except ModelError as e:
                failures += 1
                if failures <= 5:
                    print(f"{label} random run {r} pieces {pieces}: {e}")
        print(f"{label} random: {a.runs} worker schedules done")
    print(f"{total - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
