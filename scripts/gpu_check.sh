#!/usr/bin/env bash
# The one script the GPU machine runs (via the device tool), from the repo root:
#   build (or use the carried build dir), GPU tests, compute-sanitizer memcheck
#   and racecheck on a small filter, the decode benchmarks, the PyTorch peer,
#   and a short table last. Logs and JSON go to $OUT.
# Usage: BUILD=build-decode bash scripts/gpu_check.sh [quick]
set -u
BUILD=${BUILD:-build-decode}
OUT=${OUT:-/tmp/mla_out}
MODE=${1:-full}
mkdir -p "$OUT"
# Carried builds bring libfmt and libcudart in $BUILD/rt; cuBLAS (linked by
# other kernels of libmla) is found where the image keeps it.
CUBLAS_DIR=$(dirname "$(find /usr/local/cuda* /usr/lib /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -1)" 2>/dev/null)
export LD_LIBRARY_PATH="$PWD/$BUILD:$PWD/$BUILD/rt:${CUBLAS_DIR:-.}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
T0=$(date +%s)
step() { echo; echo "=== $* (t+$(( $(date +%s) - T0 ))s)"; }

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version,temperature.gpu --format=csv \
  # (printed, not saved: the device returns at most 8 files)

TESTS="$BUILD/mla_tests_decode_gpu"
if [ ! -x "$TESTS" ] || [ ! -x "$BUILD/mla" ]; then
  step "build (no carried build found)"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$BUILD" -j16 \
    || { echo "BUILD FAILED"; exit 1; }
  TESTS="$BUILD/mla_tests_gpu"
fi
ldd "$TESTS" | grep -i "not found" && echo "MISSING LIBRARIES"

step "GPU tests"
timeout 300 "$TESTS" 2>&1 | tee "$OUT/tests.log" | grep -vE "^\[ (RUN|      OK) " | tail -60
TEST_RC=${PIPESTATUS[0]}

SMALL='DecodeGpu.SanitizerSmall*:DecodeGpu.BadDevice*:AppendGpu.*'
step "compute-sanitizer memcheck ($SMALL)"
timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$TESTS" --gtest_filter="$SMALL" \
  >"$OUT/memcheck.log" 2>&1
MEM_RC=$?
tail -5 "$OUT/memcheck.log"
step "compute-sanitizer racecheck (DecodeGpu.SanitizerSmall*)"
timeout 240 compute-sanitizer --tool racecheck --error-exitcode 9 "$TESTS" \
  --gtest_filter='DecodeGpu.SanitizerSmall*' >"$OUT/racecheck.log" 2>&1
RACE_RC=$?
tail -5 "$OUT/racecheck.log"

if [ "$MODE" != "quick" ]; then
  SUITES=${SUITES:-all}
  step "mla bench decode ($SUITES)"
  for s in $SUITES; do
    timeout 400 "$BUILD/mla" bench decode --suite $s --json "$OUT/bench_decode_$s.json" 2>&1 \
      | tee -a "$OUT/bench.log"
  done
  step "mla bench decode --batch-invariant (varlen + tp)"
  for s in decode-varlen decode-tp; do
    timeout 120 "$BUILD/mla" bench decode --suite $s --batch-invariant \
      2>&1 | tee -a "$OUT/bench_invariant.log"
  done
  [ -n "${SKIP_PEER:-}" ] && MODE=quick
  [ "$MODE" != "quick" ] && step "PyTorch peer"
  [ "$MODE" != "quick" ] && PYTHONUNBUFFERED=1 timeout 200 python3 bench/peers/torch_decode.py --json "$OUT/torch_decode.json" \
    2>&1 | tee "$OUT/torch.log"
fi

step "summary"
echo "tests rc=$TEST_RC memcheck rc=$MEM_RC racecheck rc=$RACE_RC"
grep -E "PASSED|FAILED|tests ran" "$OUT/tests.log" | tail -5
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log"
[ -f "$OUT/bench.log" ] && cut -c1-110 "$OUT/bench.log"
[ -f "$OUT/bench_invariant.log" ] && grep -v suite "$OUT/bench_invariant.log" | sed 's/^/invariant /' | cut -c1-120
[ -f "$OUT/torch.log" ] && grep -E "ceilings|torch" "$OUT/torch.log"
exit 0
