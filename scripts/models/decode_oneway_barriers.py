#!/usr/bin/env python3
"""Host model of the decode kernel's one-way math form
(src/cuda/decode/decode_kernel.cuh, kOneWay), run before its first GPU run
(ctest: model.decode_oneway_barriers, label cpu).

One persistent CTA running a worker's pieces of 0, 1, 2, ... tiles. Actors:
the producer warpgroup (one actor: it waits on `empty`, writes a stage and
arrives on `full`), warpgroup 0's four warps (per piece: q_ready; per tile: S for the
tile's 64 keys, the softmax, p_free, P and the rows' rescale factors into
shared memory, p_ready, its own P.V from registers, `empty`; at the piece's
end q_free, fin_free, the row totals, fin_ready) and warpgroup 1's four warps
(the first piece's Q, q_ready; per tile: full, p_ready, their rows' factors,
P.V from sP, p_free, `empty`; at the piece's end: q_free, the next piece's Q,
q_ready, fin_ready, the row totals, fin_free), each running the kernel's
sequence of waits, arrivals, writes and wgmma issues / completions,
interleaved at random. wgmma products are asynchronous: issued, then
completed some steps later (the warp waits for completion where the kernel
does: wgmma.wait_group 0).

mbarriers as PTX defines them: an arrival count and a phase; try_wait.parity(p)
returns once the phase of parity p completed (a fresh barrier is in phase 0,
so parity 1 passes at once). Counts are in warps here (128 threads = 4
warps): full 1 (the producer), empty 8 (every math warp), p_ready, q_free,
fin_ready 4 (warpgroup 0), p_free, q_ready, fin_free 4 (warpgroup 1). Named
barrier kBarQ1 (warpgroup 1's 4 warps, bar.sync) inside its Q load (between
the copies and the in-place f16 pass, and at the end).

Shared regions, each per 16-row slice where a warp owns rows (sP and the
factors: warp w of a warpgroup owns rows 16w..16w+15):
  stage[s]: producer writes (tile tag); warpgroup 0's S and P.V and warpgroup
    1's P.V read it (wgmma, from issue to completion);
  sP[w], alpha[w]: warpgroup 0's warp w writes (tile tag); warpgroup 1's P.V
    reads all of sP (every slice), its warp w reads alpha[w];
  fin[w] (row sums, maxima, bad flag): warpgroup 0's warp w writes at a
    piece's end, warpgroup 1's warp w reads (fin_ready / fin_free);
  sQ[w] (Q and its row scales): warpgroup 1's warp w writes (first piece at
    the start, piece k + 1 at the end of piece k), warpgroup 0's S and
    softmax read all of it (q_ready / q_free).
Every read checks the tag it expects (at issue and at completion for wgmma),
and a racecheck view with vector clocks (mbarrier arrive releases, a wait that
sees the phase complete acquires; bar.sync joins all) checks that every write
comes after every earlier conflicting access of another warp, and every read
after the write it reads. A deadlock (no actor can move) fails the model.

Variants that must fail (so the checks can fail): "no_p_free" (warpgroup 0
writes the next P without waiting for p_free), "early_empty" (warpgroup 1
releases the stage before its P.V completed), "early_p_free" (warpgroup 1
signals p_free at its P.V's issue), "no_q_free" (warpgroup 1 loads the next
Q without waiting for q_free), "no_fin_free" (warpgroup 0 writes the row
totals without waiting for fin_free).
"""
import random
import sys

MATH = 8  # math warps 0-3: warpgroup 0, 4-7: warpgroup 1
PROD = 8  # the producer's clock index
N = 9
STAGES = 2


class Fail(Exception):
    pass


class MBar:
    def __init__(self, count):
        self.count, self.pending, self.phase = count, count, 0
        self.acc = [0] * N
        self.done = {}

    def arrive(self, clock):
        self.pending -= 1
        assert self.pending >= 0
        self.acc = [max(a, b) for a, b in zip(self.acc, clock)]
        if self.pending == 0:
            self.done[self.phase] = self.acc
            self.phase += 1
            self.pending, self.acc = self.count, [0] * N

    def passed(self, parity):
        return (self.phase & 1) != parity

    def acquired(self):
        return self.done.get(self.phase - 1, [0] * N)


class Region:
    """A shared slice: its tag, last write (actor, time) and reads since."""

    def __init__(self, name):
        self.name, self.tag, self.write, self.reads = name, None, None, []

    def do_write(self, actor, tag):
        c = actor.clock
        for (r, t) in self.reads + ([self.write] if self.write else []):
            if r != actor.idx and c[r] < t:
                raise Fail(f"{actor.name} writes {self.name} ({tag}) racing actor {r}")
        actor.tick()
        self.tag, self.write, self.reads = tag, (actor.idx, actor.clock[actor.idx]), []

    def do_read(self, actor, tag):
        if self.tag != tag:
            raise Fail(f"{actor.name} reads {self.name}: tag {self.tag}, expected {tag}")
        if self.write and self.write[0] != actor.idx and actor.clock[self.write[0]] < self.write[1]:
            raise Fail(f"{actor.name} reads {self.name} ({tag}) racing its write")
        actor.tick()
        self.reads.append((actor.idx, actor.clock[actor.idx]))


class Actor:
    def __init__(self, idx, name):
        self.idx, self.name, self.clock = idx, name, [0] * N

    def tick(self):
        self.clock[self.idx] += 1

    def join(self, other):
        self.clock = [max(a, b) for a, b in zip(self.clock, other)]


def run(pieces, variant, rng):
    full = [MBar(1) for _ in range(STAGES)]
    empty = [MBar(MATH) for _ in range(STAGES)]
    p_ready, p_free = MBar(4), MBar(4)
    q_ready, q_free, fin_ready, fin_free = MBar(4), MBar(4), MBar(4), MBar(4)
    stage = [Region(f"stage{s}") for s in range(STAGES)]
    sP = [Region(f"sP[{w}]") for w in range(4)]
    alpha = [Region(f"alpha[{w}]") for w in range(4)]
    fin = [Region(f"fin[{w}]") for w in range(4)]
    sQ = [Region(f"sQ[{w}]") for w in range(4)]
    bar1 = {"gen": 0, "waiting": 0, "acc": [0] * N, "done": {}}
    tiles = [(pi, t) for pi, n in enumerate(pieces) for t in range(n)]

    def wait_mbar(b, parity, actor):
        while not b.passed(parity):
            yield "wait"
        actor.join(b.acquired())

    def bar_sync(actor):  # kBarQ1 over warpgroup 1's 4 warps
        gen = bar1["gen"]
        bar1["acc"] = [max(a, b) for a, b in zip(bar1["acc"], actor.clock)]
        bar1["waiting"] += 1
        if bar1["waiting"] == 4:
            bar1["done"][gen] = bar1["acc"]
            bar1["gen"] += 1
            bar1["waiting"], bar1["acc"] = 0, [0] * N
        while bar1["gen"] == gen:
            yield "wait"
        actor.join(bar1["done"][gen])

    def load_q(a, w, pi):
        """load_q_rows by warpgroup 1: its copies, kBarQ1, the f16 pass over
        rows whose chunks other warps copied, kBarQ1."""
        sQ[w].do_write(a, ("raw", pi))
        yield from bar_sync(a)
        sQ[(w + 1) % 4].do_read(a, ("raw", pi))
        yield from bar_sync(a)  # (in the kernel: the pass writes rows it read; modelled
        sQ[w].do_write(a, pi)  # as a second step after everyone's read)
        yield from bar_sync(a)

    def wgmma(actor, reads):
        """Issue (read tags checked), some steps, completion (checked again)."""
        for r, tag in reads:
            r.do_read(actor, tag)
        for _ in range(rng.randint(0, 3)):
            yield
        for r, tag in reads:
            r.do_read(actor, tag)

    def producer(a):
        for cnt, tile in enumerate(tiles):
            st = cnt % STAGES
            yield from wait_mbar(empty[st], ((cnt // STAGES) & 1) ^ 1, a)
            stage[st].do_write(a, tile)
            yield
            full[st].arrive(a.clock)

    def wg0_warp(a, w):
        cnt = 0
        for pi, n in enumerate(pieces):
            yield from wait_mbar(q_ready, pi & 1, a)
            for t in range(n):
                tile, st = (pi, t), cnt % STAGES
                yield from wait_mbar(full[st], (cnt // STAGES) & 1, a)
                yield from wgmma(a, [(stage[st], tile)] + [(q, pi) for q in sQ])  # S
                for q in sQ:  # the softmax reads the rows' Q scales
                    q.do_read(a, pi)
                if variant != "no_p_free":
                    yield from wait_mbar(p_free, (cnt & 1) ^ 1, a)
                sP[w].do_write(a, tile)
                alpha[w].do_write(a, tile)
                p_ready.arrive(a.clock)
                yield from wgmma(a, [(stage[st], tile)])  # P.V, P from registers
                empty[st].arrive(a.clock)
                cnt += 1
            q_free.arrive(a.clock)
            if variant != "no_fin_free":
                yield from wait_mbar(fin_free, (pi & 1) ^ 1, a)
            fin[w].do_write(a, pi)
            fin_ready.arrive(a.clock)

    def wg1_warp(a, w):
        cnt = 0
        for pi, n in enumerate(pieces):
            if pi == 0:
                yield from load_q(a, w, pi)
                q_ready.arrive(a.clock)
            for t in range(n):
                tile, st = (pi, t), cnt % STAGES
                yield from wait_mbar(full[st], (cnt // STAGES) & 1, a)
                yield from wait_mbar(p_ready, cnt & 1, a)
                alpha[w].do_read(a, tile)
                reads = [(stage[st], tile)] + [(p, tile) for p in sP]
                for r, tag in reads:  # issue
                    r.do_read(a, tag)
                if variant == "early_p_free":
                    p_free.arrive(a.clock)
                if variant == "early_empty":
                    empty[st].arrive(a.clock)
                for _ in range(rng.randint(0, 3)):
                    yield
                for r, tag in reads:  # completion
                    r.do_read(a, tag)
                if variant != "early_p_free":
                    p_free.arrive(a.clock)
                if variant != "early_empty":
                    empty[st].arrive(a.clock)
                cnt += 1
            if pi + 1 < len(pieces):
                if variant != "no_q_free":
                    yield from wait_mbar(q_free, pi & 1, a)
                yield from load_q(a, w, pi + 1)
                q_ready.arrive(a.clock)
            yield from wait_mbar(fin_ready, pi & 1, a)
            fin[w].do_read(a, pi)
            fin_free.arrive(a.clock)

    actors = [Actor(PROD, "producer")]
    gens = [producer(actors[0])]
    for w in range(4):
        actors.append(Actor(w, f"wg0.warp{w}"))
        gens.append(wg0_warp(actors[-1], w))
    for w in range(4):
        actors.append(Actor(4 + w, f"wg1.warp{w}"))
        gens.append(wg1_warp(actors[-1], w))
    live = list(range(len(gens)))
    stuck = 0  # scheduling steps since an actor last did anything but poll a barrier
    while live:
        i = rng.choice(live)
        try:
            step = next(gens[i])
        except StopIteration:
            live.remove(i)
            stuck = 0
            continue
        stuck = stuck + 1 if step == "wait" else 0
        if stuck > 20000:
            raise Fail("deadlock")


def main():
    rng = random.Random(15)
    shapes = [[1], [2], [3], [0, 1], [1, 0, 2], [5, 1, 4], [0], [2, 2, 2, 3], [7]]
    for variant, must_pass in [("kernel", True), ("no_p_free", False), ("early_empty", False),
                               ("early_p_free", False), ("no_q_free", False),
                               ("no_fin_free", False)]:
        fails = 0
        for trial in range(300):
            pieces = rng.choice(shapes) if trial < 100 else [rng.randint(0, 4) for _ in
                                                               range(rng.randint(1, 4))]
            try:
                run(pieces, variant, rng)
            except Fail as e:
                fails += 1
                if must_pass:
                    print(f"FAIL {variant} pieces {pieces}: {e}")
                    return 1
        print(f"{variant}: {fails} of 300 schedules failed")
        if not must_pass and fails == 0:
            print(f"FAIL: variant {variant} should fail (the checks cannot fail)")
            return 1
    print("decode one-way barrier model: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
