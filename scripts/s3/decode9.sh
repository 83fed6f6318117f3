#!/usr/bin/env bash
# Device script of helper decode9 (issue #3, decode v9: the math warpgroups take
# alternate 64-key tiles for S; docs/perf-log.md v9, /work/notes/decode9.md).
# Run from the repo root:  OUT=<dir> bash scripts/s3/decode9.sh <carried-build-dir>
# Steps (timeouts sum to ~145 s; expected ~90 s on a warm H200):
#   1. WgmmaGpu.* + DecodeGpu.* with MLA_DECODE_KERNEL=v9 forced (the TMA path
#      runs at page 64: GridOfEdges, SanitizerSmallTma, SplitPiecesAtH128, ...),
#      then the TMA-path subset with v9b forced, then two tests on the default.
#   2. compute-sanitizer racecheck (v9, v9b) and memcheck (v9) on
#      DecodeGpu.SanitizerSmallTma.
#   3. v9stamps / v9bstamps: per-phase cycles per pair of CTA 0.0.
#   4. mla bench decode, v8 / v9 / v9b alternating twice, --reps 10, JSON per run.
#   5. summary table (last): per shape, us and TFLOP/s (or GB/s) of every run.
set -u
B=${1:-build}
OUT=${OUT:-/tmp/mla_out}
D="$OUT/decode9"
mkdir -p "$D"
export LD_LIBRARY_PATH="$PWD/$B:$PWD/$B/rt:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
T0=$(date +%s)
step() { echo "=== $* (t+$(($(date +%s) - T0))s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader

step "tests v9 (all decode + wgmma GPU tests)"
MLA_DECODE_KERNEL=v9 timeout 26 "$B/mla_tests_gpu" --gtest_filter='DecodeGpu.*:WgmmaGpu.*' \
  >"$D/tests_v9.log" 2>&1
echo "rc=$?"
grep -E "FAILED|Failure|tests ran|PASSED" "$D/tests_v9.log" | tail -6
grep -E "h128 .*page64 bf16" "$D/tests_v9.log" | head -3

step "tests v9b (the TMA-path tests)"
MLA_DECODE_KERNEL=v9b timeout 14 "$B/mla_tests_gpu" --gtest_filter='DecodeGpu.GridOfEdges:DecodeGpu.SplitPiecesAtH128:DecodeGpu.SanitizerSmallTma:DecodeGpu.LongRequestsSplitAcrossWorkers:DecodeGpu.RepeatedCallsAreBitwiseIdentical:DecodeGpu.BadDeviceValuesGiveNanRowsNotCrashes:DecodeGpu.BatchInvariantModeAndNonCausalAndF32Out' \
  >"$D/tests_v9b.log" 2>&1
echo "rc=$?"
grep -E "FAILED|Failure|tests ran|PASSED" "$D/tests_v9b.log" | tail -6

step "tests default (v8: its Q load, row limits and epilogue are now shared functions)"
timeout 7 "$B/mla_tests_gpu" --gtest_filter='DecodeGpu.GridOfEdges:DecodeGpu.SplitPiecesAtH128' \
  >"$D/tests_default.log" 2>&1
echo "rc=$?"
grep -E "FAILED|Failure|tests ran|PASSED" "$D/tests_default.log" | tail -4

for kt in v9:racecheck:17 v9b:racecheck:14 v9:memcheck:10; do
  IFS=: read -r k tool t <<<"$kt"
  step "$tool SanitizerSmallTma $k"
  MLA_DECODE_KERNEL=$k timeout "$t" compute-sanitizer --tool "$tool" "$B/mla_tests_gpu" \
    --gtest_filter='DecodeGpu.SanitizerSmallTma' >"$D/${tool}_$k.log" 2>&1
  echo "rc=$?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$D/${tool}_$k.log" | tail -2
done

for k in v9 v9b; do
  step "stamps $k (b128 h128 s_q1 L16K bf16; cycles per pair = 2 tiles; CTA 0.0)"
  MLA_DECODE_KERNEL=${k}stamps timeout 6 "$B/mla" bench decode \
    --only "b128 h128 s_q1 L16K bf16" --reps 5 >"$D/stamps_$k.log" 2>&1
  echo "rc=$?"
  grep "^stamps v9 cta 0.0" "$D/stamps_$k.log" | tail -3 | cut -c1-230
done

SHAPES=("b64 h128 s_q1 L4K bf16" "b64 h128 s_q1 L16K bf16" "b128 h128 s_q1 L16K bf16"
  "b128 h128 s_q1 L32K bf16" "b64 h128 s_q2 L16K bf16" "b128 h16 s_q1 L32K bf16")
ONLY=()
for s in "${SHAPES[@]}"; do ONLY+=(--only "$s"); done
n=0
for k in v8 v9 v9b v8 v9 v9b; do
  n=$((n + 1))
  step "bench $k"
  MLA_DECODE_KERNEL=$k timeout 8 "$B/mla" bench decode "${ONLY[@]}" --reps 10 \
    --json "$D/bench_${n}_$k.json" >"$D/bench_${n}_$k.log" 2>&1
  echo "rc=$?"
done
step "end"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader

python3 - "$D" <<'PY'
# Per shape: both runs of each kernel (time us and TFLOP/s, GB/s for h16), the
# JSON of a run or, if it was cut by its timeout, the lines its log printed.
import json, sys, glob, os
d = sys.argv[1]
runs = {}
def add(k, key, t, tf, gb):
    runs.setdefault(key, {}).setdefault(k, []).append((t, tf, gb))
for log in sorted(glob.glob(os.path.join(d, "bench_*_v*.log"))):
    n, k = os.path.basename(log)[6:-4].split("_")
    js = log[:-4] + ".json"
    try:
        for r in json.load(open(js))["results"]:
            add(k, r["name"] + " " + r["format"], r["time_us"], r["tflops"], r["gbps"])
        continue
    except Exception:
        pass
    for line in open(log):
        t = line.split()
        if len(t) >= 9 and t[0].startswith("decode-"):
            add(k, " ".join(t[1:6]), float(t[6]), float(t[7]), float(t[8]))
print("us (TFLOP/s, GB/s for h16) of each run; speedup = best v8 time / best time")
print("%-24s %-26s %-26s %-26s %s" % ("shape", "v8", "v9", "v9b", "v9 v9b speedup"))
for key, kr in runs.items():
    def cell(k):
        rs = kr.get(k, [])
        txt = " / ".join("%.1f (%.0f)" % (t, gb if " h16 " in key else tf) for t, tf, gb in rs)
        return (txt or "-"), (min(t for t, _, _ in rs) if rs else None)
    a, ta = cell("v8")
    b, tb = cell("v9")
    c, tc = cell("v9b")
    sp = " ".join("%.2fx" % (ta / t) if ta and t else "-" for t in (tb, tc))
    print("%-24s %-26s %-26s %-26s %s" % (key, a, b, c, sp))
PY
