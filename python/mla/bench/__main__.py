"""python -m mla.bench compare [--quick] [--suite NAME ...] [--out DIR] [--peers ...]"""

import argparse
import importlib.util
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mla.bench")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare", help="our kernels beside PyTorch, FlashInfer and FlashMLA")
    c.add_argument("--quick", action="store_true",
                   help="a few shapes per suite, fewer runs (under 90 s on an H200)")
    c.add_argument("--only", action="append", default=None, metavar="TEXT",
                   help="keep only the cases whose label contains TEXT (repeatable: any of them)")
    c.add_argument("--suite", action="append", default=None,
                   help="suite(s) from PERF.md: decode-128, decode-tp, decode-varlen, "
                        "decode-long, sparse-decode, topk, indexer-decode, prefill, sparse-prefill "
                        "(default: all)")
    c.add_argument("--peers", default="auto",
                   help="comma list of mla,torch,flashinfer,flashmla; 'auto' = every importable "
                        "one (FlashInfer only without --quick: its kernels compile on first use)")
    c.add_argument("--out", default=None,
                   help="output folder (default ./bench-results/compare-<date>[-quick], under "
                        "the current directory)")
    c.add_argument("--runs", type=int, default=None, help="timed runs per kernel (median)")
    c.add_argument("--plots", choices=("per-suite", "combined", "both"), default="both",
                   help="throughput-<suite>.png per suite, one throughput.png with every "
                        "suite, or both (default)")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("torch") is None:
        print("python -m mla.bench compare needs PyTorch with CUDA, which is not installed for "
              f"{sys.executable} (pip install torch); mla itself does not", file=sys.stderr)
        return 2
    from .compare import run_compare

    return run_compare(args)


if __name__ == "__main__":
    sys.exit(main())
