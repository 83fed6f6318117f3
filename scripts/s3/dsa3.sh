#!/usr/bin/env bash
# Helper dsa3's GPU round (issue #4, DSA). Run from the repo root on the GPU
# machine:  OUT=<dir> bash scripts/s3/dsa3.sh <carried-build-dir>
# Steps in order of importance, each bounded by `timeout` and by the whole
# script's budget (BUDGET seconds, default 145 of the 150 given):
#   1. sparse prefill on the wgmma decode kernel: DsaGpu.SparsePrefill* (default
#      path and MLA_SPARSE_KERNEL=mma, h 16-128, -1 entries, short rows, s_kv 1 to 70000)
#   2. dense decode after the partial-slot bound (decode_workspace_layout): DecodeGpu.*
#   3. bench sparse-prefill: old (mma) vs new (wgmma) at s_q 4096 top-2048
#   4. memcheck on the sparse prefill test; compute-sanitizer racecheck on the
#      streaming top-k, v3, v2, v4 forced (MLA_TEST_TOPK_ALGO), memcheck on all
#   5. top-k GPU tests (all versions), bench topk (v1-v4 + stages)
#   6. bench indexer (wgmma decode vs its copies-only / copies+wgmma stages: what
#      holds it at 66% of the copy bandwidth), the rest of the DSA GPU tests
# Logs and JSON under $OUT/dsa3/; a short summary table last.
set -u
B=${1:?usage: OUT=<dir> bash scripts/s3/dsa3.sh <build-dir>}
OUT=${OUT:-/tmp/mla_out}
D="$OUT/dsa3"
mkdir -p "$D"
B=$(cd "$B" && pwd)  # relative (to the repo root) or absolute
export LD_LIBRARY_PATH="$B:$B/rt:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
BUDGET=${BUDGET:-145}
T0=$(date +%s)
elapsed() { echo $(($(date +%s) - T0)); }
# timeout for a step: its own cap, or what is left of the budget if less
cap() {
  local left=$((BUDGET - $(elapsed)))
  [ "$left" -lt 1 ] && left=1
  [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}
step() { echo "=== $* (t+$(elapsed)s)"; }
declare -A RC
run_step() {  # name cap command...
  local name=$1 c
  c=$(cap "$2")
  shift 2
  if [ $((BUDGET - $(elapsed))) -lt 3 ]; then
    RC[$name]=skipped
    return
  fi
  step "$name (timeout ${c}s)"
  timeout "$c" "$@" >"$D/$name.log" 2>&1
  RC[$name]=$?
}
T="$B/mla_tests_gpu"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader >"$D/gpu.txt" 2>&1

run_step prefill_tests 50 "$T" --gtest_filter='DsaGpu.SparsePrefill*:DsaGpu.SparseApiRejects*'
run_step decode_tests 35 "$T" --gtest_filter='DecodeGpu.*'
run_step bench_prefill 30 "$B/mla_bench_dsa" "$D/bench_prefill.json" sparse-prefill
run_step memcheck_prefill 25 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" \
  --gtest_filter='DsaGpu.SparsePrefillApiMatchesReference'
STREAM='DsaGpu.TopkStreamingPool*:DsaGpu.TopkCandidateOverflow*'
for v in 3 2 4; do
  MLA_TEST_TOPK_ALGO=$v run_step racecheck_v$v 20 compute-sanitizer --tool racecheck \
    --racecheck-report all --print-limit 40 "$T" --gtest_filter="$STREAM"
done
run_step memcheck_topk 20 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" \
  --gtest_filter="$STREAM"
run_step topk_tests 15 "$T" --gtest_filter='DsaGpu.Topk*'
run_step bench_topk 15 "$B/mla_bench_dsa" "$D/bench_topk.json" topk
run_step bench_indexer 15 "$B/mla_bench_dsa" "$D/bench_indexer.json" indexer
run_step dsa_tests 30 "$T" --gtest_filter='DsaGpu.*:DsaStepGpu.*:-DsaGpu.Topk*:DsaGpu.SparsePrefill*'

echo
echo "=== summary (t+$(elapsed)s; gpu: $(cat "$D/gpu.txt"))"
for s in prefill_tests decode_tests topk_tests dsa_tests; do
  printf '%-16s rc=%-7s %s\n' "$s" "${RC[$s]:-none}" \
    "$(grep -E '^\[  (PASSED|FAILED)  \]' "$D/$s.log" 2>/dev/null | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$D/$s.log" 2>/dev/null | head -4
done
grep -hE 'Failure|Expected|Which is|kernel (default|mma)' "$D/prefill_tests.log" 2>/dev/null |
  head -8
for s in memcheck_prefill racecheck_v3 racecheck_v2 racecheck_v4 memcheck_topk bench_prefill \
  bench_topk bench_indexer; do
  printf '%-16s rc=%-7s %s\n' "$s" "${RC[$s]:-none}" \
    "$(grep -hE 'RACECHECK SUMMARY|ERROR SUMMARY' "$D/$s.log" 2>/dev/null | tr '\n' ' ')"
done
# Where the reported hazards are (kernel source lines), most frequent first.
for s in racecheck_v3 racecheck_v2 racecheck_v4; do
  echo "-- $s locations:"
  grep -oE '(topk|mbarrier)\.cu[h]?:[0-9]+' "$D/$s.log" 2>/dev/null | sort | uniq -c |
    sort -rn | head -6
  grep -m3 -iE 'race reported|might not have|hazard' "$D/$s.log" 2>/dev/null | cut -c1-200
done
echo "-- bench (us, TF/s):"
grep -hE '^(sparse-prefill|topk|sm clock)' "$D/bench_prefill.log" "$D/bench_topk.log" \
  2>/dev/null | cut -c1-120 | head -40
grep -hE '^indexer-(decode|stage)' "$D/bench_indexer.log" 2>/dev/null | cut -c1-120 | head -12
