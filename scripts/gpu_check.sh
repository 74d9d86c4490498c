#!/usr/bin/env bash
# The GPU check: everything a short window on a GPU machine should run, in stages, cheapest first,
# each in its own process under `timeout -s KILL` (a hung persistent kernel cannot be recovered
# in-process), keeping going after a failure; one summary at the end (docs/runtime.md, "GPU check").
#
#   scripts/gpu_check.sh --prepare   on a machine with nvcc and no GPU: build the CUDA modules of
#                                    every graph the stages run, ahead, into build/gpu_cache (the
#                                    same source and flags the GPU machine will ask for)
#   scripts/gpu_check.sh             on the GPU machine: install without dependencies (its own
#                                    torch), then props, executor, layers, sanitizers. Uses
#                                    build/gpu_cache when present, so nvcc is not needed there
#   scripts/gpu_check.sh --dry-run   without a GPU (CI, tests/unit/test_gpu_check.py): every stage
#                                    that can run on the CPU backend runs, the executor graphs'
#                                    CUDA modules are built with nvcc, the GPU-only stages say SKIP
#
# Output: one log per stage and summary.json in $GPU_CHECK_OUT (default $OUT if set, else
# ./gpu_check_out). Exit status: 0 when no stage failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODE=${1:-run}
OUTDIR=${GPU_CHECK_OUT:-${OUT:-$ROOT/gpu_check_out}}
CACHE=$ROOT/build/gpu_cache
PY=${PYTHON:-python3}
LAYERS=$(ls -d tests/runtime_python/*/ | grep -v test_mode | tr '\n' ' ')
mkdir -p "$OUTDIR"
: > "$OUTDIR/stages.txt"
export MPK_LOG_LEVEL=WARNING PYTHONUNBUFFERED=1

# stage NAME LIMIT_S COMMAND...: run, log, record "name status seconds"
stage() {
    local name=$1 limit=$2 start rc status ms
    shift 2
    start=$(date +%s%N)
    timeout -s KILL "$limit" "$@" > "$OUTDIR/$name.log" 2>&1
    rc=$?
    case $rc in 0) status=PASS ;; 137) status="TIMEOUT(${limit}s)" ;; *) status="FAIL(exit $rc)" ;; esac
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    printf '%s\t%s\t%d.%03d\n' "$name" "$status" $((ms / 1000)) $((ms % 1000)) >> "$OUTDIR/stages.txt"
    printf '%-12s %-16s %s\n' "$name" "$status" "$(tail -n 1 "$OUTDIR/$name.log")"
}
skip() { printf '%s\tSKIP(%s)\t0\n' "$1" "$2" >> "$OUTDIR/stages.txt"; printf '%-12s SKIP: %s\n' "$1" "$2"; }

# Build ahead: run the stage graphs and the layer tests on the CPU backend with MPK_ALSO_BUILD_CUDA,
# so compile() also builds each graph's CUDA module (sm_90a) into the cache.
prepare() {
    local what=$1
    mkdir -p "$CACHE"
    "$PY" -c 'from mirage.mpk import build; print(build.compiler_identity(build.compiler_for("cuda")), end="")' \
        > "$CACHE/nvcc_identity.txt"
    stage prepare-executor 900 env MPK_ALSO_BUILD_CUDA=90 MPK_CACHE_DIR="$CACHE" \
        "$PY" scripts/gpu_stages.py executor --repeat 2
    if [ "$what" = all ]; then
        # shellcheck disable=SC2086
        stage prepare-layers 3000 env MPK_ALSO_BUILD_CUDA=90 MPK_TEST_CACHE_DIR="$CACHE" \
            "$PY" -m pytest -q -p no:cacheprovider $LAYERS
    fi
    echo "built ahead: $(grep -l cudaLaunchCooperativeKernel "$CACHE"/*/module.so | wc -l) CUDA modules," \
         "$(du -sh "$CACHE" | cut -f 1) in $CACHE"
}

case $MODE in
--prepare)
    prepare all ;;
--dry-run)
    export GPU_CHECK_DRY_RUN=1
    stage props 60 "$PY" scripts/gpu_stages.py props
    stage executor 300 env MPK_CACHE_DIR="$OUTDIR/cpu_cache" "$PY" scripts/gpu_stages.py executor --repeat 3
    CACHE=$OUTDIR/gpu_cache prepare executor
    skip layers "no GPU: the layer tests run on the CPU backend in the suite"
    skip sanitizers "no GPU" ;;
run)
    if ! "$PY" -c 'import mirage.mpk' 2> /dev/null; then
        "$PY" -m pip install -q --no-deps --no-build-isolation -e . > "$OUTDIR/install.log" 2>&1 \
            || export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
    fi
    if [ -d "$CACHE" ]; then
        export MPK_CACHE_DIR=$CACHE MPK_TEST_CACHE_DIR=$CACHE
        command -v nvcc > /dev/null || export MPK_NVCC_IDENTITY="$(cat "$CACHE/nvcc_identity.txt")"
    fi
    stage props 60 "$PY" scripts/gpu_stages.py props
    if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
        skip executor "torch sees no GPU"; skip layers "torch sees no GPU"; skip sanitizers "torch sees no GPU"
    else
        stage executor 240 "$PY" scripts/gpu_stages.py executor --repeat 100
        # shellcheck disable=SC2086
        stage layers 420 env MPK_TEST_DEVICE=cuda "$PY" -m pytest -q -p no:cacheprovider -x $LAYERS
        if command -v compute-sanitizer > /dev/null; then
            for tool in memcheck racecheck synccheck; do
                stage "san-$tool" 120 compute-sanitizer --tool "$tool" --error-exitcode 9 \
                    "$PY" scripts/gpu_stages.py small
            done
        else
            skip sanitizers "compute-sanitizer not on PATH (pip install nvidia-cuda-sanitizer-api)"
        fi
    fi ;;
*)
    echo "usage: $0 [--prepare | --dry-run]" >&2
    exit 2 ;;
esac

"$PY" - "$OUTDIR" <<'EOF'
import json, os, sys
out = sys.argv[1]
rows = [line.split("\t") for line in open(os.path.join(out, "stages.txt")).read().splitlines()]
results = []
for name, *_ in rows:
    log = os.path.join(out, f"{name}.log")
    if os.path.exists(log):
        results += [json.loads(x[7:]) for x in open(log).read().splitlines() if x.startswith("RESULT ")]
summary = {"stages": [{"name": n, "status": s, "seconds": float(t)} for n, s, t in rows], "results": results}
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
failed = [n for n, s, _ in rows if not s.startswith(("PASS", "SKIP"))]
print(f"GPU CHECK: {len(rows)} stages, {len(failed)} failed{': ' + ', '.join(failed) if failed else ''}; "
      f"summary {os.path.join(out, 'summary.json')}")
sys.exit(1 if failed else 0)
EOF
