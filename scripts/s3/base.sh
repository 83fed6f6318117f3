#!/usr/bin/env bash
# Session-3 GPU round, the lead's part: the DSA tests after last session's
# unverified cleanups, the unrun top-k sweep, and (two GPUs) the KV transfer
# with the pack stream against the serial staging.
#   OUT=... bash scripts/s3/base.sh <build-dir> [<nccl-build-dir>]
set -u
B=${1:-build}; X=${2:-}
O="${OUT:-/tmp/out}/base"; mkdir -p "$O"
export LD_LIBRARY_PATH="$PWD/$B:$PWD/$B/rt:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
T0=$(date +%s); step() { echo "=== $* (t+$(( $(date +%s) - T0 ))s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
step "DsaGpu.* + LayerGpu.*"
timeout 150 "$B/mla_tests_gpu" --gtest_brief=1 --gtest_filter='DsaGpu.*:LayerGpu.*' >"$O/tests.log" 2>&1
echo "tests rc=$?"; grep -E "FAILED|PASSED|tests ran" "$O/tests.log" | head -12
step "topk-sweep"
timeout 90 "$B/mla_bench_dsa" "$O/topk_sweep.json" topk-sweep >"$O/topk_sweep.log" 2>&1
echo "topk-sweep rc=$?"; tail -12 "$O/topk_sweep.log"
if [ -n "$X" ] && [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  export LD_LIBRARY_PATH="$PWD/$X:$PWD/$X/rt:$LD_LIBRARY_PATH"
  P=29600
  disagg() {  # name, args...
    local name=$1; shift; P=$((P + 1))
    for r in 0 1; do
      RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$P \
        timeout 120 "$X/mla_disagg" "$@" --json "$O/disagg_$name.json" >"$O/disagg_$name.r$r.log" 2>&1 &
    done
    wait
    echo "--- $name"; grep -E "staging|transfer alone|hidden|differ" "$O/disagg_$name.r1.log"
  }
  step "disagg 16K x 61 layers bf16 + indexer: pipelined, serial"
  disagg p16k --tokens 16384 --layers 61 --format bf16 --indexer
  disagg s16k --tokens 16384 --layers 61 --format bf16 --indexer --serial-staging
  step "disagg 128K x 8 layers: pipelined; fp8 16K pipelined; dst contiguous"
  disagg p128k --tokens 131072 --layers 8 --format bf16 --indexer
  disagg pfp8 --tokens 16384 --layers 61 --format fp8 --indexer
  disagg pcontig --tokens 16384 --layers 61 --format bf16 --indexer --dst-contiguous
fi
step "done"
