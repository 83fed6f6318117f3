#!/usr/bin/env bash
# Device script of the v7 decode work (docs/perf-log.md v7), from the repo root.
# Carried: build-v7c/{libmla.so,mla,mla_tests_gpu,rt/} and, for the stamps,
# build-v7c/stamps/libmla.so (a -DMLA_DECODE_STAMPS=ON build's library).
# Steps (names as arguments, default all): stamps tests race bench.
#   stamps: per-phase cycles of the first CTAs for each $STAMPS entry
#           "kernel:shape" (one bench call each).
#   tests:  WgmmaGpu.* + DecodeGpu.* with MLA_DECODE_KERNEL=each of $NEW.
#   race:   compute-sanitizer racecheck on DecodeGpu.SanitizerSmall*, each of $NEW.
#   bench:  $OLD and $NEW (a list) on $SHAPES, twice interleaved, --reps 10, JSON in $OUT.
set -u
B=${BUILD:-build-v7c}
OUT=${OUT:-/tmp/mla_out}
OLD=${OLD:-v6}
NEW=${NEW:-v7}
STAMPS=${STAMPS:-"v4stamps:b128 h128 s_q1 L32K bf16|v7stamps:b128 h128 s_q1 L32K bf16"}
SHAPES=${SHAPES:-"b128 h128 s_q1 L4K bf16|b128 h128 s_q1 L32K bf16|b128 h16 s_q1 L32K bf16"}
STEPS=${*:-stamps tests race bench}
mkdir -p "$OUT"
CUBLAS_DIR=$(dirname "$(find /usr/local/cuda* /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
LIBS="$PWD/$B/rt:${CUBLAS_DIR:-.}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export LD_LIBRARY_PATH="$PWD/$B:$LIBS"
T0=$(date +%s)
step() { echo "=== $* (t+$(($(date +%s) - T0))s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader

only_args() {  # "a|b" -> --only a --only b
  local IFS='|'
  for s in $1; do printf '%s\n' --only "$s"; done
}

for st in $STEPS; do
  case $st in
  stamps)
    IFS='|' read -ra SL <<<"$STAMPS"
    for ks in "${SL[@]}"; do
      k=${ks%%:*} s=${ks#*:}
      step "stamps $k $s"
      LD_LIBRARY_PATH="$PWD/$B/stamps:$LIBS" MLA_DECODE_KERNEL=$k timeout 60 "$B/mla" bench \
        decode --only "$s" --reps 5 >"$OUT/stamps.tmp" 2>&1
      grep "^stamps" "$OUT/stamps.tmp" | tail -6
    done
    rm -f "$OUT/stamps.tmp"
    ;;
  tests)
    for k in $NEW; do
      step "tests WgmmaGpu.* DecodeGpu.* ($k)"
      MLA_DECODE_KERNEL=$k timeout 150 "$B/mla_tests_gpu" --gtest_filter='DecodeGpu.*:WgmmaGpu.*' \
        --gtest_brief=1 2>&1 | grep -E "FAIL|Failure|tests ran|PASSED|rel [0-9.e+-]+ *$" | tail -8
    done
    ;;
  race)
    for k in $NEW; do
      step "racecheck DecodeGpu.SanitizerSmall* ($k)"
      MLA_DECODE_KERNEL=$k timeout 150 compute-sanitizer --tool racecheck "$B/mla_tests_gpu" \
        --gtest_filter='DecodeGpu.SanitizerSmall*' 2>&1 | tail -3
    done
    ;;
  bench)
    mapfile -t ONLY < <(only_args "$SHAPES")
    n=0
    for k in $OLD $NEW $OLD $NEW; do  # interleaved twice: drift shows as old/old spread
      n=$((n + 1))
      step "bench $k"
      MLA_DECODE_KERNEL=$k timeout 90 "$B/mla" bench decode "${ONLY[@]}" --reps 10 \
        --json "$OUT/bench_${n}_$k.json" 2>&1 | grep -vE "^suite|^$" | cut -c1-140
    done
    ;;
  esac
done
step "end"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
