#!/usr/bin/env bash
# The package as a user gets it, checked on a machine without a GPU (CI runs this
# after the tests): `cmake --install` + a find_package(mla) consumer, and the wheel
# built in one fresh virtual environment, installed into another, imported and
# tested there (the CPU tests against the installed copy, not the source tree).
#   bash scripts/package_check.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
root=$PWD
py=${PYTHON:-python3}
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}" CCACHE_BASEDIR="$root"

echo "== cmake --install and a find_package(mla) consumer"
rm -rf "$B/prefix" "$B/consumer"
cmake --install "$B" --prefix "$B/prefix" >/dev/null
cmake -S examples/consumer -B "$B/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$root/$B/prefix" >/dev/null
cmake --build "$B/consumer" >/dev/null
"$B/consumer/mla_consumer"
"$B/prefix/bin/mla" --version

echo "== wheel: build in one fresh venv, install into another"
rm -rf "$B/venv-build" "$B/venv-use" "$B/wheel"
"$py" -m venv "$B/venv-build"
"$B/venv-build/bin/python" -m pip install -q --disable-pip-version-check build
# A fixed build directory so ccache serves the objects the main build compiled.
"$B/venv-build/bin/python" -m build --wheel --outdir "$B/wheel" \
  -C build-dir="$root/$B/wheel-build" -C build.verbose=true . 2>&1 |
  grep -E '^\[[0-9]+/[0-9]+\]|Successfully built|error' | tail -n 5
whl=$(ls "$B"/wheel/mla-*.whl)
"$py" -m venv "$B/venv-use"
"$B/venv-use/bin/python" -m pip install -q --disable-pip-version-check "$whl" numpy ml_dtypes pytest auditwheel
echo "-- what libmla.so in the wheel needs:"
unzip -o -q "$whl" 'mla/libmla.so' -d "$B/wheel/unpacked"
readelf -d "$B/wheel/unpacked/mla/libmla.so" | grep -E 'NEEDED|RUNPATH|RPATH'
echo "-- auditwheel show:"
"$B/venv-use/bin/auditwheel" show "$whl" || true
# Outside the source tree, with no MLA_LIBRARY: `import mla` is the installed copy.
(cd "$B" && env -u MLA_LIBRARY -u PYTHONPATH venv-use/bin/python -c \
  'import mla, os; print("import mla ->", os.path.dirname(mla.__file__))')
(cd "$B" && env -u MLA_LIBRARY -u PYTHONPATH venv-use/bin/python -m pytest -q -p no:cacheprovider \
  "$root/python/tests")
echo "package check: ok"
