#!/usr/bin/env bash
# Install what mla needs (Debian + PyPI packages by name), configure and build.
# Idempotent; used by the README's first command and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
if command -v apt-get >/dev/null; then
  pkgs="cmake ninja-build ccache g++ libgtest-dev libfmt-dev nlohmann-json3-dev libcli11-dev python3-pip python3-dev"
  missing=""
  for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -n "$missing" ]; then
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
  fi
fi
python3 -m pip install -q --disable-pip-version-check numpy ml_dtypes pytest
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
