#!/usr/bin/env bash
# prefill2 (issue #5): the warp-specialised prefill kernel (FlashKernel::wgmma_ws,
# forced through MLA_PREFILL_KERNEL=wgmma_ws for the library paths; the
# attention tests run every kernel explicitly) on the GPU machine:
#   1. PrefillGpu.* with MLA_PREFILL_KERNEL=wgmma_ws           (<= 40 s)
#   2. compute-sanitizer memcheck + racecheck, small filter    (<= 15 + 20 s)
#   3. mla_bench_prefill --attention-only: wgmma vs wgmma_ws at 8K/16K/32K, h128 (<= 40 s)
# A test run that times out (a pipeline deadlock) skips the rest.
# Usage (repo root): OUT=<dir> bash scripts/s3/prefill2.sh <carried-build-dir>
set -u
B=${1:?build dir}
OUT=${OUT:-/tmp/out}
D="$OUT/prefill2"
mkdir -p "$D"
export LD_LIBRARY_PATH=$PWD/$B:$PWD/$B/rt:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export MLA_PREFILL_KERNEL=wgmma_ws
WS_FN='_ZN3mla4cuda7prefill19flash_fwd_ws_kernelILb0EEEvNS1_14FlashFwdParamsENS1_11FlashWsMapsE'
SMALL='PrefillGpu.AttentionRaggedBatchWithPrefixes:PrefillGpu.QueriesThatSeeNoKey*:PrefillGpu.AttentionNonCausal'

cuobjdump --dump-sass --function "$WS_FN" "$B/libmla.so" >"$D/ws_sass.txt" 2>&1
echo "sass: HGMMA $(grep -c HGMMA "$D/ws_sass.txt") LDL/STL $(grep -cE 'LDL|STL' "$D/ws_sass.txt")"

timeout 40 "$B/mla_tests_gpu" --gtest_filter='PrefillGpu.*' >"$D/tests.txt" 2>&1
TEST_RC=$?
grep -E "Failure|Expected|Which is|error|mismatch|not finite" "$D/tests.txt" | head -30
SAN_M=skip SAN_R=skip BENCH_RC=skip
if [ "$TEST_RC" != 124 ] && [ "$TEST_RC" != 137 ]; then
  timeout 15 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/mla_tests_gpu" \
    --gtest_filter="$SMALL" >"$D/memcheck.txt" 2>&1
  SAN_M=$?
  tail -3 "$D/memcheck.txt"
  timeout 20 compute-sanitizer --tool racecheck --error-exitcode 3 "$B/mla_tests_gpu" \
    --gtest_filter='PrefillGpu.AttentionRaggedBatchWithPrefixes' >"$D/racecheck.txt" 2>&1
  SAN_R=$?
  tail -3 "$D/racecheck.txt"
  timeout 40 "$B/mla_bench_prefill" --attention-only --json "$D/bench.json" >"$D/bench.txt" 2>&1
  BENCH_RC=$?
fi

echo "== prefill2 summary"
grep -E "^\[  (PASSED|FAILED) " "$D/tests.txt" | head -12
echo "tests rc=$TEST_RC memcheck rc=$SAN_M racecheck rc=$SAN_R bench rc=$BENCH_RC"
grep -E "^ceiling|^prefill-attention" "$D/bench.txt" 2>/dev/null
