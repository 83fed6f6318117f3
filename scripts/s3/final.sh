#!/usr/bin/env bash
# Session 3's final GPU round (two H200s): every GPU test on the merged build,
# compute-sanitizer on small cases, the prefill suite beside PyTorch's cuDNN
# SDPA, the KV transfer with the bounded pack, then the parts' own scripts
# (decode9, indexer2) when given. Logs under $OUT/final/, summary last.
# (run the parts after it through scripts/s3/round.sh)
#   OUT=... bash scripts/s3/final.sh <build-dir>
set -u
B=${1:?build dir}
O="${OUT:-/tmp/out}/final"; mkdir -p "$O"
export LD_LIBRARY_PATH="$PWD/$B:$PWD/$B/rt:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# cuBLAS (the decompression GEMMs): the toolkit's, else the pip wheel's beside PyTorch.
if [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ]; then
  CUBLAS_DIR=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null)
  [ -n "$CUBLAS_DIR" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$CUBLAS_DIR"
fi
T0=$(date +%s); step() { echo "=== $* (t+$(( $(date +%s) - T0 ))s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader | tee "$O/gpu.txt"
step "all GPU tests"
timeout 150 "$B/mla_tests_gpu" --gtest_brief=1 >"$O/gpu_tests.log" 2>&1
TEST_RC=$?; echo "rc=$TEST_RC"; grep -E "FAILED|PASSED|tests ran|Failure" "$O/gpu_tests.log" | head -20
step "memcheck (small)"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/mla_tests_gpu" --gtest_brief=1 \
  --gtest_filter='DecodeGpu.SanitizerSmall*:AppendGpu.*:DsaGpu.IndexerLogitsDecode*:DsaGpu.TopkMatches*:DsaGpu.SparseDecodeApi*:PrefillGpu.QueriesThatSeeNoKey*:PrefillGpu.AttentionRaggedBatchWithPrefixes' \
  >"$O/memcheck.log" 2>&1
MEM_RC=$?; echo "rc=$MEM_RC"; grep -E "ERROR SUMMARY" "$O/memcheck.log" | tail -2
step "racecheck (decode small, TMA path)"
timeout 30 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/mla_tests_gpu" --gtest_brief=1 \
  --gtest_filter='DecodeGpu.SanitizerSmall*' >"$O/racecheck.log" 2>&1
RACE_RC=$?; echo "rc=$RACE_RC"; grep -E "RACECHECK SUMMARY" "$O/racecheck.log" | tail -2
step "prefill suite + cuDNN SDPA"
timeout 70 "$B/mla_bench_prefill" --json "$O/bench_prefill.json" >"$O/bench_prefill.log" 2>&1
echo "rc=$?"
timeout 60 python3 bench/peers/torch_sdpa.py --json "$O/torch_sdpa.json" >"$O/torch_sdpa.log" 2>&1
echo "rc=$?"
step "absorbed vs non-absorbed crossover (the prefill kernel changed)"
timeout 40 "$B/mla_bench_prefill" --crossover --json "$O/crossover.json" >"$O/crossover.log" 2>&1
echo "rc=$?"
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  step "KV transfer (bounded pack, spanning messages, 256 MiB staging)"
  P=29800
  for cfg in "x128k --tokens 131072 --layers 8" "x16k --tokens 16384 --layers 61"; do
    set -- $cfg; name=$1; shift; P=$((P + 1))
    for r in 0 1; do
      RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$P timeout 40 \
        "$B/mla_disagg" "$@" --indexer --json "$O/xfer_$name.json" >"$O/xfer_$name.r$r.log" 2>&1 &
    done
    wait
  done
fi
step "done with the common part"
echo "##### summary"
echo "tests rc=$TEST_RC memcheck rc=$MEM_RC racecheck rc=$RACE_RC"
grep -E "^prefill-|ceiling" "$O/bench_prefill.log"
grep -E "^peer-" "$O/torch_sdpa.log"
tail -9 "$O/crossover.log"
grep -h -E "transfer alone|differ" "$O"/xfer_*.r1.log 2>/dev/null
