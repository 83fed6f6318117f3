"""python -m mla check [--seed N]: the self check of `mla check` (mla.self_check) from the
Python package, for an installed wheel, which has no CLI. Exit codes as `mla check`: 0 every
check passed, 1 a check failed, 77 no CUDA GPU (or a build without CUDA kernels)."""

from __future__ import annotations

import argparse
import sys


def _seed(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if not 0 <= v < 1 << 64:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer in [0, 2**64)")
    return v


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m mla", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="run each kernel family on the local GPU against the CPU "
                       "reference (small shapes) and say what passed; exit 0 all passed, "
                       "1 a failure, 77 no CUDA GPU")
    c.add_argument("--seed", type=_seed, default=1, help="seed of the random inputs (default 1)")
    args = p.parse_args(argv)

    from . import errors
    from .selfcheck import self_check

    try:
        r = self_check(args.seed)
    except errors.MlaError as e:  # no libmla.so, or one without mla_self_check
        print(f"python -m mla check: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(r.text)
    return r.status


if __name__ == "__main__":
    sys.exit(main())
