#!/usr/bin/env bash
# Session-3: the KV transfer variants on two GPUs (bench/results/...-xfer).
#   OUT=... bash scripts/s3/xfer.sh <build-dir with mla_disagg> [staging]
set -u
X=${1:-build}
O="${OUT:-/tmp/out}/xfer"; mkdir -p "$O"
export LD_LIBRARY_PATH="$PWD/$X:$PWD/$X/rt:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
P=29700
disagg() {  # name, args...
  local name=$1; shift; P=$((P + 1))
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$P \
      timeout 120 "$X/mla_disagg" "$@" --json "$O/$name.json" >"$O/$name.r$r.log" 2>&1 &
  done
  wait
  echo "--- $name"; grep -E "staging|ncclSend|transfer alone|hidden|differ" "$O/$name.r1.log"
}
if [ "${2:-}" = "staging" ]; then  # the staging buffer's size (two slots of half)
  for mib in 256 512 1024; do
    disagg span128k_st$mib --tokens 131072 --layers 8 --format bf16 --indexer --staging-mib $mib
  done
  disagg span16k_st512 --tokens 16384 --layers 61 --format bf16 --indexer --staging-mib 512
  disagg span16k_fp8_st512 --tokens 16384 --layers 61 --format fp8 --indexer --staging-mib 512
  exit 0
fi
disagg span128k --tokens 131072 --layers 8 --format bf16 --indexer
disagg span16k --tokens 16384 --layers 61 --format bf16 --indexer
disagg span16k_fp8 --tokens 16384 --layers 61 --format fp8 --indexer
disagg span128k_serial --tokens 131072 --layers 8 --format bf16 --indexer --serial-staging
disagg perlayer128k --tokens 131072 --layers 8 --format bf16 --indexer --per-layer-messages --serial-staging
