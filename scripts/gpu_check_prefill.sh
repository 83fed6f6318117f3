#!/usr/bin/env bash
# The prefill path on the GPU machine, in one call (device time is scarce):
# GPU tests, compute-sanitizer (memcheck) on small cases, the PERF.md prefill
# suite, PyTorch's cuDNN SDPA on the same shapes, and a short table last.
# Run from the repo root with the build dir carried, e.g.
#   run(command="bash scripts/gpu_check_prefill.sh build-prefill", carry=["build-prefill"])
# The build was made on the CI-like machine (Debian 12); the GPU image is not
# Debian, so libfmt travels in <build>/rtlib (copied there before the call).
set -u
B=${1:-build-prefill}
OUT=${OUT:-/tmp/prefill-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$B:$PWD/$B/rtlib:${LD_LIBRARY_PATH:-}"
# cuBLAS: the toolkit's, else the pip wheel's beside PyTorch.
if ! ldconfig -p | grep -q libcublas.so.13 && [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ]; then
  CUBLAS_DIR=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null)
  [ -n "$CUBLAS_DIR" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$CUBLAS_DIR"
fi
export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:/usr/local/cuda/lib64"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/clocks.txt"

echo "== SASS: warpgroup MMA in the prefill kernels (HGMMA = wgmma, HMMA = mma.sync)"
cuobjdump --dump-sass --function '_ZN3mla4cuda7prefill22flash_fwd_wgmma_kernelILb0EEEvNS1_14FlashFwdParamsE' "$B/libmla.so" 2>/dev/null | grep -c HGMMA
echo "== GPU tests (prefill)"
timeout 120 "$B/mla_tests_gpu" --gtest_filter='PrefillGpu.*' >"$OUT/tests.txt" 2>&1
TEST_RC=$?
grep -E "^\[  (FAILED|PASSED|  OK) |Failure|Expected|Which is|error" "$OUT/tests.txt" | head -40

echo "== compute-sanitizer memcheck (small cases)"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/mla_tests_gpu" \
  --gtest_filter='PrefillGpu.AttentionRaggedBatchWithPrefixes:PrefillGpu.QueriesThatSeeNoKey*:PrefillGpu.ChunkedEqualsAllAtOnceFp8Cache' \
  >"$OUT/sanitizer.txt" 2>&1
SAN_RC=$?
tail -4 "$OUT/sanitizer.txt"

echo "== bench (ours)"
timeout 150 "$B/mla_bench_prefill" --json "$OUT/bench_prefill.json" 2>&1 | tee "$OUT/bench.txt"
if [ "${PIPESTATUS[0]}" != 0 ]; then
  echo "bench failed: again with the mma.sync kernel only"
  timeout 100 "$B/mla_bench_prefill" --mma-sync-only --json "$OUT/bench_prefill_mma.json" 2>&1 | tee -a "$OUT/bench.txt"
fi
echo "== peer: torch SDPA cuDNN"
timeout 100 python3 bench/peers/torch_sdpa.py --json "$OUT/torch_sdpa.json" 2>&1 | tee "$OUT/peer.txt"
nvidia-smi --query-gpu=clocks.sm,clocks.mem --format=csv,noheader | tee -a "$OUT/clocks.txt"

echo "== summary"
echo "tests rc=$TEST_RC sanitizer rc=$SAN_RC"
grep -E "^prefill-|ceiling" "$OUT/bench.txt"
grep -E "^peer-" "$OUT/peer.txt"
