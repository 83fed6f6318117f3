#!/usr/bin/env python3
"""Host model of the narrow decode kernel's barrier protocol
(src/cuda/decode/decode_narrow.cuh with decode_kernel.cuh's fp8 producer), run
before its first GPU run (ctest: model.decode_narrow_barriers, label cpu).

One persistent CTA running a worker's pieces of 0, 1, 2, ... 64-key tiles. The
worker's tiles are numbered k = 0, 1, 2, ... across pieces; tile k goes to
stage k % 2 and to math warpgroup k % 2 (so each warpgroup always reads the same
stage, and which one takes a piece's first tile alternates with the parity of
the tiles before it).
Actors: the producer (one actor: its 128 threads wait and arrive together) and
the 8 math warps (0-3: warpgroup 0, 4-7: warpgroup 1), each running the
kernel's sequence of waits, arrivals, writes and reads, interleaved at random.
mbarriers: arrival count and phase parity as PTX defines them (try_wait.parity
(p) returns once the phase of parity p completed; a fresh barrier is in phase
0, so parity 1 passes at once). full[s]: 1 arrival (the producer), empty[s]:
the 4 warps of warpgroup s (the kernel: 128 threads), wg_bar[wg]: the 4 warps
of warpgroup wg, each arriving then waiting for the phase of its meeting
(narrow_wg_sync: a warpgroup's two meetings per tile). Named barriers:
bar.sync counts and waits until the generation is complete: kBarQ, kBarMax,
kBarP (8 warps; the piece end uses one of each in turn).

racecheck rule (what the tool follows, from its runs on this code base: the
seesaw decode and the sparse prefill clean, the narrow kernel with a named
barrier per warpgroup, kBarWg + wg, 41-61 hazards at the piece end's kBarQ /
kBarMax, the sparse prefill with a 128-thread kBarW1 beside 256-thread
hand-overs 67): every math warp must arrive at the same sequence of named
barrier ids. Per-warpgroup named barriers break it as soon as a warpgroup runs
a tile (the two warpgroups' ids differ, and with an odd tile count so do
their numbers of arrivals), and the tool then reports accesses that bar.sync
does order. The model records each
math warp's named-barrier sequence and fails on a difference; wg_sync="named"
runs the old protocol, which the check must catch.
Shared slots carry tags (which tile / piece wrote them); a read checks the tag
it expects at its start and at its end, and a write must not overlap another
actor's access of the slot (a read-write or write-write overlap, an overwrite
while a read runs, a read before the write, or a deadlock fails the model).
Vector clocks (racecheck's view): every access must come after every
conflicting access of another actor through a chain of mbarrier arrive -> wait
and bar.sync edges.

Regions (decode_narrow.cuh):
  stage[s]       producer writes tile k, warpgroup s's 4 warps read it (S^T,
                 P.V) between full[s] and empty[s]
  Q              rows loaded per piece by all 8 warps (load_q_rows: writes,
                 bar kBarQ, in-place f16 conversion, bar kBarQ); read by every
                 S^T; in the piece's end its bytes [wg half][warp] are the
                 O^T scratch: written by warp (wg, wi) after the end's kBarQ,
                 read by warp (1 - wg, wi) after its kBarMax, before its kBarP
                 (which keeps the next piece's load after the reads)
  max[wg][par][wi]  written by warp wi of wg for its tile (parity = its tile
                 count), read by the 4 warps after the wg_bar meeting
  P[wg][wi]      written after that barrier, read by the warpgroup's P.V after
                 the second wg_bar meeting of the tile
  sum[wg][wi]    the piece's end (row sums, maxima, `bad`): written before its
                 kBarQ, read after it
"""
import random
import sys

WARPS = 8
PRODUCER = 8
ACTORS = 9


class VC:
    @staticmethod
    def join(a, b):
        return [max(x, y) for x, y in zip(a, b)]


class MBar:
    def __init__(self, count):
        self.count = count
        self.pending = 0
        self.phase = 0  # completed phases
        self.vc_acc = [0] * ACTORS
        self.vc_done = {}  # phase index -> vc released into it

    def arrive(self, vc):
        self.vc_acc = VC.join(self.vc_acc, vc)
        self.pending += 1
        assert self.pending <= self.count, "mbarrier: more arrivals than its count"
        if self.pending == self.count:
            self.vc_done[self.phase] = self.vc_acc
            self.phase += 1
            self.pending = 0
            self.vc_acc = [0] * ACTORS

    def passes(self, parity):
        return (self.phase & 1) != parity

    def acquired(self):
        return self.vc_done.get(self.phase - 1, [0] * ACTORS)


class NamedBar:
    def __init__(self, count):
        self.count = count
        self.gen = 0
        self.arrived = []
        self.vc_acc = [0] * ACTORS
        self.vc_gen = {}

    def arrive(self, actor, vc):
        self.arrived.append(actor)
        self.vc_acc = VC.join(self.vc_acc, vc)
        g = self.gen
        if len(self.arrived) == self.count:
            self.vc_gen[g] = self.vc_acc
            self.gen += 1
            self.arrived = []
            self.vc_acc = [0] * ACTORS
        return g


class Model:
    def __init__(self, rng, tiles_per_piece, end_barrier=True, wg_sync="mbar"):
        self.rng = rng
        self.end_barrier = end_barrier
        self.wg_sync = wg_sync
        self.pieces = tiles_per_piece
        self.full = [MBar(1), MBar(1)]
        self.empty = [MBar(4), MBar(4)]
        self.wg_bar = [MBar(4), MBar(4)]  # narrow_wg_sync
        self.bar_wg = [NamedBar(4), NamedBar(4)]  # the old kBarWg + wg (wg_sync="named")
        self.named_seq = [[] for _ in range(WARPS)]  # named barriers each math warp arrived at
        self.bar_q = NamedBar(8)  # kBarQ: load_q_rows' two, the piece end's first
        self.bar_max = NamedBar(8)  # kBarMax: the piece end's second
        self.bar_p = NamedBar(8)  # kBarP: the piece end's third
        self.vc = [[0] * ACTORS for _ in range(ACTORS)]
        self.tag = {}  # slot -> tag
        self.active = {}  # slot -> list of (actor, kind)
        self.last = {}  # slot -> list of (actor, kind, clock of actor at access)
        self.outputs = []

    # ---- accesses ----
    def tick(self, a):
        self.vc[a][a] += 1

    def check_order(self, a, slot, kind):
        for (b, bkind, clock) in self.last.get(slot, []):
            if b != a and (kind == "w" or bkind == "w"):
                assert self.vc[a][b] >= clock, (
                    f"race on {slot}: actor {a} {kind} unordered after actor {b} {bkind}")

    def begin(self, a, slot, kind, expect=None):
        self.tick(a)
        for (b, bkind) in self.active.get(slot, []):
            if b != a and (kind == "w" or bkind == "w"):
                assert False, f"overlap on {slot}: actor {a} {kind} while actor {b} {bkind}"
        self.check_order(a, slot, kind)
        if expect is not None:
            assert self.tag.get(slot) == expect, (
                f"actor {a} reads {slot}: tag {self.tag.get(slot)}, expected {expect}")
        self.active.setdefault(slot, []).append((a, kind))

    def end(self, a, slot, kind, tag=None, expect=None):
        self.active[slot].remove((a, kind))
        if expect is not None:
            assert self.tag.get(slot) == expect, (
                f"actor {a} read {slot}: tag {self.tag.get(slot)} at the end, expected {expect}")
        if kind == "w":
            self.tag[slot] = tag
            self.last[slot] = [(a, "w", self.vc[a][a])]
        else:
            self.last.setdefault(slot, []).append((a, "r", self.vc[a][a]))

    # ---- synchronisation (generators yield until they can go on) ----
    def mbar_wait(self, a, bar, parity):
        while not bar.passes(parity):
            yield
        self.vc[a] = VC.join(self.vc[a], bar.acquired())

    def mbar_arrive(self, a, bar):
        self.tick(a)
        bar.arrive(self.vc[a])

    def bar_sync(self, a, bar):
        self.tick(a)
        self.named_seq[a].append(id(bar))
        g = bar.arrive(a, self.vc[a])
        while bar.gen <= g:
            yield
        self.vc[a] = VC.join(self.vc[a], bar.vc_gen[g])

    # ---- actors ----
    def producer(self):
        a = PRODUCER
        k = 0
        for n in self.pieces:
            for _ in range(n):
                s = k % 2
                yield from self.mbar_wait(a, self.empty[s], ((k // 2) & 1) ^ 1)
                self.begin(a, ("stage", s), "w")
                yield
                self.end(a, ("stage", s), "w", tag=k)
                self.mbar_arrive(a, self.full[s])
                yield
                k += 1

    # Q's bytes as (part, loader): part (wg, wi) is the scratch of warp wi of
    # warpgroup wg at a piece's end, "rest" the bytes no scratch uses; loader x
    # is the warp whose cp.async / conversion wrote them in load_q_rows (the
    # warps write disjoint bytes of every part).
    PARTS = [(h, w) for h in range(2) for w in range(4)] + ["rest"]

    def q_slots(self, parts=None, loaders=range(WARPS)):
        return [("q", part, x) for part in (parts or self.PARTS) for x in loaders]

    def meet(self, a, wg, n):
        """The warpgroup's n-th meeting in its tiles."""
        if self.wg_sync == "named":
            yield from self.bar_sync(a, self.bar_wg[wg])
        else:
            self.mbar_arrive(a, self.wg_bar[wg])
            yield from self.mbar_wait(a, self.wg_bar[wg], n & 1)

    def math(self, warp):
        a = warp
        wg, wi = warp // 4, warp % 4
        cnt = 0
        meets = 0
        for piece, n in enumerate(self.pieces):
            # load_q_rows: every warp writes parts of all of Q; two kBarQ.
            for slot in self.q_slots(loaders=[a]):
                self.begin(a, slot, "w")
            yield
            for slot in self.q_slots(loaders=[a]):
                self.end(a, slot, "w", tag=("Q", piece))
            yield from self.bar_sync(a, self.bar_q)
            yield from self.bar_sync(a, self.bar_q)
            for it in range(wg ^ (cnt & 1), n, 2):
                k = cnt + it
                s = k % 2
                assert s == wg
                yield from self.mbar_wait(a, self.full[s], (k // 2) & 1)
                self.begin(a, ("stage", s), "r", expect=k)
                for slot in self.q_slots():
                    self.begin(a, slot, "r", expect=("Q", piece))
                yield  # S^T wgmma in flight
                for slot in self.q_slots():
                    self.end(a, slot, "r", expect=("Q", piece))
                par = (k // 2) & 1
                self.begin(a, ("max", wg, par, wi), "w")
                yield
                self.end(a, ("max", wg, par, wi), "w", tag=k)
                yield from self.meet(a, wg, meets)
                meets += 1
                for w in range(4):
                    self.begin(a, ("max", wg, par, w), "r", expect=k)
                yield
                for w in range(4):
                    self.end(a, ("max", wg, par, w), "r", expect=k)
                self.begin(a, ("p", wg, wi), "w")
                yield
                self.end(a, ("p", wg, wi), "w", tag=k)
                yield from self.meet(a, wg, meets)
                meets += 1
                for w in range(4):
                    self.begin(a, ("p", wg, w), "r", expect=k)
                yield  # P.V wgmma in flight (reads the stage and P)
                for w in range(4):
                    self.end(a, ("p", wg, w), "r", expect=k)
                self.end(a, ("stage", s), "r", expect=k)
                self.mbar_arrive(a, self.empty[s])
                yield
            cnt += n
            # narrow_finish
            self.begin(a, ("sum", wg, wi), "w")
            yield
            self.end(a, ("sum", wg, wi), "w", tag=piece)
            yield from self.bar_sync(a, self.bar_q)
            for w in range(8):
                self.begin(a, ("sum", w // 4, w % 4), "r", expect=piece)
            yield
            for w in range(8):
                self.end(a, ("sum", w // 4, w % 4), "r", expect=piece)
            mine, theirs = self.q_slots([(wg, wi)]), self.q_slots([(1 - wg, wi)])
            for slot in mine:
                self.begin(a, slot, "w")
            yield
            for slot in mine:
                self.end(a, slot, "w", tag=("S", piece))
            yield from self.bar_sync(a, self.bar_max)
            for slot in theirs:
                self.begin(a, slot, "r", expect=("S", piece))
            yield
            for slot in theirs:
                self.end(a, slot, "r", expect=("S", piece))
            self.outputs.append((piece, warp))
            if self.end_barrier:
                yield from self.bar_sync(a, self.bar_p)

    def run(self):
        actors = {PRODUCER: self.producer()}
        for w in range(WARPS):
            actors[w] = self.math(w)
        live = dict(actors)
        stuck = 0
        while live:
            a = self.rng.choice(list(live))
            before = (self.snapshot())
            try:
                next(live[a])
            except StopIteration:
                del live[a]
                stuck = 0
                continue
            stuck = stuck + 1 if self.snapshot() == before else 0
            assert stuck < 20000, f"deadlock: {sorted(live)} blocked"
        assert len(self.outputs) == WARPS * len(self.pieces)
        for w in range(1, WARPS):
            assert self.named_seq[w] == self.named_seq[0], (
                f"math warps 0 and {w} arrive at different named-barrier sequences "
                f"({len(self.named_seq[0])} vs {len(self.named_seq[w])} arrivals): "
                "racecheck stops following the shared barriers")

    def snapshot(self):
        return (tuple(b.phase for b in self.full + self.empty + self.wg_bar),
                tuple((b.gen, len(b.arrived))
                      for b in self.bar_wg + [self.bar_q, self.bar_max, self.bar_p]),
                tuple(tuple(v) for v in self.vc))


def main():
    rng = random.Random(20261206)
    runs = 0
    for trial in range(1500):
        n_pieces = rng.randint(1, 5)
        pieces = [rng.choice([0, 1, 1, 2, 3, 4, 5, 7]) for _ in range(n_pieces)]
        Model(rng, pieces).run()
        runs += 1
    # The checks can fail: without the third kBarQ of a piece's end, the next
    # piece's Q load may overwrite the scratch while the other warpgroup reads it.
    caught = 0
    for trial in range(300):
        try:
            Model(rng, [rng.randint(0, 4) for _ in range(3)], end_barrier=False).run()
        except AssertionError:
            caught += 1
    assert caught > 0, "the model did not catch the missing end-of-piece barrier"
    # The old protocol (a named barrier per warpgroup in the tiles) passes the
    # PTX-level checks but breaks the racecheck rule as soon as a tile runs.
    named_caught = 0
    for trial in range(300):
        pieces = [rng.randint(0, 5) for _ in range(rng.randint(1, 3))]
        try:
            Model(rng, pieces, wg_sync="named").run()
            assert sum(pieces) == 0, f"{pieces}: per-warpgroup named barriers not caught"
        except AssertionError as e:
            assert "named-barrier sequences" in str(e), str(e)
            named_caught += 1
    assert named_caught > 0, "the model did not catch the per-warpgroup named barriers"
    print(f"decode_narrow_barriers: {runs} random schedules passed; "
          f"without the last end-of-piece barrier {caught} of 300 failed; "
          f"with per-warpgroup named barriers {named_caught} of 300 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
