#!/usr/bin/env bash
# Builds mla._torch_ext (src/python/mla_torch_ext.cpp) beside a libmla.so: the C++
# hot path of torch CUDA decode calls (docs/python.md). It serves one torch
# major.minor and one Python minor; mla falls back to mla._ext without it.
#   usage: scripts/build_torch_ext.sh [python] [build-dir]
# The torch headers and libraries come from `python`'s torch, or from the torch
# package folder MLA_TORCH_DIR (its headers only need to match the torch version the
# module will run with; MLA_TORCH_CXX11_ABI: 1 for the PyPI wheels of torch >= 2.7).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-python3}"
OUT="${2:-build}"
if [ -n "${MLA_TORCH_DIR:-}" ]; then
  TORCH_DIR="$MLA_TORCH_DIR"
  ABI="${MLA_TORCH_CXX11_ABI:-1}"
  read -r PY_INC EXT_SUFFIX < <("$PY" -c 'import sysconfig
print(sysconfig.get_paths()["include"], sysconfig.get_config_var("EXT_SUFFIX"))')
else
  read -r TORCH_DIR PY_INC ABI EXT_SUFFIX < <("$PY" -c 'import os, sysconfig, torch
print(os.path.dirname(torch.__file__), sysconfig.get_paths()["include"],
      int(torch._C._GLIBCXX_USE_CXX11_ABI), sysconfig.get_config_var("EXT_SUFFIX"))')
fi
CUDA_INC="${CUDA_HOME:-/usr/local/cuda}/include"
set -x
${CXX:-g++} -std=c++17 -O2 -fPIC -shared -fvisibility=hidden -Wall -Wno-unused-function \
  -D_GLIBCXX_USE_CXX11_ABI="$ABI" -Iinclude -I"$PY_INC" -I"$TORCH_DIR/include" \
  -I"$TORCH_DIR/include/torch/csrc/api/include" -I"$CUDA_INC" \
  src/python/mla_torch_ext.cpp -o "$OUT/_torch_ext$EXT_SUFFIX" \
  -L"$TORCH_DIR/lib" -lc10 -lc10_cuda -ltorch_cpu -ltorch_python -Wl,-rpath,"$TORCH_DIR/lib" -ldl
