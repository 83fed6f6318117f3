#!/usr/bin/env bash
# The mla CLI as a user meets it, on a machine without a GPU: each case runs the binary and
# checks the exit code and what it prints (issue 20's CLI items among them).
#   tests/cli/cli_checks.sh path/to/mla [source-dir]
set -uo pipefail
mla=$1
src=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect NAME RC PATTERN -- ARGS...: exit code RC and PATTERN (grep -E) in stdout+stderr.
expect() {
  local name=$1 rc=$2 pattern=$3
  shift 4
  local out got
  out=$("$mla" "$@" 2>&1)
  got=$?
  if [ "$got" != "$rc" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: mla $* -> exit $got (want $rc), output:"
    sed 's/^/    /' <<<"$out" | head -n 20
    echo "    (wanted /$pattern/)"
    failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}

expect version 0 '^mla [0-9]+\.[0-9]+\.[0-9]+ \(libmla' -- --version
expect unknown-subcommand 109 "unknown subcommand 'frobnicate'; the subcommands are: plan, bench, check" -- frobnicate
expect unknown-bench-suite 109 "mla bench: unknown subcommand 'nosuch'.*decode, sparse, indexer, topk, prefill, layer" -- bench nosuch
expect no-subcommand 106 'A subcommand is required' --
# int64 values that do not fit are errors naming the value, never saturated.
expect batch-overflow 105 "--batch.*'99999999999999999999' does not fit a 64-bit integer" -- plan --batch 99999999999999999999
expect context-overflow 105 "--context.*'-99999999999999999999' does not fit" -- plan --context -99999999999999999999
expect octal-is-not-decimal 105 "--context.*'010' is not a decimal integer" -- plan --context 010
expect int-option-range 105 "--topk.*'4294967296' is out of range" -- plan --topk 4294967296
expect double-overflow 105 "--mem-util.*'1e999' does not fit a double" -- plan --mem-util 1e999
expect double-nan 105 "--mem-util.*'nan' is not a finite number" -- plan --mem-util nan
# Bad values name the option and the value as given.
expect unknown-model 2 "model 'nosuch' is not known; known models: deepseek-v3" -- plan --model nosuch
expect unknown-gpu 2 "gpu 'nosuch' is not known; known gpus: h100" -- plan --gpu nosuch
expect tp-zero 2 'tp = 0 must be >= 1' -- plan --tp 0
expect mem-util-past-one 2 'mem_util = 2 must be in \(0, 1\]' -- plan --mem-util 2
expect calibrate-missing-file 2 "--calibrate: cannot open '$tmp/none.json'" -- plan --calibrate "$tmp/none.json"
expect unknown-option 109 'not expected: --bogus' -- plan --bogus
# --json --list prints JSON.
expect list-json 0 '"gpus": \[' -- plan --list --json
out=$("$mla" plan --list --json) && python3 -c 'import json,sys; d=json.load(sys.stdin); assert {"gpus","models"} <= d.keys() and d["gpus"]' <<<"$out" \
  && echo "ok   list-json-parses" || { echo "FAIL list-json-parses"; failures=$((failures + 1)); }
# Flags the mode ignores are refused.
expect list-excludes-batch 108 'excludes' -- plan --list --batch 4
expect seed-check-excludes-gpu 108 'excludes' -- plan --seed-check --gpu h100
expect seed-check-excludes-list 108 'excludes' -- plan --seed-check --list
expect seed-check-runs 0 'seed' -- plan --seed-check
# A plan where nothing fits says so, not "the batch fits".
expect nothing-fits 0 'KV precision +none fits' -- plan --model deepseek-v3 --gpu h100 --weight-shards 1
out=$("$mla" plan --model deepseek-v3 --gpu h100 --weight-shards 1 2>&1)
if grep -q 'the batch fits' <<<"$out"; then
  echo "FAIL nothing-fits-not-batch-fits"; failures=$((failures + 1))
else echo "ok   nothing-fits-not-batch-fits"; fi
# mla check: without a GPU it says so with its own exit code; with one, every check passes.
expect check-bad-seed 105 "--seed.*'-1' is out of range" -- check --seed -1
if nvidia-smi -L >/dev/null 2>&1 && "$mla" --version | grep -q 'CUDA kernels for'; then
  expect check-on-gpu 0 'mla check: all [0-9]+ checks passed' -- check
  gpu=1
else
  expect check-no-gpu 77 'no CUDA GPU' -- check
  gpu=0
fi
# Every bench suite has --help with --json.
for s in decode sparse indexer topk prefill layer; do
  expect "bench-$s-help" 0 '--json' -- bench "$s" --help
done
[ "$gpu" = 1 ] || expect bench-no-gpu 77 'no CUDA GPU' -- bench decode

# --calibrate takes what `mla bench --json` writes: a decode document (two shapes on an
# H200, measured times) is fitted into a calibration and the plan uses it.
cat >"$tmp/bench.json" <<'JSON'
{"mla_bench": 1, "suite": "decode", "device": "NVIDIA H200", "gpu": "h200",
 "results": [
  {"name": "b64 h128 s_q1 L4K", "time_us": 200.0, "flops": 7.2e10, "bytes": 3.1e8,
   "calibration": {"kernel": "decode", "format": "bf16", "h_q": 128, "compute": "bf16"}},
  {"name": "b64 h128 s_q1 L16K", "time_us": 700.0, "flops": 2.9e11, "bytes": 1.2e9,
   "calibration": {"kernel": "decode", "format": "bf16", "h_q": 128, "compute": "bf16"}},
  {"name": "diagnostic row without calibration", "time_us": 1.0}]}
JSON
expect calibrate-from-bench 0 'decode +bf16 +h_q 128 +2 point' -- plan --calibrate "$tmp/bench.json"
base=$("$mla" plan --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print([f for f in d["formats"] if f["name"]=="mla-bf16"][0]["step"]["predicted_s"])')
cal=$("$mla" plan --json --calibrate "$tmp/bench.json" 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print([f for f in d["formats"] if f["name"]=="mla-bf16"][0]["step"]["predicted_s"])')
if python3 -c "import sys; sys.exit(0 if float('$cal') > float('$base') else 1)"; then
  echo "ok   calibrated-prediction-slower-than-floor ($base -> $cal s)"
else
  echo "FAIL calibrated-prediction-slower-than-floor ($base -> $cal s)"; failures=$((failures + 1))
fi
expect calibrate-wrong-gpu 2 "measured on 'NVIDIA H200'.*--gpu h100" -- plan --gpu h100 --calibrate "$tmp/bench.json"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    r.pop("calibration", None)
json.dump(d, open(sys.argv[2], "w"))' "$tmp/bench.json" "$tmp/nocal.json"
expect calibrate-no-rows 2 'no result carries a "calibration" key' -- plan --calibrate "$tmp/nocal.json"
# The committed calibration file still loads.
expect calibrate-file 0 'predicted' -- plan --calibrate "$src/bench/results/2026-11-29-h200-calibration-v2.json"

if [ "$failures" -ne 0 ]; then
  echo "$failures CLI check(s) failed"
  exit 1
fi
echo "all CLI checks passed"
