#!/usr/bin/env bash
# The integration run on the GPU machine, from the repo root with a carried
# CUDA build (libfmt and libcudart in <build>/rt, not on the GPU image):
#   1. every GPU test (mla_tests_gpu: decode, append, DSA, prefill, wgmma),
#   2. compute-sanitizer memcheck over a small filter of each family, racecheck
#      on the decode kernels,
#   3. the Python package on torch CUDA tensors and `mla.bench compare --quick`
#      (scripts/gpu_check_python.sh),
# with a short summary last. Logs go to $OUT (at most 8 files come back).
#   Usage: OUT=... bash scripts/gpu_check_all.sh [build-dir]   (default: build)
set -u
BUILD=${1:-build}
OUT=${OUT:-/tmp/mla_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$BUILD:$PWD/$BUILD/rt:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
T0=$(date +%s)
step() { echo; echo "=== $* (t+$(( $(date +%s) - T0 ))s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
TESTS="$BUILD/mla_tests_gpu"
ldd "$TESTS" | grep -i "not found" && echo "MISSING LIBRARIES"

step "all GPU tests"
timeout 400 "$TESTS" --gtest_brief=1 >"$OUT/gpu_tests.log" 2>&1
TEST_RC=$?
grep -E "FAILED|PASSED|tests ran|Failure" "$OUT/gpu_tests.log" | head -30

SMALL=${SMALL:-'DecodeGpu.SanitizerSmall*:AppendGpu.*:DsaGpu.IndexerLogitsDecode*:DsaGpu.TopkMatches*:DsaGpu.SparseDecodeApi*:PrefillGpu.QueriesThatSeeNoKey*:PrefillGpu.ChunkedEqualsAllAtOnceFp8*'}
step "compute-sanitizer memcheck ($SMALL)"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$TESTS" --gtest_brief=1 \
  --gtest_filter="$SMALL" >"$OUT/sanitizer.log" 2>&1
MEM_RC=$?
tail -3 "$OUT/sanitizer.log"
step "compute-sanitizer racecheck (DecodeGpu.SanitizerSmall*)"
timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 "$TESTS" --gtest_brief=1 \
  --gtest_filter='DecodeGpu.SanitizerSmall*' >>"$OUT/sanitizer.log" 2>&1
RACE_RC=$?
tail -3 "$OUT/sanitizer.log"

if [ -z "${SKIP_PYTHON:-}" ]; then
  step "python package + compare --quick"
  OUT="$OUT/py" bash scripts/gpu_check_python.sh "$BUILD" >"$OUT/python.log" 2>&1
  PY_RC=$?
  mv "$OUT/py/pytest.log" "$OUT/pytest.log" 2>/dev/null
  mv "$OUT/py/compare" "$OUT/compare" 2>/dev/null
  rm -rf "$OUT/py"
  tail -45 "$OUT/python.log"
fi

step "summary"
echo "gpu tests rc=$TEST_RC memcheck rc=$MEM_RC racecheck rc=$RACE_RC python rc=${PY_RC:-skipped}"
grep -E "tests ran|PASSED|FAILED" "$OUT/gpu_tests.log" | tail -4
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer.log"
grep -E "passed|failed" "$OUT/pytest.log" | tail -2
