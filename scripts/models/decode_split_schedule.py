"""Host model of the decode split schedule (src/cuda/decode/split/split_schedule.cu,
balanced mode) for a few shapes: per-worker tiles and pieces, the critical path,
and the combine's work, with a rough time from per-tile and per-piece costs.

    python3 scripts/models/decode_split_schedule.py [--sms 132]

Cost units as the scheduler's: a piece costs its 64-key tiles plus
kPieceOverheadTiles. The time model (t_tile, t_piece) is a fit, not a
measurement of this build; it ranks schedules, it does not predict to the us.
"""
from __future__ import annotations

import argparse
import math

TILE = 64
C = 2  # kPieceOverheadTiles (split_params.hpp)


def schedule(lengths, P):
    """Balanced mode: [(worker, b, tile_begin, tile_end)] and per-request piece count."""
    tiles = [math.ceil(n / TILE) for n in lengths]
    pos, total = [], 0
    for t in tiles:
        pos.append(total)
        total += t + C
    per = math.ceil(total / P) if total > P else 1
    pieces, npieces = [], []
    for b, t in enumerate(tiles):
        p0 = pos[b]
        if t == 0:
            pieces.append((p0 // per, b, 0, 0))
            npieces.append(1)
            continue
        n = (p0 + t + C - 1) // per - p0 // per + 1
        npieces.append(n)
        for i in range(n):
            w = p0 // per + i
            lo, hi = max(p0, w * per), min(p0 + t + C, (w + 1) * per)
            tb = min(max(lo - p0 - C, 0), t)
            te = min(max(hi - p0 - C, 0), t)
            pieces.append((w, b, tb, te))
    return pieces, npieces, per, total


def report(name, lengths, h_q, s_q, sms, t_tile_us, t_piece_us, t_combine_piece_us):
    rows = h_q * s_q
    row_blocks = math.ceil(rows / 64)
    P = max(1, sms // row_blocks)
    pieces, npieces, per, total = schedule(lengths, P)
    work = {}
    for w, b, tb, te in pieces:
        t, n = work.get(w, (0, 0))
        work[w] = (t + te - tb, n + 1)
    busy = len(work)
    crit_w = max(work, key=lambda w: work[w][0] * t_tile_us + work[w][1] * t_piece_us)
    ct, cn = work[crit_w]
    all_tiles = sum(math.ceil(n / TILE) for n in lengths)
    ideal = all_tiles / P
    t_main = ct * t_tile_us + cn * t_piece_us
    split = [n for n in npieces if n > 1]
    t_comb = (max(split) * t_combine_piece_us) if split else 0.0
    print(f"{name}: h_q {h_q} s_q {s_q} -> {row_blocks} row block(s), P = {P} workers, "
          f"{len(pieces)} pieces, span {per} units (total {total})")
    print(f"  tiles per request {[math.ceil(n / TILE) for n in lengths]}, pieces per request "
          f"{npieces}")
    print(f"  workers busy {busy}/{P}; critical worker {crit_w}: {ct} tiles in {cn} piece(s); "
          f"ideal {ideal:.1f} tiles/worker")
    hist = {}
    for w in range(P):
        t, n = work.get(w, (0, 0))
        hist[(t, n)] = hist.get((t, n), 0) + 1
    print("  (tiles, pieces): workers  " +
          ", ".join(f"{k}: {v}" for k, v in sorted(hist.items(), reverse=True)))
    print(f"  model: main {t_main:.1f} us (critical path), combine ~{t_comb:.1f} us "
          f"(largest split: {max(split) if split else 0} partials per row)")
    return t_main, t_comb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sms", type=int, default=132)
    # 64 query rows x 64 keys per tile at ~500 TF/s over 132 SMs (b128 h128 L16K: 1.16 ms
    # for 496 tiles per CTA) -> ~2.3 us; a piece's fixed cost (Q load, pipeline fill,
    # partial write) ~2 tiles; combine per partial per row ~0.05 us (one warp of the
    # row's CTA reads 2 KB per partial).
    ap.add_argument("--t-tile", type=float, default=2.34)
    ap.add_argument("--t-piece", type=float, default=4.7)
    ap.add_argument("--t-combine-piece", type=float, default=0.05)
    a = ap.parse_args()
    for name, lens, h, s in [
        ("varlen B4", [4641, 45118, 1730, 1696], 16, 4),
        ("b1 L128K", [131072], 128, 1),
        ("b64 h128 L4K", [4096] * 64, 128, 1),
        ("b128 h128 L16K", [16384] * 128, 128, 1),
    ]:
        report(name, lens, h, s, a.sms, a.t_tile, a.t_piece, a.t_combine_piece)


if __name__ == "__main__":
    main()
