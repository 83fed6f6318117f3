#!/usr/bin/env bash
# The package as a user gets it, checked on a machine without a GPU (CI runs this after
# the tests; it works on the GPU machine too):
#  1. `cmake --install` of a built tree, a find_package(mla) consumer (examples/consumer)
#     built against the installed copy and run, and the installed CLI: --version, check,
#     bench <suite> --help for every suite;
#  2. the wheel built in one fresh virtual environment, installed into another, imported
#     outside the source tree and the CPU tests (python/tests) run against the installed
#     copy; what its libmla.so links, `auditwheel show` and `python -m mla check`.
#   bash scripts/package_check.sh [build-dir] [--cpu-wheel]
# build-dir: a configured and built tree (default: build). The wheel is built as that tree
# was (with CUDA when it has CUDA) in build-wheel/ (build-wheel-cpu/), beside it: the compile commands are then
# the main build's, so ccache serves them (CI: about 2 minutes for the CUDA wheel after the
# main build, instead of compiling every kernel again). --cpu-wheel: a CPU-only wheel
# (-C cmake.define.MLA_ENABLE_CUDA=OFF) whatever the tree has.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
B=build
wheel_cuda=
for a in "$@"; do
  case $a in
    --cpu-wheel) wheel_cuda=OFF ;;
    -*) echo "package_check.sh: unknown option $a" >&2; exit 2 ;;
    *) B=$a ;;
  esac
done
B=$(cd "$B" && pwd)
W=$B/package-check  # everything this script makes
py=${PYTHON:-python3}
if [ -z "$wheel_cuda" ]; then
  wheel_cuda=OFF
  grep -q '^CMAKE_CUDA_COMPILER:.*nvcc' "$B/CMakeCache.txt" && wheel_cuda=ON
fi
# As scripts/setup.sh: the same ccache settings make the wheel's compiles cache hits.
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}" CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
start=$(date +%s)
step() { echo "== $* ($(($(date +%s) - start)) s)"; }

step "cmake --install and a find_package(mla) consumer"
rm -rf "$W"
mkdir -p "$W"
cmake --install "$B" --prefix "$W/prefix" >/dev/null
cmake -S examples/consumer -B "$W/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$W/prefix" >/dev/null
cmake --build "$W/consumer" >/dev/null
"$W/consumer/mla_consumer"

step "the installed CLI"
mla="$W/prefix/bin/mla"
"$mla" --version
set +e
"$mla" check
rc=$?
set -e
case $rc in
  0) echo "(mla check: every kernel agrees with the CPU reference on this GPU)" ;;
  77) echo "(mla check: exit 77, no CUDA GPU here, as expected on CI)" ;;
  *) echo "mla check failed with exit code $rc" >&2; exit 1 ;;
esac
for s in decode sparse indexer topk prefill layer; do
  "$mla" bench "$s" --help | grep -q -- '--json' || { echo "mla bench $s --help: no --json" >&2; exit 1; }
done
echo "mla bench <suite> --help: decode sparse indexer topk prefill layer"
"$mla" plan --context 8192 >"$W/plan.txt"  # (not piped into head: SIGPIPE under pipefail)
head -n 1 "$W/plan.txt"

step "wheel (CUDA $wheel_cuda): build in one fresh venv"
wheel_build=$root/build-wheel
[ "$wheel_cuda" = ON ] || wheel_build=$root/build-wheel-cpu
"$py" -m venv "$W/venv-build"
"$W/venv-build/bin/python" -m pip install -q --disable-pip-version-check build
# Build progress stays visible (one line per compiled file). A fixed build directory
# lets ccache serve what an earlier run compiled.
"$W/venv-build/bin/python" -m build --wheel --outdir "$W/wheel" \
  -C build-dir="$wheel_build" -C build.verbose=true \
  -C cmake.define.MLA_ENABLE_CUDA="$wheel_cuda" . 2>&1 |
  grep --line-buffered -E '^\[[0-9]+/[0-9]+\]|Successfully built|rror' |
  sed -E -e 's#^(\[[0-9]+/[0-9]+\]) .* -c ([^ ]+)( -o [^ ]+)?$#\1 \2#' -e 's#^(\[[0-9]+/[0-9]+\]) .* -o ([^ ]+) .*#\1 \2#' \
    -e "s#$root/##"
whl=$(ls "$W"/wheel/mla-*.whl)
echo "wheel: $(basename "$whl") ($(du -h "$whl" | cut -f1))"

step "wheel: install into another fresh venv"
"$py" -m venv "$W/venv-use"
"$W/venv-use/bin/python" -m pip install -q --disable-pip-version-check "$whl" numpy ml_dtypes pytest auditwheel
echo "-- what libmla.so in the wheel needs:"
"$py" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("mla/libmla.so", sys.argv[2])' \
  "$whl" "$W/unpacked"
readelf -d "$W/unpacked/mla/libmla.so" | grep -E 'NEEDED|RUNPATH|RPATH'
if readelf -d "$W/unpacked/mla/libmla.so" | grep -E 'RUNPATH|RPATH' | grep -q '\[/'; then
  echo "libmla.so in the wheel carries an absolute RUNPATH" >&2
  exit 1
fi
echo "-- auditwheel show:"
"$W/venv-use/bin/auditwheel" show "$whl" || true
# Outside the source tree, with no MLA_LIBRARY: `import mla` is the installed copy.
(cd "$W" && env -u MLA_LIBRARY -u PYTHONPATH venv-use/bin/python -c \
  'import mla, os; print("import mla ->", os.path.dirname(mla.__file__), "| libmla", mla.version())')
(cd "$W" && env -u MLA_LIBRARY -u PYTHONPATH venv-use/bin/python -c \
  'import mla, sys; p = mla.library_path(); print("loaded", p); sys.exit("/site-packages/" not in p)')

# The wheel has no CLI: its self check is `python -m mla check` (the library's, as `mla check`).
set +e
(cd "$W" && env -u MLA_LIBRARY -u PYTHONPATH venv-use/bin/python -m mla check)
rc=$?
set -e
case $rc in
  0) echo "(python -m mla check: every kernel agrees with the CPU reference on this GPU)" ;;
  77) echo "(python -m mla check: exit 77, no CUDA GPU here, as expected on CI)" ;;
  *) echo "python -m mla check failed with exit code $rc" >&2; exit 1 ;;
esac

step "the CPU tests against the installed copy"
(cd "$W" && env -u MLA_LIBRARY -u PYTHONPATH venv-use/bin/python -m pytest -q -p no:cacheprovider \
  "$root/python/tests")
step "package check: ok"
