"""Several layer test files as one N-rank job: each file's __main__ in turn, as `python FILE` runs it.

    mpirun -n N python tests/runtime_python/test_mode/multirank_layer_files.py OUT_DIR FILE...

Each FILE runs through runpy with run_name "__main__" and sys.argv [FILE] (so
testing.run_cases_as_script runs every case of it on every rank, exactly as `mpirun -n N python FILE`
would), its case directories under OUT_DIR/<layer>/ (MPK_OUTPUT_DIR), between the lines
`[rank r] LAYERFILE BEGIN <layer>` and `[rank r] LAYERFILE END <layer> <seconds>`. A failing case
ends the whole job (its rank's excepthook calls MPI_Abort), so the files after it are not reached.

Why one job: a rank's `import torch` costs about 2.5 s of CPU, which was more than half of a layer
file's job; test_layers_multirank.py ran 2 + 4 ranks for each of ~30 files, ~400 s of a 2-core CI run
importing torch. It still launches some files as their own job, the literal command.
"""
import os
import runpy
import sys
import time

from mirage.mpk import testing


def main(out_dir: str, files: list[str]) -> None:
    world = testing.script_world()        # MPI up, the abort-on-exception hook installed
    for path in files:
        layer = os.path.basename(os.path.dirname(os.path.abspath(path)))
        os.environ["MPK_OUTPUT_DIR"] = os.path.join(out_dir, layer)
        testing.say(f"LAYERFILE BEGIN {layer}")
        t0 = time.perf_counter()
        sys.argv = [path]
        runpy.run_path(path, run_name="__main__")
        if world.size > 1:
            world.comm.Barrier()          # every rank done with this file before the next starts
        testing.say(f"LAYERFILE END {layer} {time.perf_counter() - t0:.1f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
