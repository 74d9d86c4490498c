#!/usr/bin/env bash
# Builds and runs the SIMT emulation test (tests/csrc/test_simt.cpp; docs/simt.md): plain -O2,
# the ucontext fallback, ThreadSanitizer, AddressSanitizer+UBSan, and the aarch64 switch under
# qemu-user when aarch64-linux-gnu-g++ and qemu-aarch64 are installed (else skipped). Under TSan the
# missing-barrier control must be a TSan report and its fixed kernel clean; under ASan a raw
# shared-memory overflow and a global-memory overflow must be ASan reports. Plain also runs the
# static __shared__ poison's negative control (built with -DMPK_SIMT_STATIC_POISON=0, its test must
# fail); refuse checks that a task kernel reading blockIdx / gridDim does not compile with g++
# (tests/csrc/refuse_blockidx.cu; nvcc: tests/unit/test_nvcc.py).
# ptx builds and runs tests/csrc/test_ptx.cpp (runtime/ptx.h: mma.sync, ldmatrix, cp.async) and
# tests/csrc/test_mbarrier.cpp (mbarrier), test_tma.cpp (cp.async.bulk.tensor with tensor maps) and
# test_wgmma.cpp (wgmma, stmatrix) plain, under ThreadSanitizer and under AddressSanitizer+UBSan.
# Usage: tests/csrc/run_simt_tests.sh [plain|ucontext|thread|address|refuse|ptx|aarch64 ...]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/../.."
# a directory of its own: the suite runs modes in parallel (pytest-xdist), and checkouts may share /tmp
out="$(mktemp -d "${TMPDIR:-/tmp}/mpk_simt_tests.XXXXXX")"
trap 'rm -rf "$out"' EXIT
base=(g++ -std=c++17 -O2 -pthread -Wall -Wextra -Werror -Icsrc tests/csrc/test_simt.cpp)
# The sanitizer builds check, they do not time: TSan at -O1 (as mirage/mpk/build.py's sanitize builds),
# ASan+UBSan at -O0, where nothing is optimized away and g++ compiles 3-4x faster than at -O2 (UBSan's
# checks made -O2 the slowest build of the suite's C++ tests: 21 s of g++ for test_wgmma.cpp, 6 at -O0).
# A later -O wins, so these follow the -O2 of the commands they extend.
tsan=(-O1 -g1 -fsanitize=thread)
asan=(-O0 -g1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)

# expect NAME WANT_RC PATTERN|"" FORBIDDEN|"" -- CMD...: run, check the exit code and the output
expect() {
  local name=$1 want_rc=$2 pattern=$3 forbid=$4; shift 5
  local log="$out/$name.log" rc=0
  "$@" >"$log" 2>&1 || rc=$?
  if [[ $rc -ne $want_rc ]] || { [[ -n $pattern ]] && ! grep -q "$pattern" "$log"; } ||
     { [[ -n $forbid ]] && grep -q "$forbid" "$log"; }; then
    echo "FAIL $name: exit $rc (want $want_rc), want '$pattern'${forbid:+, not '$forbid'}; log $log:"
    tail -40 "$log"
    return 1
  fi
  echo "PASS $name: exit $rc${pattern:+, '$pattern' found}"
}

for mode in "${@:-plain ucontext thread address refuse ptx aarch64}"; do
  for m in $mode; do
    case "$m" in
      plain)    flags=() ;;
      ucontext) flags=(-DMPK_SIMT_UCONTEXT=1) ;;
      thread)   flags=("${tsan[@]}") ;;
      address)  flags=("${asan[@]}") ;;
      aarch64)
        if ! command -v aarch64-linux-gnu-g++ >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
          echo "SKIP aarch64: needs aarch64-linux-gnu-g++ and qemu-aarch64 (Debian: g++-aarch64-linux-gnu qemu-user)"
          continue
        fi
        echo "== aarch64: aarch64-linux-gnu-g++ ${base[*]:1}, run under qemu-aarch64"
        aarch64-linux-gnu-g++ "${base[@]:1}" -o "$out/test_simt_aarch64"
        qemu-aarch64 -L /usr/aarch64-linux-gnu "$out/test_simt_aarch64"
        continue ;;
      ptx)
        for t in test_ptx test_mbarrier test_tma test_wgmma; do
          ptx=(g++ -std=c++17 -O2 -pthread -Wall -Wextra -Werror -Icsrc "tests/csrc/$t.cpp")
          echo "== ptx: ${ptx[*]}"
          "${ptx[@]}" -o "$out/$t" && "$out/$t"
          echo "== $t under ThreadSanitizer: ${tsan[*]}"
          "${ptx[@]}" "${tsan[@]}" -o "$out/${t}_tsan"
          TSAN_OPTIONS="halt_on_error=1 exitcode=66" "$out/${t}_tsan"
          echo "== $t under AddressSanitizer+UBSan: ${asan[*]}"
          "${ptx[@]}" "${asan[@]}" -o "$out/${t}_asan"
          ASAN_OPTIONS="detect_leaks=1" "$out/${t}_asan"
        done
        continue ;;
      refuse)
        echo "== refuse: g++ -fsyntax-only tests/csrc/refuse_blockidx.cu, reading blockIdx / gridDim / neither"
        gxx=(g++ -std=c++17 -x c++ -fsyntax-only -Icsrc tests/csrc/refuse_blockidx.cu)
        expect refuse-blockIdx 1 "static assertion failed: task kernel reads blockIdx: a persistent worker runs many tasks on one block; use the task's tiles and iparams" "" -- "${gxx[@]}" -DMPK_READ=1
        expect refuse-blockIdx-line 1 "refuse_blockidx.cu:15:.*required from here" "" -- "${gxx[@]}" -DMPK_READ=1
        expect refuse-gridDim 1 "static assertion failed: task kernel reads gridDim" "" -- "${gxx[@]}" -DMPK_READ=2
        expect refuse-control 0 "" "error" -- "${gxx[@]}" -DMPK_READ=0
        continue ;;
      *) echo "unknown mode $m (plain|ucontext|thread|address|refuse|ptx|aarch64)" >&2; exit 2 ;;
    esac
    echo "== $m: ${base[*]} ${flags[*]}"
    "${base[@]}" "${flags[@]}" -o "$out/test_simt_$m"
    bin="$out/test_simt_$m"
    case "$m" in
      thread)
        # TSan exits 66 on a report; the suite itself must be report-free
        TSAN_OPTIONS="halt_on_error=0 exitcode=66" "$bin"
        expect tsan-race 66 "SUMMARY: ThreadSanitizer: data race .*in rotate_kernel<" "" -- \
          env TSAN_OPTIONS="exitcode=66" "$bin" tsan-race
        expect tsan-race2 66 "SUMMARY: ThreadSanitizer: data race .*in block_sum_one_barrier" "" -- \
          env TSAN_OPTIONS="exitcode=66" "$bin" tsan-race2
        expect tsan-clean 0 "tsan-clean: ran" "WARNING: ThreadSanitizer" -- \
          env TSAN_OPTIONS="exitcode=66" "$bin" tsan-clean ;;
      address)
        ASAN_OPTIONS="detect_leaks=1" "$bin"
        expect asan-smem 1 "ERROR: AddressSanitizer: heap-buffer-overflow" "asan-smem: no report" -- "$bin" asan-smem
        expect asan-global 1 "ERROR: AddressSanitizer: heap-buffer-overflow" "asan-global: no report" -- "$bin" asan-global ;;
      plain)
        "$bin"
        "${base[@]}" -DMPK_SIMT_STATIC_POISON=0 -o "$out/test_simt_nopoison"
        expect static-poison-off 1 "static __shared__ read in task 2 of a worker block: threadIdx.x 0 saw 0x000003e8" "" -- \
          "$out/test_simt_nopoison" static-poison
        expect static-poison-on 0 "static-poison: 0 failure(s)" "" -- "$bin" static-poison ;;
      *)
        "$bin" ;;
    esac
  done
done
