#!/usr/bin/env bash
# Device script of helpers decode9 / decode9b (issue #3, decode v9: the math
# warpgroups take alternate 64-key tiles for S; docs/perf-log.md v9,
# /work/notes/decode9.md). Round 2 hung on every v9/v9b run (a warp vote in a
# lane-0 branch of the producer, fixed); this round checks the fix first.
# Run from the repo root:  OUT=<dir> bash scripts/s3/decode9.sh <carried-build-dir>
# Steps (timeouts sum to 92 s; each later step runs only if the one it needs passed):
#   1. smoke: DecodeGpu.SanitizerSmallTma with MLA_DECODE_KERNEL=v9 (10 s);
#      if it fails or hangs, nothing else runs.
#   2. DecodeGpu.* with v9 forced (30 s; page 64 bf16 = the TMA path).
#   3. compute-sanitizer racecheck, v9, SanitizerSmallTma (20 s).
#   4. only if 2 passed: mla bench decode, v8 / v9 alternating twice, 4 shapes (4 x 8 s).
#   5. summary (last).
# v9b (compiled, same producer, fix included) is not run here: device time.
set -u
B=${1:-build}
OUT=${OUT:-/tmp/mla_out}
D="$OUT/decode9"
mkdir -p "$D"
export LD_LIBRARY_PATH="$PWD/$B:$PWD/$B/rt:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
T0=$(date +%s)
step() { echo "=== $* (t+$(($(date +%s) - T0))s)"; }
# Line-buffered gtest output: a run cut by its timeout still shows its last case.
LB=()
command -v stdbuf >/dev/null && LB=(stdbuf -oL -eL)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader

step "smoke: SanitizerSmallTma, v9"
MLA_DECODE_KERNEL=v9 timeout 10 ${LB[@]+"${LB[@]}"} "$B/mla_tests_gpu" \
  --gtest_filter='DecodeGpu.SanitizerSmallTma' >"$D/smoke_v9.log" 2>&1
smoke=$?
echo "rc=$smoke"
tail -4 "$D/smoke_v9.log"

tests=skipped
race=skipped
if [ "$smoke" -eq 0 ]; then
  step "tests v9 (DecodeGpu.*)"
  MLA_DECODE_KERNEL=v9 timeout 30 ${LB[@]+"${LB[@]}"} "$B/mla_tests_gpu" --gtest_filter='DecodeGpu.*' \
    >"$D/tests_v9.log" 2>&1
  tests=$?
  echo "rc=$tests"
  grep -E "FAILED|Failure|tests ran|PASSED" "$D/tests_v9.log" | tail -6
  grep -E "h128 .*page64 bf16" "$D/tests_v9.log" | head -2

  step "racecheck SanitizerSmallTma v9"
  MLA_DECODE_KERNEL=v9 timeout 20 compute-sanitizer --tool racecheck "$B/mla_tests_gpu" \
    --gtest_filter='DecodeGpu.SanitizerSmallTma' >"$D/racecheck_v9.log" 2>&1
  race=$?
  echo "rc=$race"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$D/racecheck_v9.log" | tail -2
fi

if [ "$tests" = 0 ]; then
  SHAPES=("b64 h128 s_q1 L4K bf16" "b64 h128 s_q1 L16K bf16" "b128 h128 s_q1 L32K bf16"
    "b128 h16 s_q1 L32K bf16")
  ONLY=()
  for s in "${SHAPES[@]}"; do ONLY+=(--only "$s"); done
  n=0
  for k in v8 v9 v8 v9; do
    n=$((n + 1))
    step "bench $k"
    MLA_DECODE_KERNEL=$k timeout 8 "$B/mla" bench decode "${ONLY[@]}" --reps 10 \
      --json "$D/bench_${n}_$k.json" >"$D/bench_${n}_$k.log" 2>&1
    echo "rc=$?"
  done
fi
step "end"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader

echo "=== decode9 summary: smoke rc=$smoke  tests v9 rc=$tests  racecheck v9 rc=$race" \
  "(0 pass, 124 timeout = hang, skipped = an earlier step failed)"
grep -hE "^\[  (PASSED|FAILED)  \]|tests? ran" "$D/tests_v9.log" 2>/dev/null | tail -3
grep -hE "RACECHECK SUMMARY|ERROR SUMMARY" "$D/racecheck_v9.log" 2>/dev/null | tail -1
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
if not runs:
    print("no bench ran")
    sys.exit(0)
print("us (TFLOP/s, GB/s for h16) of each run; speedup = best v8 time / best v9 time")
print("%-26s %-28s %-28s %s" % ("shape", "v8", "v9", "speedup"))
for key, kr in runs.items():
    def cell(k):
        rs = kr.get(k, [])
        txt = " / ".join("%.1f (%.0f)" % (t, gb if " h16 " in key else tf) for t, tf, gb in rs)
        return (txt or "-"), (min(t for t, _, _ in rs) if rs else None)
    a, ta = cell("v8")
    b, tb = cell("v9")
    sp = "%.2fx" % (ta / tb) if ta and tb else "-"
    print("%-26s %-28s %-28s %s" % (key, a, b, sp))
PY
