"""python -m mla.bench compare [--quick] [--suite NAME ...] [--out DIR] [--peers ...]
python -m mla.bench host-overhead [--device cuda|cpu] [--out FILE.json]
python -m mla.bench fp8-accuracy [--out FILE.json]"""

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
                   help="suite(s) from docs/benchmarks.md: decode-128, decode-tp, decode-varlen, "
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
    h = sub.add_parser("host-overhead",
                       help="host cost of one eager decode call, ours beside FlashMLA's")
    h.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: CPU tensors of an empty batch (binding cost only, no GPU needed)")
    h.add_argument("--batch", type=int, default=1, help="batch of the host measurement")
    h.add_argument("--heads", type=int, default=128)
    h.add_argument("--length", type=int, default=4096)
    h.add_argument("--page", type=int, default=64)
    h.add_argument("--calls", type=int, default=50, help="calls per timed batch")
    h.add_argument("--batches", type=int, default=40, help="timed batches (median)")
    h.add_argument("--e2e-batches", type=int, nargs="*", default=[1, 2, 4, 8],
                   help="batch sizes of the end-to-end (host + kernel) loop")
    h.add_argument("--e2e-calls", type=int, default=200)
    h.add_argument("--no-flashmla", action="store_true")
    h.add_argument("--out", default=None, help="JSON results file")
    a = sub.add_parser("fp8-accuracy",
                       help="relative L2 of decode from fp8 caches against the bf16 cache of the "
                            "same keys and an fp64 decode, ours beside FlashMLA's sparse fp8")
    a.add_argument("--out", default=None, help="JSON results file")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("torch") is None:
        print(f"python -m mla.bench {args.cmd} needs PyTorch, which is not installed for "
              f"{sys.executable} (pip install torch); mla itself does not", file=sys.stderr)
        return 2
    if args.cmd == "host-overhead":
        from .host_overhead import run_host_overhead

        return run_host_overhead(args)
    if args.cmd == "fp8-accuracy":
        from .fp8_accuracy import run_fp8_accuracy

        return run_fp8_accuracy(args)
    from .compare import run_compare

    return run_compare(args)


if __name__ == "__main__":
    sys.exit(main())
