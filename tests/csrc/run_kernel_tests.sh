#!/usr/bin/env bash
# Builds and runs the task-kernel tests: every tests/csrc/test_kernels*.cpp, each its own binary,
# with the flags the CPU backend uses (-O2, no -ffast-math, no -march). The CUDA kernels
# (csrc/tasks/*.cuh) run there through the SIMT emulation (csrc/runtime/simt_cpu.h).
# Usage: bash tests/csrc/run_kernel_tests.sh [name ...]   (names without .cpp; default: all)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
if [ "$#" -gt 0 ]; then names=("$@"); else
  names=(); for f in "$root"/tests/csrc/test_kernels*.cpp; do names+=("$(basename "$f" .cpp)"); done
fi
for name in "${names[@]}"; do
  echo "== $name"
  g++ -std=c++17 -O2 -Wall -Wextra -pthread -I"$root/csrc" "$root/tests/csrc/$name.cpp" -o "$out/$name"
  "$out/$name"
done
