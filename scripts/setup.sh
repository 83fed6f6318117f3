#!/usr/bin/env bash
# Install what mla needs (Debian + PyPI packages by name), configure and build.
# Idempotent; used by the README's first command and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
if command -v apt-get >/dev/null; then
  pkgs="cmake ninja-build ccache g++ libgtest-dev libfmt-dev nlohmann-json3-dev libcli11-dev python3-pip python3-venv"
  missing=""
  for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -n "$missing" ] && [ -n "$SUDO" ] && ! command -v sudo >/dev/null; then
    echo "setup: missing Debian packages:$missing; install them as root (apt-get install$missing) and run this again" >&2
    exit 1
  fi
  if [ -n "$missing" ]; then
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
  fi
fi
# Python packages go into a virtual environment (.venv): a stock Debian/Ubuntu
# Python refuses system-wide pip installs (PEP 668, "externally-managed-environment").
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating the virtual environment .venv"
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check numpy ml_dtypes pytest
# ccache with paths relative to the checkout: the wheel's build (scripts/package_check.sh,
# build-wheel/) then reuses these objects.
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}" CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$PWD/.venv/bin/python"
cmake --build build -j"$(nproc)"
