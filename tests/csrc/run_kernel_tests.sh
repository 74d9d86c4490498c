#!/usr/bin/env bash
# Builds and runs the CPU task-kernel tests (tests/csrc/test_kernels.cpp) with the flags the
# CPU backend uses (-O2, no -ffast-math, no -march). Run from anywhere: bash tests/csrc/run_kernel_tests.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$(mktemp -d)/test_kernels"
trap 'rm -rf "$(dirname "$bin")"' EXIT
g++ -std=c++17 -O2 -Wall -Wextra -I"$root/csrc" "$root/tests/csrc/test_kernels.cpp" -o "$bin"
"$bin"
