#!/usr/bin/env bash
# Builds and runs the C++ runtime test (tests/csrc/test_runtime.cpp): plain -O2, then with
# 2-slot queues (the blocking-push path), ThreadSanitizer and AddressSanitizer.
# Usage: tests/csrc/run_runtime_tests.sh [plain|small|thread|address ...]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${TMPDIR:-/tmp}/mpk_runtime_tests"
mkdir -p "$out"
base=(g++ -std=c++17 -O2 -pthread -Wall -Wextra -Icsrc tests/csrc/test_runtime.cpp)
for mode in "${@:-plain small thread address}"; do
  for m in $mode; do
    case "$m" in
      plain)   flags=() ;;
      small)   flags=(-DMPK_QUEUE_CAPACITY_LIMIT=2) ;;
      thread)  flags=(-g -fsanitize=thread) ;;
      address) flags=(-g -fsanitize=address,undefined -fno-omit-frame-pointer) ;;
      *) echo "unknown mode $m (plain|small|thread|address)" >&2; exit 2 ;;
    esac
    echo "== $m: ${base[*]} ${flags[*]}"
    "${base[@]}" "${flags[@]}" -o "$out/test_runtime_$m"
    "$out/test_runtime_$m"
  done
done
