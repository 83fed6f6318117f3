#!/usr/bin/env bash
# Session 3's last GPU check: the default decode (v8, flags now written by the
# arriving thread) under racecheck, the DSA tests with indexer v2 the default,
# and the transfer with the pack kernel unbounded again.
#   OUT=... bash scripts/s3/verify.sh <build-dir>
set -u
B=${1:?build dir}
O="${OUT:-/tmp/out}/verify"; mkdir -p "$O"
export LD_LIBRARY_PATH="$PWD/$B:$PWD/$B/rt:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
T="$B/mla_tests_gpu"
timeout 40 "$T" --gtest_brief=1 --gtest_filter='DecodeGpu.*:WgmmaGpu.*' >"$O/decode.log" 2>&1
echo "decode tests rc=$?"; grep -E "PASSED|FAILED" "$O/decode.log" | head -5
timeout 40 compute-sanitizer --tool racecheck --error-exitcode 9 "$T" --gtest_brief=1 \
  --gtest_filter='DecodeGpu.SanitizerSmall*' >"$O/racecheck.log" 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|Race reported" "$O/racecheck.log" | head -4
timeout 60 "$T" --gtest_brief=1 --gtest_filter='DsaGpu.*:DsaStepGpu.*:LayerGpu.*' >"$O/dsa.log" 2>&1
echo "dsa tests rc=$?"; grep -E "PASSED|FAILED" "$O/dsa.log" | head -5
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29901 timeout 45 \
      "$B/mla_disagg" --tokens 131072 --layers 8 --indexer --json "$O/xfer_128k.json" \
      >"$O/xfer_128k.r$r.log" 2>&1 &
  done
  wait
  grep -E "staging|ncclSend|transfer alone|hidden|differ" "$O/xfer_128k.r1.log"
fi
