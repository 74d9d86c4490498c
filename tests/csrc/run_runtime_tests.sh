#!/usr/bin/env bash
# Builds and runs the C++ runtime tests (tests/csrc/test_runtime.cpp: the executor,
# csrc/runtime/executor.cuh, on the CPU backend): plain -O2, then with 2-slot worker queues (the
# scheduler waits for room), ThreadSanitizer and AddressSanitizer+UBSan.
# Usage: tests/csrc/run_runtime_tests.sh [plain|small|thread|address ...]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/../.."
# a directory of its own: the suite runs modes in parallel (pytest-xdist), and checkouts may share /tmp
out="$(mktemp -d "${TMPDIR:-/tmp}/mpk_runtime_tests.XXXXXX")"
trap 'rm -rf "$out"' EXIT
tests=(test_runtime test_guard)   # test_guard.cpp: csrc/runtime/guard.h alone
for mode in "${@:-plain small thread address}"; do
  for m in $mode; do
    case "$m" in
      plain)   flags=() ;;
      small)   flags=(-DMPK_QUEUE_CAPACITY_LIMIT=2) ;;
      # checking builds, not timed ones (tests/csrc/run_simt_tests.sh says why): a later -O wins
      thread)  flags=(-O1 -g1 -fsanitize=thread) ;;
      address) flags=(-O0 -g1 -fsanitize=address,undefined -fno-omit-frame-pointer) ;;
      *) echo "unknown mode $m (plain|small|thread|address)" >&2; exit 2 ;;
    esac
    for t in "${tests[@]}"; do
      base=(g++ -std=c++17 -O2 -pthread -Wall -Wextra -Icsrc "tests/csrc/$t.cpp")
      echo "== $m: ${base[*]} ${flags[*]}"
      "${base[@]}" "${flags[@]}" -o "$out/${t}_$m"
      "$out/${t}_$m"
    done
  done
done
