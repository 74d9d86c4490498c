#!/usr/bin/env bash
# The GPU check: everything a short window on a GPU machine should run, in stages, cheapest first,
# each in its own process under `timeout -s KILL` (a hung persistent kernel cannot be recovered
# in-process), keeping going after a failure; one summary at the end (docs/runtime.md, "GPU check").
#
#   scripts/gpu_check.sh --prepare   on a machine with nvcc and no GPU: build the CUDA modules of
#                                    every graph the stages run, ahead, into build/gpu_cache (the
#                                    same source and flags the GPU machine will ask for); fails if
#                                    the cache is over 64 MiB (what can be copied to the GPU machine)
#   scripts/gpu_check.sh             on the GPU machine: install without dependencies (its own
#                                    torch), then props, the GPU decision, executor, failure (a task
#                                    fails, then clean runs in the same process), one layers stage
#                                    per layer folder (its subset: MPK_GPU_SUBSET, tests/conftest.py),
#                                    sanitizers. Uses build/gpu_cache when present,
#                                    so nvcc is not needed there. No GPU, a CPU-only torch or no
#                                    compute-sanitizer is a FAILURE naming why, never a pass
#   scripts/gpu_check.sh --dry-run   without a GPU (CI, tests/unit/test_gpu_check.py): every stage
#                                    that can run on the CPU backend runs, the executor graphs' CUDA
#                                    modules are built with nvcc, every layer folder is collected on
#                                    the CUDA path, its subset's GPU time estimated (layers-budget:
#                                    they must fit LIMIT_LAYERS); the GPU-only stages say SKIP(dry run)
#
# Output: one log per stage and summary.json in $GPU_CHECK_OUT (default $OUT if set, else
# ./gpu_check_out). Exit status: 0 when no stage failed (a SKIP counts as a pass in --dry-run only).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
MODE=${1:-run}
OUTDIR=${GPU_CHECK_OUT:-${OUT:-$ROOT/gpu_check_out}}
CACHE=$ROOT/build/gpu_cache
CACHE_LIMIT_MIB=64          # what travels to the GPU machine with the working tree
PY=${PYTHON:-python3}
LAYERS=()                   # every layer folder: each gets its own stage, so one failing hides none
# (GPU_CHECK_LAYER_ROOT: another tree of layer folders, for the test's negative control)
for dir in "${GPU_CHECK_LAYER_ROOT:-tests/runtime_python}"/*/; do
    dir=${dir%/}
    [ "${dir##*/}" = test_mode ] || LAYERS+=("$dir")
done
# The run mode's time limits (seconds). They sum to 600, so the whole check fits a 10-minute window
# with the modules built ahead; the layer folders share LIMIT_LAYERS, each getting what is left
# divided by the folders still to run (a fast folder leaves its time to the next ones).
# (GPU_CHECK_LIMIT_LAYERS: another layers limit, for the test's negative control of layers-budget)
LIMIT_INSTALL=40 LIMIT_PROPS=20 LIMIT_EXECUTOR=80 LIMIT_LAYERS=${GPU_CHECK_LIMIT_LAYERS:-310} LIMIT_SANITIZER=40
LIMIT_FAILURE=30            # the failure stage (its module built ahead): 2 launches and 2 kernel-level runs
SANITIZERS=(memcheck racecheck synccheck)
RUN_LIMITS=$((LIMIT_INSTALL + LIMIT_PROPS + LIMIT_EXECUTOR + LIMIT_FAILURE + LIMIT_LAYERS
               + LIMIT_SANITIZER * ${#SANITIZERS[@]}))
# the nvcc that builds the CUDA modules, as the cache keys name it (build.compiler_identity)
IDENTITY='from mirage.mpk import build as b; print(b.compiler_identity(b.compiler_for("cuda")), end="")'
mkdir -p "$OUTDIR"
: > "$OUTDIR/stages.txt"
export MPK_LOG_LEVEL=WARNING PYTHONUNBUFFERED=1
echo "run-mode time limits: install $LIMIT_INSTALL + props $LIMIT_PROPS + executor $LIMIT_EXECUTOR +" \
     "failure $LIMIT_FAILURE +" \
     "layers $LIMIT_LAYERS (${#LAYERS[@]} folders) + sanitizers ${#SANITIZERS[@]} x $LIMIT_SANITIZER =" \
     "$RUN_LIMITS s"

record() {  # record NAME STATUS SECONDS [NOTE]: one stage line in stages.txt and on stdout
    printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$OUTDIR/stages.txt"
    printf '%-28s %-16s %7s  %s\n' "$1" "$2" "$3" "${4:-}"
}

# stage NAME LIMIT_S COMMAND...: run under the limit, log, record; STAGE_S is its whole seconds. The
# log of "layers:rmsnorm" is layers_rmsnorm.log (no ':' in a file name that must travel back).
STAGE_S=0
stage() {
    local name=$1 limit=$2 log="$OUTDIR/${1//:/_}.log" start rc status ms
    shift 2
    start=$(date +%s%N)
    timeout -s KILL "$limit" "$@" > "$log" 2>&1
    rc=$?
    case $rc in 0) status=PASS ;; 137) status="TIMEOUT(${limit}s)" ;; *) status="FAIL(exit $rc)" ;; esac
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    STAGE_S=$((ms / 1000))
    record "$name" "$status" "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))" "$(tail -n 1 "$log")"
}
fail() { record "$1" "FAIL($2)" 0; }            # a stage that could not run, and why
skip() { record "$1" "SKIP(dry run: $2)" 0; }   # --dry-run only: the summary fails a SKIP elsewhere

# Build ahead: run the stage graphs and the layer tests on the CPU backend with MPK_ALSO_BUILD_CUDA,
# so compile() also builds each graph's CUDA module (sm_90a) into the cache.
prepare() {
    local what=$1 bytes mib
    mkdir -p "$CACHE"
    "$PY" -c "$IDENTITY" > "$CACHE/nvcc_identity.txt"
    stage prepare-executor 900 env MPK_ALSO_BUILD_CUDA=90 MPK_CACHE_DIR="$CACHE" \
        "$PY" scripts/gpu_stages.py executor --repeat 2
    stage prepare-failure 900 env MPK_ALSO_BUILD_CUDA=90 MPK_CACHE_DIR="$CACHE" "$PY" scripts/gpu_stages.py failure
    if [ "$what" = all ]; then
        # (the layers stages' subset at cc 90: the graphs the GPU run will ask for)
        stage prepare-layers 3000 env MPK_ALSO_BUILD_CUDA=90 MPK_TEST_CACHE_DIR="$CACHE" MPK_GPU_SUBSET=1 \
            MPK_TEST_CC=90 "$PY" -m pytest -q -p no:cacheprovider "${LAYERS[@]}"
    fi
    bytes=$(du -sb "$CACHE" | cut -f 1)
    mib=$(( (bytes + 1048575) / 1048576 ))
    echo "built ahead: $(grep -l cudaLaunchCooperativeKernel "$CACHE"/*/module.so | wc -l) CUDA modules," \
         "$(find "$CACHE" -name module.so | wc -l) modules in all, $bytes bytes ($mib MiB) in $CACHE" \
         "(limit $CACHE_LIMIT_MIB MiB)"
    if [ "$bytes" -gt $((CACHE_LIMIT_MIB * 1048576)) ]; then
        fail cache-size "$mib MiB > $CACHE_LIMIT_MIB MiB: too big to copy to the GPU machine"
    else
        record cache-size PASS 0 "$mib MiB"
    fi
}

case $MODE in
--prepare)
    prepare all ;;
--dry-run)
    export GPU_CHECK_DRY_RUN=1
    stage props 60 "$PY" scripts/gpu_stages.py props
    # one cache for both stages: prepare-executor runs the same graphs on the CPU again (building their
    # CUDA modules beside), so it finds their CPU modules built here instead of compiling them twice
    stage executor 300 env MPK_CACHE_DIR="$OUTDIR/gpu_cache" "$PY" scripts/gpu_stages.py executor --repeat 3
    stage failure 300 env MPK_CACHE_DIR="$OUTDIR/gpu_cache" "$PY" scripts/gpu_stages.py failure
    CACHE=$OUTDIR/gpu_cache prepare executor
    # Every layer folder as the run mode's layers stage loads it (MPK_TEST_DEVICE=cuda, its subset at
    # the GPU's compute capability, GPU_CHECK_CC, 90 unless given): an import error or a refusal at
    # collection on the CUDA path fails here, without a GPU. One process collects them all (a torch
    # import each cost more than the collections); a stage per folder all the same. Each folder's
    # selected tests and their estimated GPU seconds (scripts/gpu_subset_times.py) are printed; the
    # estimates must add up to LIMIT_LAYERS at most (layers-budget).
    timeout -s KILL 300 env MPK_TEST_DEVICE=cuda MPK_GPU_SUBSET=1 MPK_TEST_CC="${GPU_CHECK_CC:-90}" \
        "$PY" scripts/gpu_stages.py --out "$OUTDIR" collect --limit "$LIMIT_LAYERS" "${LAYERS[@]}" \
        > "$OUTDIR/collect.log" 2>&1
    collected=$?
    for dir in "${LAYERS[@]}"; do
        code= seconds=
        read -r code seconds < <(sed -n "s/^COLLECT ${dir##*/} //p" "$OUTDIR/collect.log")
        case ${code:-none} in
            0) record "collect:${dir##*/}" PASS "$seconds" \
                   "$(sed -n "s/^ESTIMATE ${dir##*/} \(.*\), estimated \([0-9.]* s\).*/\1, estimated \2/p" \
                      "$OUTDIR/collect.log")" ;;
            none) fail "collect:${dir##*/}" "not collected: the collecting process exited $collected" ;;
            *) record "collect:${dir##*/}" "FAIL(exit $code)" "$seconds" "$(tail -n 1 "$OUTDIR/collect_${dir##*/}.log")" ;;
        esac
    done
    budget=$(sed -n 's/^LAYERS //p' "$OUTDIR/collect.log")
    case $budget in
        *PASS) record layers-budget PASS 0 "$budget" ;;
        *FAIL) record layers-budget "FAIL(over ${LIMIT_LAYERS}s)" 0 "$budget" ;;
        *) fail layers-budget "no estimate: the collecting process exited $collected" ;;
    esac
    skip layers "the layer tests need a GPU; each folder was collected on the CUDA path above"
    skip sanitizers "compute-sanitizer needs a GPU" ;;
run)
    if ! "$PY" -c 'import mirage.mpk' 2> /dev/null; then
        timeout -s KILL "$LIMIT_INSTALL" "$PY" -m pip install -q --no-deps --no-build-isolation -e . \
            > "$OUTDIR/install.log" 2>&1 || export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
    fi
    if [ -d "$CACHE" ]; then
        export MPK_CACHE_DIR=$CACHE MPK_TEST_CACHE_DIR=$CACHE
        built_with=$(cat "$CACHE/nvcc_identity.txt")
        here=$("$PY" -c "$IDENTITY" 2> /dev/null)
        if [ "$here" != "$built_with" ]; then
            # No nvcc here, or another one: every module would miss the cache (its key has the nvcc's
            # identity) and compile for minutes. Use the cache alone: a miss fails at once, naming
            # --prepare (build.compile_module).
            export MPK_NVCC=no-nvcc:gpu_check.sh-uses-build/gpu_cache MPK_NVCC_IDENTITY=$built_with
        fi
    fi
    stage props "$LIMIT_PROPS" "$PY" scripts/gpu_stages.py props
    # The decision, at once: without a GPU torch can use, every GPU stage fails with the reason
    # (seconds, not minutes), so "0 failed" always means the stages ran on a GPU.
    no_gpu=$(sed -n 's/^NO GPU: //p' "$OUTDIR/props.log" | tail -n 1)
    if ! grep -q '^RESULT ' "$OUTDIR/props.log"; then
        no_gpu="the props stage did not report (see props.log: $(tail -n 1 "$OUTDIR/props.log"))"
    fi
    no_sanitizer=
    command -v compute-sanitizer > /dev/null \
        || no_sanitizer="compute-sanitizer not on PATH (pip: nvidia-cuda-sanitizer-api, its bin on PATH)"
    if [ -n "$no_gpu" ]; then
        fail gpu "no GPU: $no_gpu"
        for name in executor failure layers; do fail "$name" "not run: no GPU"; done
        fail sanitizers "not run: no GPU${no_sanitizer:+; $no_sanitizer}"
    else
        record gpu PASS 0
        stage executor "$LIMIT_EXECUTOR" "$PY" scripts/gpu_stages.py executor --repeat 100
        stage failure "$LIMIT_FAILURE" "$PY" scripts/gpu_stages.py failure
        left=$LIMIT_LAYERS
        for i in "${!LAYERS[@]}"; do
            dir=${LAYERS[$i]}
            stage "layers:${dir##*/}" $(( left / (${#LAYERS[@]} - i) )) env MPK_TEST_DEVICE=cuda \
                MPK_GPU_SUBSET=1 "$PY" -m pytest -q -p no:cacheprovider "$dir"
            left=$(( left > STAGE_S ? left - STAGE_S : 0 ))
        done
        if [ -n "$no_sanitizer" ]; then
            fail sanitizers "$no_sanitizer"
        else
            for tool in "${SANITIZERS[@]}"; do
                stage "san-$tool" "$LIMIT_SANITIZER" compute-sanitizer --tool "$tool" --error-exitcode 9 \
                    "$PY" scripts/gpu_stages.py small
            done
        fi
    fi ;;
*)
    echo "usage: $0 [--prepare | --dry-run]" >&2
    exit 2 ;;
esac

"$PY" - "$OUTDIR" "$MODE" <<'EOF'
import json, os, sys
out, mode = sys.argv[1], sys.argv[2].lstrip("-")
rows = [line.split("\t") for line in open(os.path.join(out, "stages.txt")).read().splitlines()]
results = []
for name, *_ in rows:
    log = os.path.join(out, f"{name.replace(':', '_')}.log")
    if os.path.exists(log):
        results += [json.loads(x[7:]) for x in open(log).read().splitlines() if x.startswith("RESULT ")]
# A SKIP passes only in a dry run: the run mode has no SKIP, and one there would be a stage not run.
ok = ("PASS", "SKIP") if mode == "dry-run" else ("PASS",)
failed = [n for n, s, _ in rows if not s.startswith(ok)]
skipped = [n for n, s, _ in rows if s.startswith("SKIP")]
status = dict((n, s) for n, s, _ in rows)
on_gpu = mode == "run" and status.get("gpu") == "PASS"
device = next((r.get("name") for r in results if r.get("stage") == "props" and r.get("name")), None)
summary = {"mode": mode, "ran_on_gpu": on_gpu, "device": device if on_gpu else None,
           "stages": [{"name": n, "status": s, "seconds": float(t)} for n, s, t in rows], "results": results}
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
if on_gpu:
    where = f" on {device}"
elif mode == "run":      # the gpu stage's reason: FAIL(no GPU: ...)
    where = f" (nothing ran on a GPU: {status.get('gpu', 'FAIL(no gpu stage)')[5:-1]})"
else:
    where = f" ({mode.replace('-', ' ')}: nothing ran on a GPU)"
names = f": {', '.join(failed)}" if failed else ""
print(f"GPU CHECK{where}: {len(rows)} stages, {len(failed)} failed{names}"
      f"{f', {len(skipped)} skipped' if skipped else ''}; summary {os.path.join(out, 'summary.json')}")
sys.exit(1 if failed else 0)
EOF
