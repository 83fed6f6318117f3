#!/usr/bin/env bash
# Helper indexer2's GPU round (issue #4: the DSA indexer decode at 64% of the
# read bandwidth). Run from the repo root on the GPU machine:
#   OUT=<dir> bash scripts/s3/indexer2.sh <carried-build-dir>
# Steps, each bounded by `timeout` and by the script's budget (BUDGET seconds,
# default 58 of the 60 given):
#   1. tests: DsaGpu.IndexerLogitsDecode* (v1 and v2 each against the fp64
#      reference, also in runs of 2 and 25 pages per CTA; v2 alone) and the
#      DSA step tests with v2 forced (MLA_INDEXER_KERNEL=v2)
#   2. compute-sanitizer memcheck on DsaGpu.IndexerLogitsDecodeV2Small (v2) and
#      DsaGpu.IndexerLogitsDecodeSkipsInvalidPages (v1, v2: page ids outside the cache)
#   3. bench indexer-v2: v1 and v2 timed in one run at b128 L32K/L128K s_q 1, 2
#      (+ v2 with 3 stages at s_q 1) and L128K s_q 3, 4, with v2's logits
#      compared to v1's at those shapes
# If step 1 times out (a hang in v2), steps 2 and 3 are skipped (they run v2).
# Logs and JSON under $OUT/indexer2/; a short summary last.
set -u
B=${1:?usage: OUT=<dir> bash scripts/s3/indexer2.sh <build-dir>}
OUT=${OUT:-/tmp/mla_out}
D="$OUT/indexer2"
mkdir -p "$D"
B=$(cd "$B" && pwd)  # relative (to the repo root) or absolute
export LD_LIBRARY_PATH="$B:$B/rt:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
BUDGET=${BUDGET:-58}
T0=$(date +%s)
elapsed() { echo $(($(date +%s) - T0)); }
cap() {  # a step's own cap, or what is left of the budget if less
  local left=$((BUDGET - $(elapsed)))
  [ "$left" -lt 1 ] && left=1
  [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}
declare -A RC
run_step() {  # name cap command...
  local name=$1 c
  c=$(cap "$2")
  shift 2
  if [ $((BUDGET - $(elapsed))) -lt 3 ]; then
    RC[$name]=skipped
    return
  fi
  echo "=== $name (timeout ${c}s, t+$(elapsed)s)"
  timeout "$c" "$@" >"$D/$name.log" 2>&1
  RC[$name]=$?
}
T="$B/mla_tests_gpu"

MLA_INDEXER_KERNEL=v2 run_step tests 20 "$T" \
  --gtest_filter='DsaGpu.IndexerLogitsDecode*:DsaStepGpu.*'
if [ "${RC[tests]}" = 124 ] || [ "${RC[tests]}" = 137 ]; then
  RC[memcheck]=skipped RC[bench]=skipped
else
  MLA_INDEXER_KERNEL=v2 run_step memcheck 15 compute-sanitizer --tool memcheck \
    --error-exitcode 9 "$T" \
    --gtest_filter='DsaGpu.IndexerLogitsDecodeV2Small:DsaGpu.IndexerLogitsDecodeSkips*'
  run_step bench 20 "$B/mla_bench_dsa" "$D/bench_indexer_v2.json" indexer-v2
fi

echo
echo "=== summary (t+$(elapsed)s)"
printf '%-9s rc=%-7s %s\n' tests "${RC[tests]:-none}" \
  "$(grep -E '^\[  (PASSED|FAILED)  \]' "$D/tests.log" 2>/dev/null | tr '\n' ' ')"
grep -E '^\[  FAILED  \] [A-Za-z]' "$D/tests.log" 2>/dev/null | head -4
grep -hE 'got .* want|differs' "$D/tests.log" 2>/dev/null | head -4
printf '%-9s rc=%-7s %s\n' memcheck "${RC[memcheck]:-none}" \
  "$(grep -hE 'ERROR SUMMARY|PASSED|FAILED' "$D/memcheck.log" 2>/dev/null | head -3 | tr '\n' ' ')"
printf '%-9s rc=%-7s\n' bench "${RC[bench]:-none}"
# rows: kernel, shape, us, % of the read bandwidth; then v2 against v1
awk '/^indexer-/ {s = substr($0, 17, 48); sub(/ +$/, "", s); n = split(substr($0, 65), r, " +");
  printf "%-15s %-24s %9s us %6s of read BW\n", $1, s, r[2], r[n-3]}' "$D/bench.log" 2>/dev/null
grep -E '^v2' "$D/bench.log" 2>/dev/null | cut -c1-130
tail -3 "$D/bench.log" 2>/dev/null | grep -iE 'error|fail' | head -3
