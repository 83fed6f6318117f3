#!/usr/bin/env bash
# GPU checks of an existing build, by suite. Builds nothing: run it from the repository root
# after `cmake --build build` (or with a build folder carried to the GPU machine).
#
#   bash scripts/gpu_check.sh SUITE...      SUITE: decode sparse indexer topk prefill layer
#                                                  python sanitize bad-input all
#
#   decode .. layer  the GPU tests of that family (mla_tests_gpu with a gtest filter)
#   python           pytest python/tests on the built library (the GPU twins run on torch CUDA
#                    tensors when torch sees a GPU)
#   sanitize         compute-sanitizer memcheck and racecheck on the small tests of the kernel
#                    families named on the same command line (all of them when none is named)
#   bad-input        issue 20's bad-input table on CUDA tensors under compute-sanitizer memcheck:
#                    the C++ GPU tests that feed bad device values and bad arguments, then
#                    python/tests/test_bad_inputs_gpu.py on torch CUDA tensors (torch's caching
#                    allocator off, so every tensor's bounds are its own)
#   all              every family, python and sanitize
#
# Environment: BUILD (default build), OUT (logs; default /tmp/mla-gpu-check), TIMEOUT (seconds
# per step, default 300), FILTER_<SUITE> / SMALL_<SUITE> (override a suite's test filter or
# its sanitizer filter, e.g. FILTER_DECODE='DecodeGpu.GridOfEdges').
# Exit status: 0 when every step passed, 1 otherwise; a summary line per step comes last.
set -u
BUILD=${BUILD:-build}
OUT=${OUT:-/tmp/mla-gpu-check}
TIMEOUT=${TIMEOUT:-300}
FAMILIES="decode sparse indexer topk prefill layer"

# Test filters. Both the suite names of the family folders and the older DsaGpu.* names match,
# so a renamed test is still selected; a filter that selects nothing fails the step.
filter_decode='*DecodeGpu*.*:Decode*Gpu.*:WgmmaGpu.*:AppendGpu.*:KvCache*Gpu.*'
filter_sparse='*SparseGpu*.*:Sparse*Gpu.*:DsaGpu.Sparse*'
filter_indexer='Indexer*Gpu.*:DsaGpu.Indexer*:DsaGpu.Fp8Indexer*'
filter_topk='Topk*Gpu.*:DsaGpu.Topk*'
filter_prefill='Prefill*Gpu.*'
filter_layer='Layer*Gpu.*:DsaStep*Gpu.*'
# Sanitizer filters: small cases of each family (a sanitizer run is 10-100x slower).
small_decode='*DecodeGpu.SanitizerSmall*:AppendGpu.BytesIdentical*'
small_sparse='*SparseGpu.AllKeysEqualsDenseDecode/*:SparseGpuOneWay.SanitizerSmall:SparseGpuSectorPairs.SanitizerSmall'
small_indexer='IndexerGpu.AppendMatchesReferenceBytes:IndexerGpu.QueryQuantisation*:IndexerGpu.LogitsDecodeSmall:IndexerGpu.LogitsDecodeSkipsInvalidPages:IndexerGpu.LogitsDecodeEmptyCache:IndexerGpu.LogitsPrefill*'
small_topk='TopkGpu.SmallForSanitizer'
small_prefill='PrefillGpu.AttentionRaggedBatchWithPrefixes:PrefillGpu.QueriesThatSeeNoKey*:PrefillGpu.ChunkedEqualsAllAtOnceFp8Cache'
small_layer='*LayerGpu.SmallConfig*'
race_families="decode sparse indexer topk prefill"
# The C++ half of the bad-input table on the GPU (bad page ids, lengths, arguments).
filter_bad_input='*DecodeGpu*.BadDeviceValues*:DecodeGpuArgs.*:IndexerGpu.LogitsDecodeSkipsInvalidPages:IndexerGpu.LogitsDecodeEmptyCache:PrefillGpu.ChunkedRejectsBadArguments:PrefillGpu.PublicMhaPrefillRejectsBadSeqlens:PrefillGpu.QueriesThatSeeNoKey*:SparseGpuArgs.*:TopkGpu.RejectsWhatAKernelCannotTake:AppendGpu.Rejects*:DsaStepGpu.WorkspaceTooSmall'

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }
[ $# -eq 0 ] && { usage; exit 2; }

want_python=0 want_sanitize=0 want_bad_input=0 families=""
for a in "$@"; do
  case $a in
  decode | sparse | indexer | topk | prefill | layer) families="$families $a" ;;
  python) want_python=1 ;;
  sanitize) want_sanitize=1 ;;
  bad-input) want_bad_input=1 ;;
  all) families=$FAMILIES want_python=1 want_sanitize=1 want_bad_input=1 ;;
  -h | --help) usage; exit 0 ;;
  *) echo "gpu_check.sh: unknown suite '$a' (decode sparse indexer topk prefill layer python sanitize bad-input all)" >&2
     exit 2 ;;
  esac
done
san_families=${families:-$FAMILIES}

TESTS="$BUILD/mla_tests_gpu"
if [ ! -x "$TESTS" ] || [ ! -f "$BUILD/libmla.so" ]; then
  echo "gpu_check.sh: no $TESTS or $BUILD/libmla.so; build first: cmake --build $BUILD" >&2
  exit 2
fi
mkdir -p "$OUT"
# A carried build brings the runtime libraries the GPU image lacks in $BUILD/rt.
export LD_LIBRARY_PATH="$PWD/$BUILD:$PWD/$BUILD/rt:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ldd "$TESTS" | grep -i "not found" && echo "MISSING LIBRARIES: carry them in $BUILD/rt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
"$TESTS" --gtest_list_tests >/dev/null 2>&1
if [ $? -eq 77 ]; then echo "gpu_check.sh: no CUDA device ($TESTS exits 77)" >&2; exit 77; fi

T0=$(date +%s)
SUMMARY=()
FAILED=0
step() { echo; echo "=== $* (t+$(($(date +%s) - T0))s)"; }
record() {  # record NAME RC
  local verdict=ok
  [ "$2" -ne 0 ] && verdict="FAILED (rc $2$([ "$2" -eq 124 ] && echo ', timed out'))" && FAILED=1
  SUMMARY+=("$1: $verdict")
}
suite_var() { local v="$1_$2"; local o; o=$(echo "$1_$2" | tr a-z A-Z); echo "${!o:-${!v}}"; }
count_tests() { "$TESTS" --gtest_list_tests --gtest_filter="$1" 2>/dev/null | grep -c '^  '; }

for f in $families; do
  flt=$(suite_var filter "$f")
  n=$(count_tests "$flt")
  step "$f: $n GPU tests ($flt)"
  if [ "$n" -eq 0 ]; then
    echo "no test matches the $f filter"
    record "$f tests" 3
    continue
  fi
  timeout "$TIMEOUT" "$TESTS" --gtest_brief=1 --gtest_filter="$flt" >"$OUT/tests_$f.log" 2>&1
  rc=$?
  grep -E "FAILED|Failure|PASSED|tests ran" "$OUT/tests_$f.log" | tail -15
  record "$f tests ($n)" $rc
done

if [ $want_sanitize -eq 1 ]; then
  for f in $san_families; do
    flt=$(suite_var small "$f")
    tools=memcheck
    case " $race_families " in *" $f "*) tools="memcheck racecheck" ;; esac
    for tool in $tools; do
      step "$f: compute-sanitizer $tool ($flt)"
      timeout "$TIMEOUT" compute-sanitizer --tool "$tool" --error-exitcode 9 "$TESTS" \
        --gtest_brief=1 --gtest_filter="$flt" >"$OUT/${tool}_$f.log" 2>&1
      rc=$?
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY|tests ran|FAILED" "$OUT/${tool}_$f.log" | tail -4
      record "$f $tool" $rc
    done
  done
fi

if [ $want_bad_input -eq 1 ]; then
  flt=$(suite_var filter bad_input)
  step "bad-input: compute-sanitizer memcheck, $(count_tests "$flt") C++ GPU tests ($flt)"
  timeout "$TIMEOUT" compute-sanitizer --tool memcheck --error-exitcode 9 "$TESTS" \
    --gtest_brief=1 --gtest_filter="$flt" >"$OUT/memcheck_bad_input.log" 2>&1
  rc=$?
  grep -E "ERROR SUMMARY|tests ran|FAILED" "$OUT/memcheck_bad_input.log" | tail -4
  record "bad-input C++ memcheck" $rc
  # (--report-api-errors no: torch's start-up probes fail some runtime calls on purpose;
  # a failed call of ours raises in Python and fails the test instead)
  step "bad-input: compute-sanitizer memcheck, pytest python/tests/test_bad_inputs_gpu.py"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 MLA_LIBRARY="$PWD/$BUILD/libmla.so" \
    PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" \
    timeout "$TIMEOUT" compute-sanitizer --tool memcheck --error-exitcode 9 \
    --report-api-errors no python3 -m pytest -q -rs -p no:cacheprovider \
    python/tests/test_bad_inputs_gpu.py >"$OUT/memcheck_bad_input_python.log" 2>&1
  rc=$?
  grep -E "ERROR SUMMARY|passed|failed|SKIPPED" "$OUT/memcheck_bad_input_python.log" | tail -6
  # A run where torch saw no GPU skips every test: that is not a pass.
  if grep -q "SKIPPED" "$OUT/memcheck_bad_input_python.log" && \
      ! grep -qE "[0-9]+ passed" "$OUT/memcheck_bad_input_python.log"; then rc=3; fi
  record "bad-input python memcheck" $rc
fi

if [ $want_python -eq 1 ]; then
  step "python: pytest python/tests on $BUILD/libmla.so"
  MLA_LIBRARY="$PWD/$BUILD/libmla.so" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" \
    timeout "$TIMEOUT" python3 -m pytest -q -rs python/tests >"$OUT/pytest.log" 2>&1
  rc=$?
  grep -E "passed|failed|SKIPPED" "$OUT/pytest.log" | tail -5
  record "python" $rc
fi

step "summary (logs in $OUT)"
printf '%s\n' "${SUMMARY[@]}"
exit $FAILED
