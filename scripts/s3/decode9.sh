#!/usr/bin/env bash
# Device script of helper decode9 (issue #3, decode v9: the math warpgroups take
# alternate 64-key tiles for S; docs/perf-log.md v9, /work/notes/decode9.md).
# Run from the repo root:  OUT=<dir> bash scripts/s3/decode9.sh <carried-build-dir>
# Steps (~100-130 s on a warm H200; every step bounded by timeout):
#   1. WgmmaGpu.* + DecodeGpu.* with MLA_DECODE_KERNEL=v9 forced (the TMA path
#      runs at page 64: GridOfEdges, SanitizerSmallTma, SplitPiecesAtH128, ...).
#   2. compute-sanitizer racecheck + memcheck on DecodeGpu.SanitizerSmallTma (v9).
#   3. v9stamps: per-phase cycles per pair of CTA 0.0 (one bench call).
#   4. mla bench decode, v8 / v9 alternating twice, --reps 10, JSON per run.
#   5. summary table (last): per shape, us and TFLOP/s (or GB/s) of both runs.
set -u
B=${1:-build}
OUT=${OUT:-/tmp/mla_out}
D="$OUT/decode9"
mkdir -p "$D"
export LD_LIBRARY_PATH="$PWD/$B:$PWD/$B/rt:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
T0=$(date +%s)
step() { echo "=== $* (t+$(($(date +%s) - T0))s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader

step "tests v9"
MLA_DECODE_KERNEL=v9 timeout 38 "$B/mla_tests_gpu" --gtest_filter='DecodeGpu.*:WgmmaGpu.*' \
  >"$D/tests_v9.log" 2>&1
echo "rc=$?"
grep -E "FAILED|Failure|tests ran|PASSED" "$D/tests_v9.log" | tail -8
grep -E "h128 .*page64 bf16" "$D/tests_v9.log" | head -4

for tool in racecheck memcheck; do
  step "$tool SanitizerSmallTma v9"
  MLA_DECODE_KERNEL=v9 timeout $([ $tool = racecheck ] && echo 25 || echo 20) compute-sanitizer --tool $tool "$B/mla_tests_gpu" \
    --gtest_filter='DecodeGpu.SanitizerSmallTma' >"$D/$tool.log" 2>&1
  echo "rc=$?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|PASSED|FAILED" "$D/$tool.log" | tail -3
done

step "stamps v9 (b128 h128 s_q1 L16K bf16, cycles per pair = 2 tiles)"
MLA_DECODE_KERNEL=v9stamps timeout 12 "$B/mla" bench decode --only "b128 h128 s_q1 L16K bf16" \
  --reps 5 >"$D/stamps.log" 2>&1
echo "rc=$?"
grep "^stamps v9 cta 0.0" "$D/stamps.log" | tail -3 | cut -c1-230

SHAPES=("b64 h128 s_q1 L4K bf16" "b64 h128 s_q1 L16K bf16" "b64 h128 s_q1 L32K bf16"
  "b128 h128 s_q1 L4K bf16" "b128 h128 s_q1 L16K bf16" "b128 h128 s_q1 L32K bf16"
  "b64 h128 s_q2 L16K bf16" "b128 h16 s_q1 L32K bf16")
ONLY=()
for s in "${SHAPES[@]}"; do ONLY+=(--only "$s"); done
n=0
for k in v8 v9 v8 v9; do
  n=$((n + 1))
  step "bench $k"
  MLA_DECODE_KERNEL=$k timeout 13 "$B/mla" bench decode "${ONLY[@]}" --reps 10 \
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
print("%-24s %-28s %-28s %s" % ("shape", "v8 us (TF or GB/s)", "v9 us (TF or GB/s)", "v8/v9 time"))
for key, kr in runs.items():
    def cell(k):
        rs = kr.get(k, [])
        txt = " / ".join("%.1f (%.0f)" % (t, gb if " h16 " in key else tf) for t, tf, gb in rs)
        return (txt or "-"), (min(t for t, _, _ in rs) if rs else None)
    a, ta = cell("v8")
    b, tb = cell("v9")
    print("%-24s %-28s %-28s %s" % (key, a, b, "%.2fx" % (ta / tb) if ta and tb else "-"))
PY
