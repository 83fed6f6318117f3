#!/usr/bin/env bash
# The one script the GPU machine runs for the DSA kernels (src/cuda/dsa), from
# the repo root with a carried build: DSA GPU tests, compute-sanitizer memcheck
# on a small filter, the DSA benchmark (bench/bench_dsa.cu), a short table last.
# Logs and JSON go to $OUT.   Usage: BUILD=build-dsagpu bash scripts/gpu_check_dsa.sh [tests|bench|all]
set -u
BUILD=${BUILD:-build-dsa3}
OUT=${OUT:-/tmp/mla_out}
MODE=${1:-all}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$BUILD:$PWD/$BUILD/rt:${LD_LIBRARY_PATH:-}"
T0=$(date +%s)
step() { echo; echo "=== $* (t+$(( $(date +%s) - T0 ))s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv | tee "$OUT/gpu.txt"
ldd "$BUILD/mla_tests_gpu" | grep -i "not found" && echo "MISSING LIBRARIES"
TEST_RC=- MEM_RC=-
if [ "$MODE" != bench ]; then
  step "DSA GPU tests"
  timeout 240 "$BUILD/mla_tests_gpu" --gtest_filter='DsaGpu.*' 2>&1 | tee "$OUT/dsa_tests.log" \
    | grep -vE "^\[ (RUN|      OK) " | tail -40
  TEST_RC=${PIPESTATUS[0]}
  SMALL='DsaGpu.IndexerAppend*:DsaGpu.IndexerLogitsDecode*:DsaGpu.IndexerQuery*:DsaGpu.TopkCandidate*:DsaGpu.SparseWithAll*:DsaGpu.SparsePrefillApi*:DsaGpu.SparseApiRejects*'
  step "compute-sanitizer memcheck ($SMALL)"
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/mla_tests_gpu" \
    --gtest_filter="$SMALL" >"$OUT/dsa_memcheck.log" 2>&1
  MEM_RC=$?
  tail -4 "$OUT/dsa_memcheck.log"
fi
if [ "$MODE" != tests ]; then
  step "DSA benchmark"
  timeout 300 "$BUILD/mla_bench_dsa" "$OUT/bench_dsa.json" "${SUITE:-all}" 2>&1 | tee "$OUT/dsa_bench.log"
fi
step "summary"
echo "dsa tests rc=$TEST_RC memcheck rc=$MEM_RC"
grep -E "recall|PASSED|FAILED" "$OUT/dsa_tests.log" 2>/dev/null | tail -12
grep -E "us " "$OUT/dsa_bench.log" 2>/dev/null | tail -30
