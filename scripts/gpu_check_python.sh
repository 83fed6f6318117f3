#!/usr/bin/env bash
# The GPU machine's run of the Python package, from the repo root with a carried
# CUDA build: the pytest suite (its GPU twins in python/tests/test_gpu.py run on
# torch CUDA tensors), then `python -m mla.bench compare --quick`, and the
# comparison's Markdown table last. Logs, JSON, plots go to $OUT.
#   Usage: OUT=... bash scripts/gpu_check_python.sh [build-dir]   (default: build)
# The carried build brings libfmt (not on the GPU image) and libcudart in <build>/rt
# (some scripts of this repo call it rtlib: both are searched).
set -u
BUILD=${1:-build}
OUT=${OUT:-/tmp/mla_out}
mkdir -p "$OUT"
ROOT=$PWD
export MLA_LIBRARY="$ROOT/$BUILD/libmla.so"
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="$ROOT/$BUILD:$ROOT/$BUILD/rt:$ROOT/$BUILD/rtlib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1
T0=$(date +%s)
step() { echo; echo "=== $* (t+$(( $(date +%s) - T0 ))s)"; }

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
if [ ! -f "$MLA_LIBRARY" ]; then
  echo "no $MLA_LIBRARY: carry a CUDA build dir (cmake --build $BUILD) and name it"
  exit 1
fi
ldd "$MLA_LIBRARY" | grep -i "not found" && echo "MISSING LIBRARIES (carry them in $BUILD/rt)"
python3 -c "import mla, torch; print('mla', mla.version(), 'from', mla.library_path(),
'cuda build', mla.built_with_cuda(), '| torch', torch.__version__,
'cuda', torch.cuda.is_available())" || echo "IMPORT FAILED"

step "pytest python/tests (CPU tests and the GPU twins)"
timeout 300 python3 -m pytest -rs python/tests 2>&1 | tee "$OUT/pytest.log" | tail -40
PYTEST_RC=${PIPESTATUS[0]}

step "python -m mla.bench compare --quick"
# Files come back from $OUT only 8 at a time: compare.json, compare.md, one
# throughput.png with every suite, roofline.png; stdout (the table again) stays here.
timeout 240 python3 -m mla.bench compare --quick --plots combined --out "$OUT/compare" \
  2>"$OUT/compare.err" >/tmp/mla_compare_stdout.log
COMPARE_RC=$?
tail -15 "$OUT/compare.err" | tr '\r' '\n' | grep -v '^$' | tail -8

step "summary"
echo "pytest rc=$PYTEST_RC compare rc=$COMPARE_RC (124 = timed out)"
grep -E "passed|failed|GPU TESTS SKIPPED" "$OUT/pytest.log" | tail -3
echo
if [ -f "$OUT/compare/compare.md" ]; then
  cat "$OUT/compare/compare.md"
else
  echo "no comparison table ($OUT/compare/compare.md missing)"
fi
exit 0
